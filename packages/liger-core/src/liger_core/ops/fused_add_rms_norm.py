"""The `fused_add_rms_norm` op: residual add + RMSNorm of a pre-norm block, its contract,
argument checks and PyTorch reference."""

from __future__ import annotations

import torch

from liger_core.ops import rms_norm as _rms_norm
from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device

CASTING_MODES = _rms_norm.CASTING_MODES


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add followed by RMSNorm over the last dimension, as in a pre-norm block.

    ``new_residual = (x + residual)`` in ``x.dtype`` (the sum is formed in float32 and
    rounded once), then ``y = rms_norm(new_residual, weight, eps, offset, casting_mode)``
    with the semantics of `liger_core.ops.rms_norm.rms_norm`.

    Args:
        x: ``(..., hidden)``, float32, bfloat16 or float16 (the block's output).
        residual: same shape as ``x``, any of those dtypes (the running residual stream).
        weight: ``(hidden,)`` scale, or None for no scale. Its dtype may differ from ``x``'s.
        eps: ``>= 0``, added to the mean square.
        offset: added to ``weight`` (Gemma: 1.0).
        casting_mode: ``"llama"``, ``"gemma"`` or ``"none"``, as for ``rms_norm``.
        in_place: allow the backward pass to write ``grad_x`` into the memory of the
            incoming gradient of ``y``. The caller opts in; inputs are never modified.

    Returns:
        ``(y, new_residual)``, both with ``x``'s shape and dtype. Gradients flow through
        both outputs: ``grad_x = grad_residual = d(new_residual)`` where that total is the
        incoming gradient of ``new_residual`` plus the RMSNorm backward of ``y``'s
        gradient; ``grad_x`` has ``x.dtype``, ``grad_residual`` ``residual.dtype``,
        ``grad_weight`` ``weight.dtype``.
    """
    raise NotImplementedError("contract only: call liger_core.functional.liger_fused_add_rms_norm")


def check_args(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if (
            x.dtype in FLOAT_DTYPES
            and x.ndim > 0
            and residual.dtype in FLOAT_DTYPES
            and residual.shape == x.shape
            and residual.device == x.device
            and casting_mode in CASTING_MODES
            and eps >= 0
            and isinstance(offset, (float, int))
            and (
                weight is None
                or (
                    weight.dtype in FLOAT_DTYPES
                    and weight.ndim == 1
                    and weight.shape[0] == x.shape[-1]
                    and weight.device == x.device
                )
            )
        ):
            return
    except (AttributeError, TypeError):
        pass
    _raise_bad_args(x, residual, weight, eps, offset, casting_mode)


def _raise_bad_args(x, residual, weight, eps, offset, casting_mode) -> None:
    check_floating("x", x)
    check_floating("residual", residual)
    if x.dim() == 0:
        raise ValueError("fused_add_rms_norm: x must have at least 1 dimension (..., hidden); got a 0-d tensor")
    check_same_device("fused_add_rms_norm", x=x, residual=residual, weight=weight)
    if residual.shape != x.shape:
        raise ValueError(
            f"fused_add_rms_norm: residual must have x's shape {tuple(x.shape)}; got residual.shape="
            f"{tuple(residual.shape)}"
        )
    if weight is not None:
        check_floating("weight", weight)
        if weight.shape != (x.shape[-1],):
            raise ValueError(
                f"fused_add_rms_norm: weight must have shape (hidden,) = ({x.shape[-1]},) to match "
                f"x.shape[-1]; got weight.shape={tuple(weight.shape)}"
            )
    if casting_mode not in CASTING_MODES:
        raise ValueError(f"fused_add_rms_norm: casting_mode must be one of {CASTING_MODES}; got {casting_mode!r}")
    if not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"fused_add_rms_norm: eps must be a number >= 0; got {eps!r}")
    if not isinstance(offset, (int, float)):
        raise TypeError(f"fused_add_rms_norm: offset must be a float; got {type(offset).__name__}")


def math(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    if x.dtype == torch.float64:
        s = x + residual.to(x.dtype)
    else:
        s = (x.float() + residual.float()).to(x.dtype)
    return _rms_norm.math(s, weight, eps, offset, casting_mode), s


def reference(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    check_args(x, residual, weight, eps, offset, casting_mode)
    return math(x, residual, weight, eps, offset, casting_mode)
