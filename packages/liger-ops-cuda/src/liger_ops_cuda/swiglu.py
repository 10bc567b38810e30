"""SwiGLU (``silu(a) * b``) for NVIDIA GPUs; the kernels are shared with GEGLU in `_glu`."""

from __future__ import annotations

import torch

from liger_core.ops.swiglu import check_args
from liger_ops_cuda._glu import SILU, LigerGLUFunction


def swiglu(a: torch.Tensor, b: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    check_args(a, b, in_place)
    return LigerGLUFunction.apply(a, b, SILU, in_place)
