"""Argument checks shared by op contracts, so every backend raises the same errors."""

from __future__ import annotations

import torch

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FLOAT_DTYPES = frozenset(SUPPORTED_DTYPES)

#: The exception to the mixed-dtype rule (`liger_core.op`, "Dtypes"): per op, each head argument
#: that the op casts to another argument's dtype for the matmul (its gradient in its own dtype).
_HEAD = {"weight": "input", "bias": "input"}
_REF_HEAD = {"ref_weight": "ref_input", "ref_bias": "ref_input"}
CASTS_TO_INPUT_DTYPE: dict[str, dict[str, str]] = {
    "fused_linear_cross_entropy": _HEAD,
    "fused_linear_scaled_cross_entropy": {"weight": "input"},
    "fused_linear_dpo": {**_HEAD, **_REF_HEAD},
    "fused_linear_orpo": _HEAD,
    "fused_linear_cpo": _HEAD,
    "fused_linear_simpo": _HEAD,
    "fused_linear_kto": {**_HEAD, **_REF_HEAD},
}


def check_floating(op: str, name: str, t: torch.Tensor) -> None:
    """A tensor of a supported floating dtype; the error starts with the op's name, as every
    argument error does."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor; got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        expected = ", ".join(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES)
        raise TypeError(f"{op}: {name} must have dtype {expected}; got {str(t.dtype).removeprefix('torch.')}")


def _possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def check_same_dtype(op: str, name: str, t: torch.Tensor, like_name: str, like: torch.Tensor) -> None:
    """The mixed-dtype rule's error (see `liger_core.op`, "Dtypes"): ``t`` must share ``like``'s
    floating dtype; the message names both arguments and both dtypes."""
    if t.dtype != like.dtype:
        raise TypeError(
            f"{op}: {name} must have {_possessive(like_name)} dtype {str(like.dtype).removeprefix('torch.')}; "
            f"got {str(t.dtype).removeprefix('torch.')}"
        )


def check_same_device(op: str, **tensors: torch.Tensor) -> None:
    items = [(n, t) for n, t in tensors.items() if t is not None]
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(
                f"{op}: all tensors must be on one device; {first_name} is on {first.device} "
                f"but {name} is on {t.device}"
            )


def check_rows(op: str, x: torch.Tensor, name: str = "x") -> None:
    """A floating tensor of at least one dimension, normalised or activated over its last."""
    check_floating(op, name, x)
    if x.dim() == 0:
        raise ValueError(f"{op}: {name} must have at least 1 dimension (..., hidden); got a 0-d tensor")


def check_param(
    op: str, name: str, p: torch.Tensor | None, x: torch.Tensor, axis: int = -1, what: str = "hidden"
) -> None:
    """An optional per-feature parameter: floating, on x's device, of shape ``(x.shape[axis],)``."""
    if p is None:
        return
    check_floating(op, name, p)
    check_same_device(op, x=x, **{name: p})
    if p.shape != (x.shape[axis],):
        raise ValueError(
            f"{op}: {name} must have shape ({what},) = ({x.shape[axis]},) to match x.shape[{axis}]; "
            f"got {name}.shape={tuple(p.shape)}"
        )


def check_eps(op: str, eps: float) -> None:
    if not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"{op}: eps must be a number >= 0; got {eps!r}")


def check_flag(op: str, name: str, value: bool) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be True or False; got {value!r}")


def param_ok(p: torch.Tensor | None, x: torch.Tensor, axis: int = -1) -> bool:
    """The fast-path test of an optional per-feature parameter (see `check_param`)."""
    return p is None or (
        p.dtype in FLOAT_DTYPES and p.ndim == 1 and p.shape[0] == x.shape[axis] and p.device == x.device
    )


def check_unary(op: str, x: torch.Tensor) -> None:
    """The whole check of an op whose only tensor is ``x`` of at least one dimension: a cheap
    predicate first (it runs on every call), then the error naming what is wrong."""
    try:
        if x.dtype in FLOAT_DTYPES and x.ndim > 0:
            return
    except (AttributeError, TypeError):
        pass
    check_rows(op, x)
