"""SwiGLU (``silu(a) * b``) for Intel GPUs; the kernels are shared with geglu in _glu.py."""

from __future__ import annotations

import torch
from liger_core.ops.swiglu import check_args

from liger_ops_xpu._glu import SILU, LigerGLUFunction


def swiglu(a: torch.Tensor, b: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """The interface's ``swiglu`` (see ``liger_core.ops.swiglu``) on Intel GPUs."""
    check_args(a, b, in_place)
    return LigerGLUFunction.apply(a, b, in_place, SILU)
