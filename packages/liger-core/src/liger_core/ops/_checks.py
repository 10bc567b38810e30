"""Argument checks shared by op contracts, so every backend raises the same errors."""

from __future__ import annotations

import torch

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FLOAT_DTYPES = frozenset(SUPPORTED_DTYPES)


def check_floating(name: str, t: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        expected = ", ".join(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES)
        raise TypeError(f"{name} must have dtype {expected}; got {str(t.dtype).removeprefix('torch.')}")


def check_same_device(op: str, **tensors: torch.Tensor) -> None:
    items = [(n, t) for n, t in tensors.items() if t is not None]
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(
                f"{op}: all tensors must be on one device; {first_name} is on {first.device} "
                f"but {name} is on {t.device}"
            )
