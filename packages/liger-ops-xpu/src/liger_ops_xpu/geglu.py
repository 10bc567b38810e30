"""GEGLU (``gelu_tanh(a) * b``) for Intel GPUs; the kernels and backward are shared with swiglu in _glu.py."""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.ops.geglu import check_args

from liger_ops_xpu._glu import GELU_TANH, LigerGLUFunction


@implements("geglu")
class LigerGEGLUFunction(LigerGLUFunction):
    @staticmethod
    def forward(ctx, a, b, in_place):
        check_args(a, b, in_place)
        return LigerGLUFunction.forward_act(ctx, a, b, in_place, GELU_TANH)
