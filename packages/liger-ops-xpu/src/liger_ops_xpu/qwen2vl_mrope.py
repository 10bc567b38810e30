"""Multimodal RoPE of Qwen2-VL for Intel GPUs: the rope kernel (rope.py) with the three
position tables merged per column inside the kernel (no merged table is materialised)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from liger_core.ops.qwen2vl_mrope import check_args

from liger_ops_xpu.rope import LigerRopeFunction


def qwen2vl_mrope(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mrope_section: Sequence[int],
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The interface's ``qwen2vl_mrope`` (see ``liger_core.ops.qwen2vl_mrope``) on Intel GPUs."""
    check_args(q, k, cos, sin, mrope_section, unsqueeze_dim)
    sections = tuple(int(m) for m in mrope_section)
    return LigerRopeFunction.apply(q, k, cos.detach(), sin.detach(), unsqueeze_dim, sections)
