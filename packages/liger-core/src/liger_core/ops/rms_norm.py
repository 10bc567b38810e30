"""The `rms_norm` op: its contract, argument checks and PyTorch reference.

Every backend's `rms_norm` has exactly the signature of `rms_norm` below and the
semantics of its docstring; `reference` is the oracle the conformance suite checks
kernels against and the fallback where no vendor backend serves a device.
"""

from __future__ import annotations

import torch

from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device

CASTING_MODES = ("llama", "gemma", "none")


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> torch.Tensor:
    """Root-mean-square normalisation over the last dimension.

    ``y = x / sqrt(mean(x**2, -1) + eps) * (offset + weight)``

    Args:
        x: ``(..., hidden)``, float32, bfloat16 or float16. Any layout; rows are read
            as a contiguous ``(-1, hidden)`` view (a copy is made if needed).
        weight: ``(hidden,)`` scale, or None for no scale (``offset`` is then unused).
            Its dtype may differ from ``x``'s (e.g. float32 weights with bf16 input).
        eps: added to the mean square before the reciprocal square root; ``>= 0``.
        offset: added to ``weight`` (Gemma stores ``weight - 1`` and uses 1.0).
        casting_mode: where the computation leaves ``x``'s dtype, as the models do:
            - ``"llama"``: ``x`` is normalised in float32, the result cast back to
              ``x.dtype`` and then multiplied by ``offset + weight`` (LLaMA, Mistral, Qwen).
            - ``"gemma"``: everything in float32, cast to ``x.dtype`` at the end (Gemma).
            - ``"none"``: normalisation and scale in ``x.dtype``.
        in_place: allow the backward pass to write ``grad_x`` into the memory of the
            incoming gradient of the output (saves one activation-sized buffer). The
            caller opts in; ``x`` and ``weight`` are never modified.

    Returns:
        ``y`` with ``x``'s shape and dtype. Backward gives ``grad_x`` (``x.dtype``) and
        ``grad_weight`` (``weight.dtype``).
    """
    raise NotImplementedError("contract only: call liger_core.functional.liger_rms_norm")


def check_args(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
) -> None:
    """Raise a clear error for arguments outside the contract. Backends call this first.

    One cheap predicate on the hot path (this runs on every call); the slow path then
    finds and names what is wrong.
    """
    try:
        if (
            x.dtype in FLOAT_DTYPES
            and x.ndim > 0
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
    _raise_bad_args(x, weight, eps, offset, casting_mode)


def _raise_bad_args(x, weight, eps, offset, casting_mode) -> None:
    check_floating("x", x)
    if x.dim() == 0:
        raise ValueError("rms_norm: x must have at least 1 dimension (..., hidden); got a 0-d tensor")
    if weight is not None:
        check_floating("weight", weight)
        check_same_device("rms_norm", x=x, weight=weight)
        if weight.shape != (x.shape[-1],):
            raise ValueError(
                f"rms_norm: weight must have shape (hidden,) = ({x.shape[-1]},) to match "
                f"x.shape[-1]; got weight.shape={tuple(weight.shape)}"
            )
    if casting_mode not in CASTING_MODES:
        raise ValueError(f"rms_norm: casting_mode must be one of {CASTING_MODES}; got {casting_mode!r}")
    if not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"rms_norm: eps must be a number >= 0; got {eps!r}")
    if not isinstance(offset, (int, float)):
        raise TypeError(f"rms_norm: offset must be a float; got {type(offset).__name__}")
    # Nothing wrong after all (an unusual but valid type the fast path did not expect).


def math(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    dtype = x.dtype
    compute = x if casting_mode == "none" or dtype == torch.float64 else x.float()
    x_hat = compute * torch.rsqrt(compute.pow(2).mean(-1, keepdim=True) + eps)
    if weight is None:
        return x_hat.to(dtype)
    if casting_mode == "llama":
        return (x_hat.to(dtype) * (offset + weight)).to(dtype)
    if casting_mode == "gemma":
        return (x_hat * (offset + weight.to(compute.dtype))).to(dtype)
    return (x_hat * (offset + weight).to(dtype)).to(dtype)


def reference(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> torch.Tensor:
    check_args(x, weight, eps, offset, casting_mode)
    return math(x, weight, eps, offset, casting_mode)
