"""Squared ReLU (``relu(x) ** 2``, Nemotron's activation) for NVIDIA GPUs: Triton kernels, launch
and autograd Function.

Elementwise and memory-bound like the gated activations, and launched like them: each program
streams one contiguous block of GLU_BLOCK elements. Forward reads x and writes y; backward
reads the incoming gradient and x (saved, not y: the gradient needs relu(x) itself) and writes
grad_x = 2 * relu(x) * grad_y, all in float32 and rounded once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.ops.relu_squared import check_args
from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import flat


@triton.jit
def _relu_squared_forward_kernel(X, Y, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    r = tl.maximum(tl.load(X + offs, mask=mask, other=0.0).to(tl.float32), 0.0)
    tl.store(Y + offs, (r * r).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _relu_squared_backward_kernel(DY, X, DX, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.maximum(tl.load(X + offs, mask=mask, other=0.0).to(tl.float32), 0.0)
    tl.store(DX + offs, (2.0 * r * dy).to(DX.dtype.element_ty), mask=mask)


def relu_squared_forward(x1: torch.Tensor, block: int | None = None) -> torch.Tensor:
    """``relu(x1) ** 2`` for flat contiguous ``x1``."""
    y = torch.empty_like(x1)
    n = x1.numel()
    if n:
        block = block or hardware.GLU_BLOCK
        _relu_squared_forward_kernel[(triton.cdiv(n, block),)](x1, y, n, BLOCK=block, num_warps=hardware.GLU_NUM_WARPS)
    return y


def relu_squared_backward(dy: torch.Tensor, x1: torch.Tensor, block: int | None = None) -> torch.Tensor:
    """``grad_x`` for flat contiguous ``x1``."""
    dx = torch.empty_like(x1)
    n = x1.numel()
    if n:
        block = block or hardware.GLU_BLOCK
        _relu_squared_backward_kernel[(triton.cdiv(n, block),)](
            flat(dy), x1, dx, n, BLOCK=block, num_warps=hardware.GLU_NUM_WARPS
        )
    return dx


@implements("relu_squared")
class LigerReLUSquaredFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        check_args(x)
        x1 = flat(x)
        ctx.save_for_backward(x1)
        ctx.shape = x.shape
        return relu_squared_forward(x1).view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        (x1,) = ctx.saved_tensors
        return relu_squared_backward(dy, x1).view(ctx.shape)
