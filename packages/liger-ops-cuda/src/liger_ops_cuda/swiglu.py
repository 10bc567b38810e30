"""SwiGLU (``silu(a) * b``) for NVIDIA GPUs; the kernels are shared with GEGLU in `_glu`."""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.ops.swiglu import check_args
from liger_ops_cuda._glu import SILU, LigerGLUFunction


@implements("swiglu")
class LigerSwiGLUFunction(LigerGLUFunction):
    @staticmethod
    def forward(ctx, a, b, in_place):
        check_args(a, b, in_place)
        return LigerGLUFunction.shared_forward(ctx, a, b, SILU, in_place)
