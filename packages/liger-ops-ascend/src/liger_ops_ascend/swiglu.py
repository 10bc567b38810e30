"""SwiGLU for Ascend NPUs: ``silu(a) * b`` (kernels and plans in `_gated`)."""

from __future__ import annotations

import torch
from liger_core.ops.swiglu import check_args

from liger_ops_ascend._gated import SILU, LigerGatedFunction


def swiglu(a: torch.Tensor, b: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    check_args(a, b, in_place)
    return LigerGatedFunction.apply(a, b, SILU, in_place)
