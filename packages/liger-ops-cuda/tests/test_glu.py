"""glu.py's own paths (swiglu, geglu): ragged multi-program grids, the in-place gradient
buffers, a 0-d input, and the MLP modules that hand their projections over in place."""

from types import SimpleNamespace

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware


@pytest.mark.parametrize("in_place", (False, True))
@pytest.mark.parametrize("op", ("swiglu", "geglu"))
def test_ragged_multi_program_grid(backend, device, monkeypatch, op, in_place):
    monkeypatch.setattr(hardware, "GLU_BLOCK", 64)  # 300 elements: 5 programs, the last partial
    check(backend, op, make_args(op, device, shape=(3, 100), dtype=torch.bfloat16), in_place=in_place)


def _leaves_and_buffers(device):
    args = make_args("swiglu", device, shape=(4, 50))
    a_leaf, b_leaf = args["a"].clone().requires_grad_(), args["b"].clone().requires_grad_()
    dy = torch.randn(4, 50, generator=torch.Generator().manual_seed(1)).to(device)
    return a_leaf, b_leaf, a_leaf * 1, b_leaf * 1, dy  # buffers the caller owns, as a module's projections


def test_in_place_reuses_the_input_buffers(backend, device):
    a_leaf, b_leaf, a_buf, b_buf, dy = _leaves_and_buffers(device)
    backend.op("swiglu")(a_buf, b_buf, True).backward(dy)
    # The gradients were written over the activations (no new activation-sized buffers).
    torch.testing.assert_close(a_buf.detach(), a_leaf.grad)
    torch.testing.assert_close(b_buf.detach(), b_leaf.grad)


def test_in_place_misuse_is_an_error_not_silent(backend, device):
    # Another node saved `a` (a * w needs it for grad_w): once the in-place backward has
    # overwritten it, that node's backward must fail rather than use gradients as activations.
    a_leaf, b_leaf, a_buf, b_buf, dy = _leaves_and_buffers(device)
    w = torch.randn(50, device=device, requires_grad=True)
    y = backend.op("swiglu")(a_buf, b_buf, True)
    z = a_buf * w
    y.backward(dy)  # runs the in-place backward first
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_zero_dim_input(backend, device):
    a = torch.tensor(0.7, device=device, requires_grad=True)
    b = torch.tensor(-1.5, device=device, requires_grad=True)
    y = backend.op("geglu")(a, b, False)
    y.backward()
    assert y.shape == () and a.grad.shape == () and b.grad.shape == ()
    torch.testing.assert_close(y, torch.nn.functional.gelu(a.detach(), approximate="tanh") * b.detach())


@pytest.mark.parametrize("op", ("swiglu", "geglu"))
def test_gated_mlp_module_with_in_place_kernels(backend, device, monkeypatch, op):
    """LigerSwiGLUMLP / LigerGEGLUMLP hand their projection outputs to the kernel with in_place:
    the gradients of x and of every weight still match the hand-written transformers MLP."""
    from liger_core.nn import LigerGEGLUMLP, LigerSwiGLUMLP
    from liger_core.nn import mlp as mlp_module

    kernel = backend.op(op)
    monkeypatch.setattr(mlp_module, f"liger_{op}", lambda a, b, in_place=False: kernel(a, b, in_place))
    if op == "swiglu":
        module = LigerSwiGLUMLP(SimpleNamespace(hidden_size=24, intermediate_size=40, hidden_act="silu"))
        act = torch.nn.functional.silu
    else:
        module = LigerGEGLUMLP(SimpleNamespace(hidden_size=24, intermediate_size=40, hidden_act="gelu_pytorch_tanh"))
        act = lambda a: torch.nn.functional.gelu(a, approximate="tanh")  # noqa: E731
    module = module.to(device)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 24, generator=gen).to(device)
    dy = torch.randn(3, 5, 24, generator=gen).to(device)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    module(x1).backward(dy)
    p = dict(module.named_parameters())
    w = {k: v.detach().clone().requires_grad_() for k, v in p.items()}
    h = act(x2 @ w["gate_proj.weight"].t()) * (x2 @ w["up_proj.weight"].t())
    (h @ w["down_proj.weight"].t()).backward(dy)
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-4, atol=1e-5)
    for k in p:
        torch.testing.assert_close(p[k].grad, w[k].grad, rtol=1e-4, atol=1e-5, msg=k)


@pytest.mark.parametrize("in_place", (False, True))
def test_gate_up_column_blocks_with_a_ragged_tail(backend, device, monkeypatch, in_place):
    monkeypatch.setattr(hardware, "GLU_BLOCK", 64)  # halves of 100: 2 column blocks per row, the last partial
    args = make_args("fused_gate_up_swiglu", device, shape=(3, 200), dtype=torch.bfloat16)
    check(backend, "fused_gate_up_swiglu", args, in_place=in_place)


def test_gate_up_in_place_reuses_the_projection_buffer(backend, device):
    gate_up = make_args("fused_gate_up_swiglu", device, shape=(4, 100))["gate_up"]
    leaf = gate_up.clone().requires_grad_()
    buf = leaf * 1  # a buffer the caller owns, as LigerPhi3SwiGLUMLP's projection output
    dy = torch.randn(4, 50, generator=torch.Generator().manual_seed(1)).to(device)
    backend.op("fused_gate_up_swiglu")(buf, True).backward(dy)
    # The gradient was written over the activation (no new activation-sized buffer).
    torch.testing.assert_close(buf.detach(), leaf.grad)
    gate = gate_up.chunk(2, dim=-1)[0]
    s = torch.nn.functional.silu(gate)
    torch.testing.assert_close(leaf.grad[:, 50:], dy * s)
