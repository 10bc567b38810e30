"""GEGLU for Ascend NPUs: ``gelu_tanh(a) * b`` (kernels and plans in `_gated`)."""

from __future__ import annotations

import torch
from liger_core.ops.geglu import check_args

from liger_ops_ascend._gated import GELU_TANH, LigerGatedFunction


def geglu(a: torch.Tensor, b: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    check_args(a, b, in_place)
    return LigerGatedFunction.apply(a, b, GELU_TANH, in_place)
