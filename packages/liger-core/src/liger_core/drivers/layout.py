"""Row layouts shared by the row-wise drivers (the norms): how a tensor reaches the kernels as
``(rows, hidden)`` with unit column stride, and how outputs keep the input's memory order."""

from __future__ import annotations

import math

import torch


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


def rows_like(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t`` (an incoming gradient of ``like``'s shape) as rows in the same order as
    ``memory_order_rows(like)``: a view when it already has ``like``'s strides, else a copy into them."""
    if t.stride() != like.stride() or memory_order_rows(t) is None:
        t = torch.empty_like(like).copy_(t)
    return memory_order_rows(t)


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as ``(rows, hidden)`` in logical order with unit column stride (a copy only when needed)."""
    hidden = t.shape[-1] if t.dim() else 1
    t2 = t.reshape(math.prod(t.shape[:-1]), hidden)  # explicit rows: hidden may be 0
    return t2 if t2.stride(-1) == 1 or hidden <= 1 else t2.contiguous()
