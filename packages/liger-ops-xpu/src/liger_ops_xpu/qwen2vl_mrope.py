"""Multimodal RoPE of Qwen2-VL for Intel GPUs: the rotary kernel of _rotary.py with the three
position tables merged per column inside the kernel (no merged table is materialised)."""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.ops.qwen2vl_mrope import check_args

from liger_ops_xpu._rotary import LigerRotaryFunction


@implements("qwen2vl_mrope")
class LigerQwen2VLMRopeFunction(LigerRotaryFunction):
    @staticmethod
    def forward(ctx, q, k, cos, sin, mrope_section, unsqueeze_dim):
        check_args(q, k, cos, sin, mrope_section, unsqueeze_dim)
        return LigerRotaryFunction.forward_rotary(
            ctx, q, k, cos, sin, tuple(int(m) for m in mrope_section), unsqueeze_dim
        )
