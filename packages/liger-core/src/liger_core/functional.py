"""The functional API: each op dispatched to the backend serving its input's device."""

from __future__ import annotations

import torch

from liger_core.registry import resolve


def liger_rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> torch.Tensor:
    """RMSNorm; see `liger_core.ops.rms_norm.rms_norm` for the contract."""
    return resolve("rms_norm", x.device.type)(x, weight, eps, offset, casting_mode, in_place)
