"""RoPE (rotate-half, transformers' LLaMA form) for Ascend NPUs; kernel, plan and Function in
`_rotary`."""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.ops.rope import check_args

from liger_ops_ascend._rotary import LigerRotaryFunction


@implements("rope")
class LigerRopeFunction(LigerRotaryFunction):
    @staticmethod
    def forward(ctx, q, k, cos, sin, position_ids, unsqueeze_dim):
        check_args(q, k, cos, sin, position_ids, unsqueeze_dim)
        # position_ids is unused, as in transformers: cos/sin are already gathered per position.
        return LigerRotaryFunction.forward(ctx, q, k, cos, sin, None, unsqueeze_dim)
