"""GEGLU (``gelu_tanh(a) * b``) for NVIDIA GPUs; the kernels are shared with SwiGLU in `_glu`."""

from __future__ import annotations

import torch

from liger_core.ops.geglu import check_args
from liger_ops_cuda._glu import GELU_TANH, LigerGLUFunction


def geglu(a: torch.Tensor, b: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    check_args(a, b, in_place)
    return LigerGLUFunction.apply(a, b, GELU_TANH, in_place)
