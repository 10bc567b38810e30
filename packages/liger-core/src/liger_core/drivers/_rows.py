"""Row layouts the drivers hand to kernels (shared by the activation and softmax-family drivers)."""

from __future__ import annotations

import math

import torch


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as ``(rows, t.shape[-1])`` with unit column stride: a view where one exists, a copy
    only when the last dimension is strided (a single column needs no copy). Rows broadcast with
    stride 0 (an expanded incoming gradient) stay views: row-strided kernels read them as they are."""
    n_cols = t.shape[-1]
    t2d = t.reshape(math.prod(t.shape[:-1]), n_cols)  # not -1: ambiguous when n_cols == 0
    return t2d if t2d.stride(-1) == 1 or n_cols <= 1 else t2d.contiguous()
