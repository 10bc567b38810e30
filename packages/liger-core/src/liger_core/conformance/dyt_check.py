"""The dyt check against the float64 oracle, without pytest: used by the conformance cases,
by vendor tests that force their own code paths, and by ``liger check``."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close, loosest
from liger_core.ops import dyt as contract


def make_inputs(shape, dtype, device, has_beta=True, param_dtype=None, alpha_shape=(1,), seed=0):
    """``(x, alpha, gamma, beta, dy)``; alpha puts tanh's argument across its bend."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=gen) * 2 + 0.3).to(dtype)
    alpha = torch.full(alpha_shape, 0.7).to(param_dtype or dtype)
    gamma = (torch.randn(shape[-1], generator=gen) * 0.5 + 1).to(param_dtype or dtype)
    beta = (torch.randn(shape[-1], generator=gen) * 0.5).to(param_dtype or dtype) if has_beta else None
    dy = torch.randn(shape, generator=gen).to(dtype)
    move = lambda t: None if t is None else t.to(device)  # noqa: E731
    return move(x), move(alpha), move(gamma), move(beta), move(dy)


def check_dyt(backend, x, alpha, gamma, beta, dy) -> None:
    """Run ``backend``'s dyt forward and backward; check against the float64 oracle."""
    x_in = x.clone().requires_grad_()
    params = [p.clone().requires_grad_() if p is not None else None for p in (alpha, gamma, beta)]
    dy_in = dy.clone()
    y = backend.ops["dyt"](x_in, *params)
    y.backward(dy_in)

    x64 = x.detach().cpu().double().requires_grad_()
    params64 = [p.detach().cpu().double().requires_grad_() if p is not None else None for p in (alpha, gamma, beta)]
    y64 = contract.math(x64, *params64)
    y64.backward(dy.cpu().double())

    tol = loosest(x.dtype, *(p.dtype for p in (alpha, gamma, beta) if p is not None))
    assert y.dtype == x.dtype and y.device == x.device
    assert_close(y, y64, tol, "dyt output")
    assert x_in.grad is not None and x_in.grad.dtype == x.dtype
    assert_close(x_in.grad, x64.grad, tol, "dyt grad_x")
    for name, p, p_in, p64 in zip(("alpha", "gamma", "beta"), (alpha, gamma, beta), params, params64):
        if p is None:
            continue
        assert p_in.grad is not None and p_in.grad.dtype == p.dtype and p_in.grad.shape == p.shape, f"dyt grad_{name}"
        # grad_alpha sums dy * gamma * x * (1 - tanh^2) over every element: random signs
        # cancel, so its error is measured against the sum of the magnitudes.
        scale = None
        if name == "alpha" and x.numel():
            with torch.no_grad():
                t = torch.tanh(params64[0].detach().reshape(()) * x64.detach())
                scale = float((dy.cpu().double() * params64[1].detach() * x64.detach() * (1 - t * t)).abs().sum())
                scale = scale / max(1, x.numel()) ** 0.5
        assert_close(p_in.grad, p64.grad, tol, f"dyt grad_{name}", scale=scale)
        assert torch.equal(p_in.detach(), p), f"dyt modified its {name}"
    assert torch.equal(x_in.detach(), x), "dyt modified its input x"
    assert torch.equal(dy_in, dy), "dyt modified the incoming gradient"
