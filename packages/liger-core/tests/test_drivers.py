"""liger_core.drivers: each driver refuses kernels of another protocol version, and the driver
logic itself (layout, in-place policy, what reaches the kernels) on kernels written in torch."""

from __future__ import annotations

from functools import partial

import pytest
import torch
import torch.nn.functional as F

from liger_core.backend import LigerBackendError
from liger_core.drivers import dyt as dyt_driver
from liger_core.drivers import glu as glu_driver
from liger_core.drivers import softmax as softmax_driver
from liger_core.drivers import sparsemax as sparsemax_driver
from liger_core.ops.sparsemax import math as sparsemax_math

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


def test_embedding_backward_helpers_sort_int32_keys_when_the_table_allows():
    from liger_core.drivers import embedding

    idx = torch.tensor([4, 1, 4, 0, 1, 4])
    sorted_idx, order = embedding.sorted_positions(idx, 5)
    assert sorted_idx.dtype == torch.int32 and sorted_idx.tolist() == [0, 1, 1, 4, 4, 4]
    assert order.tolist() == [3, 1, 4, 0, 2, 5]  # stable: equal rows keep their position order
    assert embedding.sorted_positions(idx, 2**31)[0].dtype == torch.int64  # row numbers past int32
    assert embedding.looked_up_rows(idx, 6).tolist() == [1, 1, 0, 0, 1, 0]


# -- norm family: drivers/rms_norm.py (+ fused_add), modulated_rms_norm, layer_norm, poly_norm, group_norm --


class _TorchRMSNormKernels:
    """`liger_core.drivers.rms_norm.RMSNormKernels` in plain torch (fp32 math, casting mode
    "none"), recording what the driver hands the kernels."""

    protocol = 1

    def __init__(self):
        self.calls = []

    def forward(self, x2d, weight, eps, offset, casting_mode):
        rstd = torch.rsqrt(x2d.float().pow(2).mean(-1) + eps)
        y = x2d.float() * rstd[:, None]
        if weight is not None:
            y = y * (weight.float() + offset)
        return y.to(x2d.dtype), rstd, "state"

    def backward(self, dy2d, x2d, weight, rstd, offset, casting_mode, dx, need_dw, state):
        self.calls.append(("backward", dy2d, dx, need_dw, state))
        x_hat = x2d.float() * rstd[:, None]
        g = dy2d.float() * (weight.float() + offset) if weight is not None else dy2d.float()
        dx.copy_(rstd[:, None] * (g - x_hat * (g * x_hat).mean(-1, keepdim=True)))
        return (dy2d.float() * x_hat).sum(0).to(weight.dtype) if weight is not None else None

    def fused_add_forward(self, x2d, residual2d, weight, eps, offset, casting_mode):
        s = (x2d.float() + residual2d.float()).to(x2d.dtype)
        y, rstd, state = self.forward(s, weight, eps, offset, casting_mode)
        return y, s, rstd, state

    def fused_add_backward(self, dy2d, dres2d, s2d, weight, rstd, offset, casting_mode, dx, dr, need_dw, state):
        self.calls.append(("fused_add_backward", dy2d, dx, dr))
        dw = self.backward(dy2d, s2d, weight, rstd, offset, casting_mode, dx, need_dw, state)
        if dres2d is not None:
            dx += dres2d
        if dr is not None:
            dr.copy_(dx)
        return dw


def _rms_norm_functions(kernels):
    from liger_core.drivers import rms_norm as driver

    return driver.autograd_functions(kernels, __name__)


@pytest.mark.parametrize("family", ["rms_norm", "modulated_rms_norm", "layer_norm", "poly_norm", "group_norm"])
def test_norm_drivers_refuse_kernels_of_another_protocol(family):
    import importlib

    driver = importlib.import_module(f"liger_core.drivers.{family}")

    class Stale:
        protocol = driver.PROTOCOL + 1

    build = getattr(driver, "autograd_functions", None) or driver.autograd_function
    with pytest.raises(
        LigerBackendError, match=rf"liger_core\.drivers\.{family} must declare protocol = {driver.PROTOCOL}"
    ):
        build(Stale(), __name__)


def test_rms_norm_driver_writes_in_place_only_into_a_dense_gradient():
    kernels = _TorchRMSNormKernels()
    rms = _rms_norm_functions(kernels)["rms_norm"]
    assert rms.__name__ == "LigerRMSNormFunction" and rms.__module__ == __name__
    x = torch.randn(6, 8, requires_grad=True)
    w = torch.randn(8)
    dense = torch.randn(6, 8)
    rms.apply(x, w, 1e-6, 0.0, "none", True).backward(dense)
    (_, dy2d, dx, need_dw, state), *_ = kernels.calls
    # Dense and in place: grad_x is the incoming gradient's own memory; the weight wants no grad.
    assert dx.data_ptr() == dy2d.data_ptr() and need_dw is False and state == "state"
    assert x.grad.data_ptr() == dense.data_ptr()

    # A gradient broadcast over rows: a new buffer, the gradient left alone, rows kept at stride 0.
    kernels.calls.clear()
    row = torch.randn(8)
    x2 = x.detach().clone().requires_grad_()
    rms.apply(x2, w, 1e-6, 0.0, "none", True).backward(row.expand(6, 8))
    (_, dy2d, dx, _, _), *_ = kernels.calls
    assert dy2d.stride() == (0, 1) and dx.data_ptr() != dy2d.data_ptr()
    x_ref = x.detach().clone().requires_grad_()
    torch.nn.functional.rms_norm(x_ref, (8,), w, 1e-6).backward(row.expand(6, 8))
    torch.testing.assert_close(x2.grad, x_ref.grad)


def test_rms_norm_driver_keeps_a_transposed_views_layout():
    """Gemma-3's q_norm gets the transposed query view (batch, heads, seq, head_dim) of a (batch, seq,
    heads, head_dim) projection: read where it lies (no copy), y and grad_x in that layout (as stock
    gives: attention's output then needs no copy for o_proj), values as for contiguous rows."""
    kernels = _TorchRMSNormKernels()
    rms = _rms_norm_functions(kernels)["rms_norm"]
    projection = torch.randn(2, 5, 3, 8)
    x = projection.transpose(1, 2).requires_grad_()
    w = torch.randn(8)
    y = rms.apply(x, w, 1e-6, 0.0, "none", False)
    assert y.stride() == x.stride()
    x_ref = projection.transpose(1, 2).clone().requires_grad_()
    y_ref = torch.nn.functional.rms_norm(x_ref, (8,), w, 1e-6)
    torch.testing.assert_close(y, y_ref)
    for dy in (torch.randn(2, 5, 3, 8).transpose(1, 2), torch.randn(2, 3, 5, 8)):  # y's layout, then another
        x.grad = x_ref.grad = None
        kernels.calls.clear()
        rms.apply(x, w, 1e-6, 0.0, "none", False).backward(dy)
        y_ref = torch.nn.functional.rms_norm(x_ref, (8,), w, 1e-6)
        y_ref.backward(dy)
        assert x.grad.stride() == x.stride()
        torch.testing.assert_close(x.grad, x_ref.grad)
        (_, dy2d, _, _, _), *_ = kernels.calls
        if dy.stride() == x.stride():
            assert dy2d.data_ptr() == dy.data_ptr()  # the gradient in y's layout is read in place


@pytest.mark.parametrize("residual_dtype", [torch.float32, torch.bfloat16])
def test_fused_add_rms_norm_driver_shares_the_residual_gradient_when_dtypes_agree(residual_dtype):
    kernels = _TorchRMSNormKernels()
    fused = _rms_norm_functions(kernels)["fused_add_rms_norm"]
    x = torch.randn(4, 8, requires_grad=True)
    r = torch.randn(4, 8, dtype=residual_dtype, requires_grad=True)
    w = torch.randn(8, requires_grad=True)
    y, s = fused.apply(x, r, w, 1e-6, 0.0, "none", False)
    (y.sum() + 2 * s.sum()).backward()
    (_, _, dx, dr), *_ = kernels.calls
    assert (dr is None) == (residual_dtype == torch.float32)
    assert r.grad.dtype == residual_dtype
    x_ref = x.detach().clone().requires_grad_()
    r_ref = r.detach().clone().requires_grad_()
    w_ref = w.detach().clone().requires_grad_()
    s_ref = (x_ref + r_ref).to(x.dtype)
    (torch.nn.functional.rms_norm(s_ref, (8,), w_ref, 1e-6).sum() + 2 * s_ref.sum()).backward()
    for got, want in ((x.grad, x_ref.grad), (r.grad, r_ref.grad), (w.grad, w_ref.grad)):
        torch.testing.assert_close(got, want)


def test_fused_add_rms_norm_driver_passes_an_unused_output_s_gradient_straight_through():
    kernels = _TorchRMSNormKernels()
    fused = _rms_norm_functions(kernels)["fused_add_rms_norm"]
    x = torch.randn(4, 8, requires_grad=True)
    r = torch.randn(4, 8, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(8, requires_grad=True)
    _, s = fused.apply(x, r, w, 1e-6, 0.0, "none", False)
    dres = torch.randn(4, 8)
    s.backward(dres)
    # y unused: no kernel runs, the weight gets no gradient (as in the reference's graph).
    assert kernels.calls == [] and w.grad is None
    torch.testing.assert_close(x.grad, dres)
    torch.testing.assert_close(r.grad, dres.bfloat16())


def test_layer_norm_driver_asks_only_for_the_parameter_gradients_autograd_needs():
    from liger_core.drivers import layer_norm as driver

    seen = []

    class TorchLayerNormKernels:
        protocol = driver.PROTOCOL

        def forward(self, x2d, weight, bias, eps):
            mean = x2d.float().mean(-1)
            rstd = torch.rsqrt(x2d.float().var(-1, unbiased=False) + eps)
            y = (x2d.float() - mean[:, None]) * rstd[:, None] * weight + bias
            return y.to(x2d.dtype), mean, rstd, None

        def backward(self, dy2d, x2d, weight, bias, mean, rstd, dx, need_dw, need_db, state):
            seen.append((need_dw, need_db, dx.shape, dy2d.stride()))
            x_hat = (x2d.float() - mean[:, None]) * rstd[:, None]
            g = dy2d.float() * weight
            dx.copy_(rstd[:, None] * (g - g.mean(-1, keepdim=True) - x_hat * (g * x_hat).mean(-1, keepdim=True)))
            return (dy2d * x_hat).sum(0), dy2d.sum(0)

    ln = driver.autograd_function(TorchLayerNormKernels(), __name__)
    x = torch.randn(2, 3, 8, requires_grad=True)
    w, b = torch.randn(8, requires_grad=True), torch.randn(8)
    row = torch.randn(8)
    ln.apply(x, w, b, 1e-5).backward(row.expand(2, 3, 8))
    assert seen == [(True, False, (6, 8), (0, 1))] and b.grad is None
    x_ref, w_ref = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch.nn.functional.layer_norm(x_ref, (8,), w_ref, b, 1e-5).backward(row.expand(2, 3, 8))
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(w.grad, w_ref.grad)


# -- end of the norm family's block ---------------------------------------------------------------


# -- cross_entropy, fused_linear_cross_entropy, vocab_parallel_cross_entropy -----------------


class _KernelsOfAnotherVersion:
    protocol = 0


@pytest.mark.parametrize(
    "family",
    [
        "cross_entropy",
        "fused_linear_cross_entropy",
        "fused_linear_scaled_cross_entropy",
        "vocab_parallel_cross_entropy",
    ],
)
def test_cross_entropy_drivers_refuse_another_protocol(family):
    import importlib

    driver = importlib.import_module(f"liger_core.drivers.{family}")
    with pytest.raises(
        LigerBackendError, match=rf"liger_core\.drivers\.{family} must declare protocol = {driver.PROTOCOL}"
    ):
        driver.autograd_function(_KernelsOfAnotherVersion(), __name__)


class _TorchCrossEntropyKernels:
    """cross_entropy's protocol in plain torch (mean reduction only), recording what the driver passes."""

    protocol = 1

    def __init__(self):
        self.outs = []

    def rows(self, logits):
        return logits if logits.stride(-1) == 1 else logits.contiguous()

    def forward(self, x, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, rz):
        lse = torch.logsumexp(x.float(), dim=-1)
        loss = (lse - x.float().gather(1, target[:, None])[:, 0]).mean()
        return loss.to(x.dtype), torch.zeros((), dtype=x.dtype), (target, lse), reduction

    def backward(self, grad_loss, x, saved, state, out):
        target, lse = saved
        self.outs.append(out)
        grad = torch.softmax(x.float(), dim=-1)
        grad[torch.arange(x.shape[0]), target] -= 1
        grad = (grad * grad_loss / x.shape[0]).to(x.dtype)
        return grad if out is None else out.copy_(grad)


@pytest.mark.parametrize("in_place", [False, True])
def test_cross_entropy_driver_in_place_policy(in_place):
    from liger_core.drivers import cross_entropy as driver

    kernels = _TorchCrossEntropyKernels()
    function = driver.autograd_function(kernels, __name__)
    logits = torch.randn(4, 7, requires_grad=True)
    target = torch.tensor([0, 3, 6, 2])
    x = logits * 1.0  # a non-leaf the gradient may overwrite
    loss, z = function.apply(x, target, None, -100, 0.0, 0.0, "mean", None, True, in_place)
    assert not z.requires_grad
    loss.backward()
    torch.testing.assert_close(logits.grad, torch.autograd.grad(F.cross_entropy(logits, target), logits)[0])
    # The kernel gets the logits as its output buffer only when the caller opted in.
    assert (kernels.outs[0] is not None) == in_place


class _TorchFusedLinearCrossEntropyKernels:
    """fused_linear_cross_entropy's protocol in plain torch ("mean" and "none"), recording the calls."""

    protocol = 1

    def __init__(self):
        self.calls = []

    def _grads(self, x, w, target, up):
        x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
        with torch.enable_grad():
            rows = F.cross_entropy(x @ w.t(), target, reduction="none")
            return torch.autograd.grad(rows, (x, w), up.expand_as(rows))

    def forward(self, x, w, target, bias, ce_weight, ii, lss, ls, reduction, softcap, rz, accum, needs, grads_now):
        self.calls.append(("forward", needs, grads_now))
        rows = F.cross_entropy(x @ w.t(), target, reduction="none")
        loss = rows.mean() if reduction == "mean" else rows
        grads = None
        if grads_now:
            gx, gw = self._grads(x, w, target, torch.full((1,), 1.0 / len(target)))
            grads = (gx, gw, None)
        return loss, torch.zeros(()), grads, (x, w, target), None

    def scale_grads(self, grads, grad_loss, state):
        self.calls.append(("scale_grads",))
        return tuple(None if g is None else g.mul_(grad_loss) for g in grads)

    def backward(self, grad_loss, saved, state, needs):
        self.calls.append(("backward", needs))
        x, w, target = saved
        return (*self._grads(x, w, target, grad_loss), None)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_fused_linear_cross_entropy_driver_gradients_in_forward_or_backward(reduction):
    from liger_core.drivers import fused_linear_cross_entropy as driver

    kernels = _TorchFusedLinearCrossEntropyKernels()
    function = driver.autograd_function(kernels, __name__)
    x = torch.randn(5, 3, requires_grad=True)
    w = torch.randn(6, 3, requires_grad=True)
    target = torch.tensor([0, 1, 5, 2, 4])
    loss = function.apply(x, w, target, None, None, -100, 0.0, 0.0, reduction, None, False, None)
    (loss.sum() * 2.0).backward()
    ref_x, ref_w = x.detach().requires_grad_(), w.detach().requires_grad_()
    (F.cross_entropy(ref_x @ ref_w.t(), target, reduction=reduction).sum() * 2.0).backward()
    torch.testing.assert_close(x.grad, ref_x.grad)
    torch.testing.assert_close(w.grad, ref_w.grad)
    # A scalar loss: gradients in the forward, scaled in the backward; "none": recomputed in the backward.
    fused = reduction == "mean"
    assert kernels.calls[0] == ("forward", (True, True, False), fused)
    assert kernels.calls[1][0] == ("scale_grads" if fused else "backward")


# -- activations and softmax family: glu, dyt, softmax, sparsemax --------------------------------


class _WrongProtocol:
    protocol = 0


@pytest.mark.parametrize(
    ("build", "family", "version"),
    [
        (glu_driver.autograd_functions, "glu", glu_driver.PROTOCOL),
        (dyt_driver.autograd_function, "dyt", dyt_driver.PROTOCOL),
        (softmax_driver.autograd_function, "softmax", softmax_driver.PROTOCOL),
        (sparsemax_driver.autograd_function, "sparsemax", sparsemax_driver.PROTOCOL),
    ],
)
def test_act_drivers_refuse_another_protocol(build, family, version):
    with pytest.raises(LigerBackendError, match=rf"drivers\.{family} must declare protocol = {version}\b.*got 0"):
        build(_WrongProtocol(), __name__)


class _TorchSoftmaxKernels:
    protocol = softmax_driver.PROTOCOL

    @staticmethod
    def forward(x2d):
        assert x2d.ndim == 2 and (x2d.stride(-1) == 1 or x2d.shape[-1] <= 1)
        return torch.softmax(x2d.float(), -1).to(x2d.dtype), ("state", x2d.shape)

    @staticmethod
    def backward(dy2d, y, state):
        assert state == ("state", y.shape)
        return (y * (dy2d - (dy2d * y).sum(-1, keepdim=True))).to(y.dtype)


class _TorchSparsemaxKernels:
    """Saves the input rows (CUDA's choice) to check that the driver hands the saved tuple back."""

    protocol = sparsemax_driver.PROTOCOL

    @staticmethod
    def forward(x2d):
        return sparsemax_math(x2d, -1), (x2d,), None

    @staticmethod
    def backward(dy2d, saved, state):
        (x2d,) = saved
        inside = sparsemax_math(x2d, -1) > 0
        mean = (dy2d * inside).sum(-1, keepdim=True) / inside.sum(-1, keepdim=True)
        return torch.where(inside, dy2d - mean, 0.0)


def test_softmax_driver_rows_and_state():
    fn = softmax_driver.autograd_function(_TorchSoftmaxKernels(), __name__)
    x = torch.randn(3, 5, 8, dtype=torch.float32).transpose(0, 1).requires_grad_()  # strided rows
    y = fn.apply(x)
    grad = torch.randn_like(y).expand(5, 3, 8)  # broadcast rows: passed as stride-0 rows
    y.backward(grad)
    x_ref = x.detach().clone().requires_grad_()
    torch.softmax(x_ref, -1).backward(grad)
    torch.testing.assert_close(y, torch.softmax(x.detach(), -1))
    torch.testing.assert_close(x.grad, x_ref.grad)


def test_sparsemax_driver_moves_dim_and_returns_saved():
    fn = sparsemax_driver.autograd_function(_TorchSparsemaxKernels(), __name__)
    x = torch.randn(4, 6, 5, dtype=torch.float32, requires_grad=True)
    y = fn.apply(x, 1)
    grad = torch.randn_like(y)
    y.backward(grad)
    x_ref = x.detach().clone().requires_grad_()
    sparsemax_math(x_ref, 1).backward(grad)
    torch.testing.assert_close(y, sparsemax_math(x.detach(), 1))
    torch.testing.assert_close(x.grad, x_ref.grad)


class _TorchGLUKernels:
    protocol = glu_driver.PROTOCOL

    @staticmethod
    def _act(a, activation):
        if activation == glu_driver.SILU:
            return torch.nn.functional.silu(a)
        return torch.nn.functional.gelu(a, approximate="tanh")

    def forward(self, a, b, activation):
        return self._act(a, activation) * b, None

    def backward(self, dc, a, b, activation, in_place, state):
        with torch.enable_grad():
            a_, b_ = a.detach().requires_grad_(), b.detach().requires_grad_()
            da, db = torch.autograd.grad(self._act(a_, activation) * b_, (a_, b_), dc)
        if in_place:
            # Written through .data, as a kernel writes: behind autograd's version counters.
            a.data.copy_(da)
            b.data.copy_(db)
            return a, b
        return da, db

    def gate_up_forward(self, gate_up, activation):
        gate, up = gate_up.chunk(2, -1)
        return self._act(gate, activation) * up, None

    def gate_up_backward(self, dc, gate_up, activation, in_place, state):
        gate, up = gate_up.chunk(2, -1)
        dgate, dup = self.backward(dc, gate, up, activation, False, None)
        grad = torch.cat((dgate, dup), -1)
        if in_place:
            gate_up.data.copy_(grad)
            return gate_up
        return grad


def test_glu_driver_in_place_bumps_versions():
    fns = glu_driver.autograd_functions(_TorchGLUKernels(), __name__)
    a = torch.randn(2, 3, 4, dtype=torch.float32, requires_grad=True)
    b = torch.randn(2, 3, 4, dtype=torch.float32, requires_grad=True)
    a_mid, b_mid = a * 1, b * 1
    # A node made first (so its backward runs after the GLU's) that also saved a_mid: once the
    # in-place backward has overwritten a_mid, autograd must refuse it, not read gradients as a.
    other = (a_mid * a_mid).sum()
    loss = fns["swiglu"].apply(a_mid, b_mid, True).sum() + other
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_glu_driver_matches_torch():
    fns = glu_driver.autograd_functions(_TorchGLUKernels(), __name__)
    gate_up = torch.randn(2, 3, 8, dtype=torch.float32, requires_grad=True)
    out = fns["fused_gate_up_swiglu"].apply(gate_up, False)
    assert out.shape == (2, 3, 4)
    grad = torch.randn_like(out)
    out.backward(grad)
    ref = gate_up.detach().clone().requires_grad_()
    gate, up = ref.chunk(2, -1)
    (torch.nn.functional.silu(gate) * up).backward(grad)
    torch.testing.assert_close(gate_up.grad, ref.grad)


class _Kernels:
    """A kernels object declaring ``protocol``; the drivers refuse it before reading any method."""

    def __init__(self, protocol):
        self.protocol = protocol


# -- divergence, fused_linear_jsd, fused_linear_kl_div, grpo_loss (helper "div") -------------------


def _refused(build, family, version):
    with pytest.raises(LigerBackendError, match=rf"liger_core\.drivers\.{family} must declare protocol = {version}\b"):
        build(_Kernels(version + 1), "some_vendor.module")
    with pytest.raises(LigerBackendError, match=rf"protocol = {version}\b.*got None"):
        build(object(), "some_vendor.module")


def test_divergence_driver_refuses_another_protocol():
    from liger_core.drivers import divergence

    _refused(divergence.autograd_functions, "divergence", divergence.PROTOCOL)
    _refused(divergence.fused_ce_tvd_function, "divergence", divergence.PROTOCOL)
    functions = divergence.autograd_functions(_Kernels(divergence.PROTOCOL), "some_vendor.module")
    assert {name: f.__name__ for name, f in functions.items()} == {
        "kl_div": "LigerKLDivFunction",
        "jsd": "LigerJSDFunction",
        "tvd": "LigerTVDFunction",
    }
    assert all(f.__module__ == "some_vendor.module" for f in functions.values())


def test_fused_linear_jsd_driver_refuses_another_protocol():
    from liger_core.drivers import fused_linear_jsd

    _refused(fused_linear_jsd.autograd_function, "fused_linear_jsd", fused_linear_jsd.PROTOCOL)


def test_fused_linear_kl_div_driver_refuses_another_protocol():
    from liger_core.drivers import fused_linear_kl_div

    _refused(fused_linear_kl_div.autograd_function, "fused_linear_kl_div", fused_linear_kl_div.PROTOCOL)


def test_grpo_loss_driver_refuses_another_protocol():
    from liger_core.drivers import grpo_loss

    _refused(grpo_loss.autograd_function, "grpo_loss", grpo_loss.PROTOCOL)
    function = grpo_loss.autograd_function(_Kernels(grpo_loss.PROTOCOL), "some_vendor.module")
    assert (function.__name__, function.__module__) == ("LigerGRPOLossFunction", "some_vendor.module")


# -- misc family: mhc, attn_res, multi_token_attention, fused_neighborhood_attention, fused_moe --


class _StaleKernels:
    protocol = 0  # no driver's version


def _refused(bind, family: str, version: int) -> None:
    with pytest.raises(LigerBackendError, match=rf"liger_core\.drivers\.{family} must declare protocol = {version}\b"):
        bind(_StaleKernels(), "some_vendor.module")


def test_mhc_driver_refuses_another_protocol():
    from liger_core.drivers import mhc

    _refused(mhc.autograd_functions, "mhc", mhc.PROTOCOL)


def test_attn_res_driver_refuses_another_protocol():
    from liger_core.drivers import attn_res

    _refused(attn_res.autograd_function, "attn_res", attn_res.PROTOCOL)


def test_multi_token_attention_driver_refuses_another_protocol():
    from liger_core.drivers import multi_token_attention

    _refused(multi_token_attention.autograd_function, "multi_token_attention", multi_token_attention.PROTOCOL)


def test_fused_neighborhood_attention_driver_refuses_another_protocol():
    from liger_core.drivers import fused_neighborhood_attention

    _refused(
        fused_neighborhood_attention.autograd_function,
        "fused_neighborhood_attention",
        fused_neighborhood_attention.PROTOCOL,
    )


def test_fused_moe_driver_refuses_another_protocol():
    from liger_core.drivers import fused_moe

    _refused(fused_moe.autograd_functions, "fused_moe", fused_moe.PROTOCOL)


# -- tiled_mlp (drivers/tiled_mlp.py) -------------------------------------------------------------


class _TorchGatedKernels:
    """The gated activation in torch, on the glu driver's activation codes."""

    protocol = 1

    def __init__(self):
        self.codes: list[int] = []

    def forward(self, gate, up, activation):
        self.codes.append(activation)
        act = F.silu if activation == glu_driver.SILU else partial(F.gelu, approximate="tanh")
        return act(gate) * up

    def backward(self, grad_hidden, gate, up, activation):
        with torch.enable_grad():
            g, u = gate.detach().requires_grad_(), up.detach().requires_grad_()
            torch.autograd.backward(self.forward(g, u, activation), grad_hidden)
        gate.copy_(g.grad)
        up.copy_(u.grad)


def test_tiled_mlp_driver_refuses_another_protocol():
    from liger_core.drivers import tiled_mlp

    with pytest.raises(LigerBackendError, match=rf"drivers\.tiled_mlp must declare protocol = {tiled_mlp.PROTOCOL}"):
        tiled_mlp.autograd_function(object(), __name__)


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_tiled_mlp_driver_passes_glu_codes_and_matches_torch(activation):
    from liger_core.drivers import tiled_mlp

    kernels = _TorchGatedKernels()
    function = tiled_mlp.autograd_function(kernels, __name__)
    assert function.__name__ == "LigerTiledMLPFunction"
    g = torch.Generator().manual_seed(0)
    x, wg, wu, wd = (torch.randn(*s, generator=g) for s in ((5, 8), (12, 8), (12, 8), (8, 12)))
    leaves = [t.clone().requires_grad_() for t in (x, wg, wu, wd)]
    function.apply(*leaves, activation, 2).sum().backward()
    ref = [t.clone().requires_grad_() for t in (x, wg, wu, wd)]
    act = F.silu if activation == "silu" else partial(F.gelu, approximate="tanh")
    F.linear(act(F.linear(ref[0], ref[1])) * F.linear(ref[0], ref[2]), ref[3]).sum().backward()
    for got, want in zip(leaves, ref):
        torch.testing.assert_close(got.grad, want.grad)
    assert set(kernels.codes) == {tiled_mlp.ACTIVATION_CODES[activation]}
