"""Qwen2-VL's multimodal RoPE for NVIDIA GPUs; the kernel (shared with RoPE) is in `_rotary`."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from liger_core.ops.qwen2vl_mrope import check_args
from liger_ops_cuda._rotary import LigerRotaryFunction


def qwen2vl_mrope(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mrope_section: Sequence[int],
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    check_args(q, k, cos, sin, mrope_section, unsqueeze_dim)
    return LigerRotaryFunction.apply(q, k, cos, sin, tuple(mrope_section), unsqueeze_dim)
