"""Qwen2-VL multimodal RoPE (M-RoPE) for Ascend NPUs: the rotary kernel, each column of a head
taking cos/sin from its section's table (temporal, height, width); see `_rotary`."""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.ops.qwen2vl_mrope import check_args

from liger_ops_ascend._rotary import LigerRotaryFunction


@implements("qwen2vl_mrope")
class LigerQwen2VLMRopeFunction(LigerRotaryFunction):
    @staticmethod
    def forward(ctx, q, k, cos, sin, mrope_section, unsqueeze_dim):
        check_args(q, k, cos, sin, mrope_section, unsqueeze_dim)
        return LigerRotaryFunction.forward(ctx, q, k, cos, sin, tuple(int(s) for s in mrope_section), unsqueeze_dim)
