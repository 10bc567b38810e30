"""SwiGLU (``silu(a) * b``) for Intel GPUs; the kernels and backward are shared with geglu in _glu.py."""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.ops.swiglu import check_args

from liger_ops_xpu._glu import SILU, LigerGLUFunction


@implements("swiglu")
class LigerSwiGLUFunction(LigerGLUFunction):
    @staticmethod
    def forward(ctx, a, b, in_place):
        check_args(a, b, in_place)
        return LigerGLUFunction.forward_act(ctx, a, b, in_place, SILU)
