"""Argument checks shared by the gated activations (`swiglu`, `geglu`): two same-shape inputs."""

from __future__ import annotations

import torch

from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device


def check_glu_args(op: str, a: torch.Tensor, b: torch.Tensor, in_place: bool) -> None:
    """Fast path: one predicate; the slow path names the argument that is wrong."""
    try:
        if (
            a.dtype in FLOAT_DTYPES
            and b.dtype == a.dtype
            and a.shape == b.shape
            and a.device == b.device
            and isinstance(in_place, bool)
        ):
            return
    except (AttributeError, TypeError):
        pass
    _raise_bad_glu_args(op, a, b, in_place)


def _raise_bad_glu_args(op: str, a, b, in_place) -> None:
    check_floating("a", a)
    check_floating("b", b)
    check_same_device(op, a=a, b=b)
    if a.shape != b.shape:
        raise ValueError(
            f"{op}: a and b must have the same shape; got a.shape={tuple(a.shape)}, b.shape={tuple(b.shape)}"
        )
    if a.dtype != b.dtype:
        raise TypeError(
            f"{op}: a and b must have the same dtype; got a.dtype={str(a.dtype).removeprefix('torch.')}, "
            f"b.dtype={str(b.dtype).removeprefix('torch.')}"
        )
    if not isinstance(in_place, bool):
        raise TypeError(f"{op}: in_place must be a bool; got {type(in_place).__name__}")
