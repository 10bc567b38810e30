"""An op's float64 reference against another project's formulation of the same op, written in
torch (test_fused_neighborhood_attention.py, test_multi_token_attention.py)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def assert_reference_matches(op_module, args: dict, formula: Callable, grads_of: tuple[str, ...]) -> None:
    """``op_module.math`` and ``formula`` on ``args`` (tensors made float64 leaves) give the same
    output and, for one random upstream gradient, the same gradients w.r.t. ``grads_of``."""
    args = {k: v.double().requires_grad_() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    bound = op_module.OP.bind(args)
    ours = op_module.math(*bound.values())
    theirs = formula(*bound.values())
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(ours)
    inputs = tuple(bound[name] for name in grads_of)
    for g_ours, g_theirs in zip(
        torch.autograd.grad(ours, inputs, upstream), torch.autograd.grad(theirs, inputs, upstream), strict=True
    ):
        torch.testing.assert_close(g_ours, g_theirs, rtol=1e-12, atol=1e-12)
