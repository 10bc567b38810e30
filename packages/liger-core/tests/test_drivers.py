"""The autograd drivers of `liger_core.drivers`, over stand-in kernels written in torch (no vendor)."""

from __future__ import annotations

import pytest
import torch

from liger_core.backend import LigerBackendError

# -- rotary (drivers/rotary.py) and embedding (drivers/embedding.py) ------------------------------


class _TorchRotaryKernels:
    """The rotation in torch, written into the driver's outputs; records the layouts it was given."""

    def __init__(self, protocol):
        self.protocol = protocol
        self.calls = []

    def rotate(self, q, k, cos, sin, q_out, k_out, unsqueeze_dim, mrope_section, interleaved, backward):
        from liger_core.ops._rope import rotate_qk

        assert mrope_section is None and not interleaved
        self.calls.append((q.stride(), q_out.stride(), backward))
        # The transpose of a rotation by angle a is the rotation by -a.
        q_rot, k_rot = rotate_qk(q, k, cos, -sin if backward else sin, unsqueeze_dim)
        q_out.copy_(q_rot)
        k_out.copy_(k_rot)


def test_rotary_driver_refuses_kernels_of_another_protocol():
    from liger_core.drivers import rotary

    with pytest.raises(LigerBackendError, match=rf"drivers\.rotary must declare protocol = {rotary.PROTOCOL}.*got 0"):
        rotary.autograd_functions(_TorchRotaryKernels(protocol=0), __name__)


def test_rotary_driver_keeps_transposed_views_layout_without_copies():
    # LLaMA's q/k: (b, h, s, d) views of (b, s, h, d) projections. The kernels get them as they
    # are, the outputs in their layout, the gradients in the outputs' layout.
    from liger_core.drivers import rotary
    from liger_core.ops import rope

    kernels = _TorchRotaryKernels(rotary.PROTOCOL)
    functions = rotary.autograd_functions(kernels, __name__)
    assert functions["rope"].__name__ == "LigerRopeFunction" and functions["rope"].__module__ == __name__
    args = rope.args("cpu", shape=(2, 4, 2, 5, 8), transposed=True)
    q, k = args["q"].requires_grad_(), args["k"].requires_grad_()
    assert not q.is_contiguous()
    q_out, k_out = functions["rope"].apply(q, k, args["cos"], args["sin"], None, 1)
    assert q_out.stride() == q.stride() and k_out.stride() == k.stride()
    assert kernels.calls[0][:2] == (q.stride(), q.stride())
    dq_in = torch.randn(q.shape, dtype=q.dtype).contiguous()  # another layout than q's
    torch.autograd.backward((q_out, k_out), (dq_in, torch.zeros_like(k_out)))
    assert q.grad.stride() == q.stride() and k.grad.stride() == k.stride()
    assert kernels.calls[1] == (dq_in.stride(), q.stride(), True)
    q_ref = q.detach().clone().requires_grad_()
    rope.math(q_ref, k.detach(), args["cos"], args["sin"], None, 1)[0].backward(dq_in)
    torch.testing.assert_close(q.grad, q_ref.grad)
    assert torch.count_nonzero(k.grad) == 0


def test_rotary_driver_checks_arguments_before_the_kernels():
    from liger_core.drivers import rotary

    kernels = _TorchRotaryKernels(rotary.PROTOCOL)
    rope_function = rotary.autograd_functions(kernels, __name__)["rope"]
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    with pytest.raises((ValueError, TypeError), match="rope"):
        rope_function.apply(q, k, torch.randn(1, 3, 6), torch.randn(1, 3, 6), None, 1)
    assert kernels.calls == []


class _TorchEmbeddingKernels:
    def __init__(self, protocol):
        self.protocol = protocol

    def forward(self, weight, idx):
        assert idx.dim() == 1 and weight.stride(-1) == 1
        return weight[idx]

    def backward(self, dy, idx, num_embeddings, dtype, padding_idx):
        assert dy.stride(-1) == 1 and dy.shape == (idx.numel(), dy.shape[-1])
        grad = torch.zeros((num_embeddings, dy.shape[-1]), dtype=torch.float32).index_add_(0, idx.long(), dy.float())
        if padding_idx is not None:
            grad[padding_idx] = 0
        return grad.to(dtype)


def test_embedding_driver_refuses_kernels_of_another_protocol():
    from liger_core.drivers import embedding

    with pytest.raises(
        LigerBackendError, match=rf"drivers\.embedding must declare protocol = {embedding.PROTOCOL}.*got None"
    ):
        embedding.autograd_function(object(), __name__)


def test_embedding_driver_flat_rows_and_its_deferred_index_error():
    from liger_core.drivers import embedding

    function = embedding.autograd_function(_TorchEmbeddingKernels(embedding.PROTOCOL), __name__)
    assert function.__name__ == "LigerEmbeddingFunction"
    weight = torch.randn(6, 4).t().contiguous().t().requires_grad_()  # column-major
    indices = torch.tensor([[1, 3, 1], [0, 5, 3]])
    out = function.apply(weight, indices, -1)
    assert out.shape == (2, 3, 4)
    torch.testing.assert_close(out, torch.nn.functional.embedding(indices, weight.detach()))
    dy = torch.randn(2, 4, 3).transpose(1, 2)  # strided incoming gradient
    out.backward(dy)
    ref = weight.detach().clone().requires_grad_()
    torch.nn.functional.embedding(indices, ref, padding_idx=5).backward(dy)
    torch.testing.assert_close(weight.grad, ref.grad)
    with pytest.raises(IndexError, match=r"embedding: indices must be in \[0, 6\).*1 are not \(first: 6\)"):
        function.apply(weight, torch.tensor([0, 6]), None)
