"""The `softmax` op: its contract, argument checks and PyTorch reference."""

from __future__ import annotations

import torch

from liger_core.ops._checks import FLOAT_DTYPES, check_floating


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension: ``exp(x - max) / sum(exp(x - max))``, in float32.

    Args:
        x: ``(..., n)``, float32, bfloat16 or float16, at least 1-D; any layout (rows are
            read as a contiguous ``(-1, n)`` view, a copy is made if needed).

    Returns:
        ``x``'s shape and dtype. Backward gives ``grad_x = y * (grad_y - sum(grad_y * y, -1))``.
    """
    raise NotImplementedError("contract only: call liger_core.functional.liger_softmax")


def check_args(x: torch.Tensor) -> None:
    """Raise a clear error for arguments outside the contract. Backends call this first."""
    try:
        if x.dtype in FLOAT_DTYPES and x.ndim > 0:
            return
    except (AttributeError, TypeError):
        pass
    check_floating("x", x)
    if x.ndim == 0:
        raise ValueError("softmax: x must have at least 1 dimension (..., n); got a 0-d tensor")


def math(x: torch.Tensor) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    compute = x if x.dtype == torch.float64 else x.float()
    return torch.softmax(compute, dim=-1).to(x.dtype)


def reference(x: torch.Tensor) -> torch.Tensor:
    check_args(x)
    return math(x)
