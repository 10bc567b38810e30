"""Qwen2-VL's multimodal RoPE for NVIDIA GPUs; the kernel (shared with RoPE) is in `_rotary`."""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.ops.qwen2vl_mrope import check_args
from liger_ops_cuda._rotary import LigerRotaryFunction


@implements("qwen2vl_mrope")
class LigerQwen2VLMRopeFunction(LigerRotaryFunction):
    @staticmethod
    def forward(ctx, q, k, cos, sin, mrope_section, unsqueeze_dim):
        check_args(q, k, cos, sin, mrope_section, unsqueeze_dim)
        return LigerRotaryFunction.shared_forward(ctx, q, k, cos, sin, tuple(mrope_section), unsqueeze_dim)
