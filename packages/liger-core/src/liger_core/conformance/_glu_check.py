"""The check shared by the gated activations (`swiglu`, `geglu`) against the float64 oracle."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close


def make_glu_inputs(shape, dtype, device, seed=0):
    """``(a, b, dy)``: the gate spread across the activation's bend (|a| up to ~6)."""
    gen = torch.Generator().manual_seed(seed)
    a = (torch.randn(shape, generator=gen) * 2 - 0.2).to(dtype)
    b = torch.randn(shape, generator=gen).to(dtype)
    dy = torch.randn(shape, generator=gen).to(dtype)
    return a.to(device), b.to(device), dy.to(device)


def check_glu(backend, op: str, math, a, b, dy, in_place: bool = False) -> None:
    """Run ``backend``'s ``op`` forward and backward; check output and both gradients.

    With ``in_place`` the op may write its gradients into the buffers of its inputs, so
    they are given buffers of their own (``clone()`` of the leaves, as a module's
    projection outputs are); without it, nothing it was given may change.
    """
    a_leaf = a.clone().requires_grad_()
    b_leaf = b.clone().requires_grad_()
    a_in, b_in = (a_leaf.clone(), b_leaf.clone()) if in_place else (a_leaf, b_leaf)
    dy_in = dy.clone()
    y = backend.ops[op](a_in, b_in, in_place)
    y.backward(dy_in)

    a64 = a.detach().cpu().double().requires_grad_()
    b64 = b.detach().cpu().double().requires_grad_()
    y64 = math(a64, b64)
    y64.backward(dy.cpu().double())

    assert y.dtype == a.dtype and y.device == a.device and y.shape == a.shape, f"{op} output dtype/device/shape"
    assert_close(y, y64, a.dtype, f"{op} output")
    for name, leaf, ref in (("a", a_leaf, a64), ("b", b_leaf, b64)):
        assert leaf.grad is not None and leaf.grad.dtype == a.dtype, f"{op} grad_{name} missing or wrong dtype"
        assert_close(leaf.grad, ref.grad, a.dtype, f"{op} grad_{name}")
    assert torch.equal(a_leaf.detach(), a) and torch.equal(b_leaf.detach(), b), f"{op} modified its input leaves"
    assert torch.equal(dy_in, dy), f"{op} modified the incoming gradient"
    if not in_place:
        assert torch.equal(a_in.detach(), a) and torch.equal(b_in.detach(), b), (
            f"{op} modified a or b without in_place=True"
        )
