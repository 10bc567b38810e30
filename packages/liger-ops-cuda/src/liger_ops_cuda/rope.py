"""RoPE (rotate-half, transformers' LLaMA form) for NVIDIA GPUs; the kernel is in `_rotary`."""

from __future__ import annotations

import torch

from liger_core.ops.rope import check_args
from liger_ops_cuda._rotary import LigerRotaryFunction


def rope(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    check_args(q, k, cos, sin, position_ids, unsqueeze_dim)
    # position_ids is unused, as in transformers: cos/sin are already gathered per position.
    return LigerRotaryFunction.apply(q, k, cos, sin, None, unsqueeze_dim)
