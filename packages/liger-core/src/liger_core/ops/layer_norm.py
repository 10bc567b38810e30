"""The `layer_norm` op: its contract, argument checks and PyTorch reference."""

from __future__ import annotations

import torch

from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Layer normalisation over the last dimension (``torch.nn.functional.layer_norm``).

    ``y = (x - mean(x, -1)) / sqrt(var(x, -1) + eps) * weight + bias`` with the biased
    variance, computed in float32 and cast to ``x.dtype`` once at the end.

    Args:
        x: ``(..., hidden)``, float32, bfloat16 or float16, any layout.
        weight: ``(hidden,)`` scale or None (no scale); its dtype may differ from ``x``'s.
        bias: ``(hidden,)`` shift or None (no shift); its dtype may differ from ``x``'s.
        eps: ``>= 0``, added to the variance.

    Returns:
        ``y`` with ``x``'s shape and dtype. Backward gives ``grad_x`` (``x.dtype``),
        ``grad_weight`` (``weight.dtype``) and ``grad_bias`` (``bias.dtype``).
    """
    raise NotImplementedError("contract only: call liger_core.functional.liger_layer_norm")


def _param_ok(p: torch.Tensor | None, x: torch.Tensor) -> bool:
    return p is None or (p.dtype in FLOAT_DTYPES and p.ndim == 1 and p.shape[0] == x.shape[-1] and p.device == x.device)


def check_args(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if x.dtype in FLOAT_DTYPES and x.ndim > 0 and eps >= 0 and _param_ok(weight, x) and _param_ok(bias, x):
            return
    except (AttributeError, TypeError):
        pass
    _raise_bad_args(x, weight, bias, eps)


def _raise_bad_args(x, weight, bias, eps) -> None:
    check_floating("x", x)
    if x.dim() == 0:
        raise ValueError("layer_norm: x must have at least 1 dimension (..., hidden); got a 0-d tensor")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        check_floating(name, p)
        check_same_device("layer_norm", x=x, **{name: p})
        if p.shape != (x.shape[-1],):
            raise ValueError(
                f"layer_norm: {name} must have shape (hidden,) = ({x.shape[-1]},) to match x.shape[-1]; "
                f"got {name}.shape={tuple(p.shape)}"
            )
    if not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"layer_norm: eps must be a number >= 0; got {eps!r}")


def math(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    compute = x if x.dtype == torch.float64 else x.float()
    mean = compute.mean(-1, keepdim=True)
    centered = compute - mean
    y = centered * torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(compute.dtype)
    if bias is not None:
        y = y + bias.to(compute.dtype)
    return y.to(x.dtype)


def reference(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    check_args(x, weight, bias, eps)
    return math(x, weight, bias, eps)
