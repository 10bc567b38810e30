"""Row layouts the row-wise drivers (the norms) guarantee their kernels."""

from __future__ import annotations

import math

import torch


def as_rows(t: torch.Tensor, n_rows: int | None = None) -> torch.Tensor:
    """``t`` as ``(rows, t.shape[-1])`` with unit column stride: a view where one exists, else a
    copy. Rows keep their own stride (a gradient broadcast over rows keeps stride 0, no copy).
    ``n_rows`` is given for an incoming gradient (its rows are the input's)."""
    n_cols = t.shape[-1]
    rows = math.prod(t.shape[:-1]) if n_rows is None else n_rows
    t2d = t.reshape(rows, n_cols)  # explicit rows: n_cols may be 0
    return t2d if t2d.stride(-1) == 1 or n_cols <= 1 else t2d.contiguous()


def grad_buffer(dy2d: torch.Tensor, like: torch.Tensor, in_place: bool) -> torch.Tensor:
    """Where a backward writes an input's gradient: the incoming gradient ``dy2d`` itself when
    ``in_place`` and every element of it has memory of its own in ``like``'s dtype (dense rows),
    else a new buffer shaped and typed like ``like``. A gradient broadcast over rows is never
    written in place (its rows alias one another), and it is not copied to be written in place
    either: a copy costs what a new buffer costs, plus the copy."""
    if in_place and dy2d.is_contiguous() and dy2d.dtype == like.dtype:
        return dy2d
    return torch.empty(like.shape, dtype=like.dtype, device=like.device)
