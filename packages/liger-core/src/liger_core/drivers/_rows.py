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


def is_dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill one gap-free block of its storage with no element twice: a
    contiguous tensor with its dimensions permuted (a transposed view of a projection's output)."""
    expected = 1
    for stride, size in sorted((st, s) for s, st in zip(t.shape, t.stride(), strict=True) if s != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def memory_order_rows(t: torch.Tensor) -> torch.Tensor | None:
    """``t``'s rows (its last dimension) as a ``(rows, hidden)`` view in memory order, without a copy,
    when ``t`` is dense with a unit last stride; else None. For a row-wise op the order of the rows
    does not matter, so a transposed ``(batch, heads, seq, head_dim)`` view (Gemma-3's q/k norms) is
    read where it lies and its output, made by ``torch.empty_like`` (which keeps a dense input's
    strides), comes back in the same memory order: the next ops (RoPE, attention, the output
    projection's ``.contiguous()``) then see the layout stock PyTorch would have given them."""
    hidden = t.shape[-1] if t.dim() else 1
    if t.dim() == 0 or t.numel() == 0 or (hidden > 1 and t.stride(-1) != 1) or not is_dense(t):
        return None
    return t.as_strided((t.numel() // hidden, hidden), (hidden, 1))


def in_layout(rows: torch.Tensor, shape: torch.Size, stride: tuple[int, ...]) -> torch.Tensor:
    """Contiguous ``rows`` (a kernel's output, in the memory order `memory_order_rows` read the input
    in) as a tensor of the input's ``shape`` and ``stride``: a view, no copy."""
    return rows.as_strided(shape, stride, rows.storage_offset())


def rows_in_layout(t: torch.Tensor, shape: torch.Size, stride: tuple[int, ...]) -> torch.Tensor:
    """``t`` (an incoming gradient of that shape) as rows in the memory order of a dense input with
    ``stride``: a view when ``t`` already has that layout (a gradient returned in its output's
    layout), else a copy into it."""
    if t.stride() != tuple(stride) or memory_order_rows(t) is None:
        t = torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device).copy_(t)
    return memory_order_rows(t)
