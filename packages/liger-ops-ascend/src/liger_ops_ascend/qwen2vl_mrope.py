"""Qwen2-VL multimodal RoPE (M-RoPE) for Ascend NPUs: the rope kernel, each column of a
head taking cos/sin from its section's table (temporal, height, width); see `rope`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from liger_core.ops.qwen2vl_mrope import check_args

from liger_ops_ascend.rope import LigerRopeFunction


def qwen2vl_mrope(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mrope_section: Sequence[int],
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    check_args(q, k, cos, sin, mrope_section, unsqueeze_dim)
    return LigerRopeFunction.apply(q, k, cos, sin, unsqueeze_dim, tuple(int(s) for s in mrope_section))
