"""GEGLU (``gelu_tanh(a) * b``) for NVIDIA GPUs; the kernels are shared with SwiGLU in `_glu`."""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.ops.geglu import check_args
from liger_ops_cuda._glu import GELU_TANH, LigerGLUFunction


@implements("geglu")
class LigerGEGLUFunction(LigerGLUFunction):
    @staticmethod
    def forward(ctx, a, b, in_place):
        check_args(a, b, in_place)
        return LigerGLUFunction.shared_forward(ctx, a, b, GELU_TANH, in_place)
