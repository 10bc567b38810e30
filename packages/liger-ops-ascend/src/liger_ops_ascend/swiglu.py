"""SwiGLU for Ascend NPUs: ``silu(a) * b`` (kernels, plans and Function in `_glu`)."""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.ops.swiglu import check_args

from liger_ops_ascend._glu import SILU, LigerGLUFunction


@implements("swiglu")
class LigerSwiGLUFunction(LigerGLUFunction):
    @staticmethod
    def forward(ctx, a, b, in_place):
        check_args(a, b, in_place)
        return LigerGLUFunction.forward(ctx, a, b, SILU, in_place)
