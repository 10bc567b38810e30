"""Parameter set-up the norm modules share, with Liger Kernel's constructor arguments."""

from __future__ import annotations

import torch
from torch import nn

INIT_FNS = ("ones", "zeros")


def init_weight(
    who: str, size: int, init_fn: str, device: torch.device | str | None, dtype: torch.dtype | None
) -> nn.Parameter:
    """A per-feature scale starting at ones or zeros (``init_fn``; Gemma's norms store ``weight - 1``)."""
    if init_fn not in INIT_FNS:
        raise ValueError(f"{who}: init_fn must be 'ones' or 'zeros'; got {init_fn!r}")
    init = torch.ones if init_fn == "ones" else torch.zeros
    return nn.Parameter(init(size, device=device, dtype=dtype))


def init_bias(size: int, random: bool, device: torch.device | str | None, dtype: torch.dtype | None) -> nn.Parameter:
    """A per-feature shift starting at zero, or random normal when ``random`` (Liger Kernel's ``bias=True``)."""
    make = torch.randn if random else torch.zeros
    return nn.Parameter(make(size, device=device, dtype=dtype))
