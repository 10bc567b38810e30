"""GEGLU (``gelu_tanh(a) * b``) for Intel GPUs; the kernels are shared with swiglu in _glu.py."""

from __future__ import annotations

import torch
from liger_core.ops.geglu import check_args

from liger_ops_xpu._glu import GELU_TANH, LigerGLUFunction


def geglu(a: torch.Tensor, b: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """The interface's ``geglu`` (see ``liger_core.ops.geglu``) on Intel GPUs."""
    check_args(a, b, in_place)
    return LigerGLUFunction.apply(a, b, in_place, GELU_TANH)
