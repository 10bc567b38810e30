"""Gated activations (SwiGLU, GEGLU) for NVIDIA GPUs: Triton kernels, launch and autograd Function.

Both are elementwise and memory-bound: forward reads a and b and writes c; backward reads
dc, a and b and writes grad_a and grad_b, recomputing the activation rather than saving it.
Each program streams one contiguous block of GLU_BLOCK elements; the activation runs in
float32 and is rounded to the input dtype before the multiply, as the models' eager code does.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_ops_cuda import hardware
from liger_ops_cuda._jit import tanh
from liger_ops_cuda._tiling import flat

# The activation (the kernels' ACT constexpr).
SILU = 0
GELU_TANH = 1


@triton.jit
def _act_and_grad(a, ACT: tl.constexpr):
    """The activation of float32 ``a`` and its derivative."""
    # 0.79788... = sqrt(2 / pi) and 0.044715 the cubic coefficient of GELU's tanh form, as
    # literals: a compiled kernel may not read non-constexpr globals.
    if ACT == 0:
        s = tl.sigmoid(a)
        return a * s, s * (1.0 + a * (1.0 - s))
    else:
        inner = 0.7978845608028654 * (a + 0.044715 * a * a * a)
        t = tanh(inner)
        d = 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * a * a)
        return 0.5 * a * (1.0 + t), d


@triton.jit
def _act(a, ACT: tl.constexpr):
    if ACT == 0:
        return a * tl.sigmoid(a)
    else:
        return 0.5 * a * (1.0 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))


@triton.jit
def _glu_forward_kernel(A, B, C, n_elements, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    a = tl.load(A + offs, mask=mask, other=0.0)
    b = tl.load(B + offs, mask=mask, other=0.0).to(tl.float32)
    act = _act(a.to(tl.float32), ACT).to(a.dtype).to(tl.float32)
    tl.store(C + offs, (act * b).to(C.dtype.element_ty), mask=mask)


@triton.jit
def _glu_backward_kernel(DC, A, B, DA, DB, n_elements, ACT: tl.constexpr, BLOCK: tl.constexpr):
    # DA/DB may be A/B themselves (in_place): every element is read before it is written.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    dc = tl.load(DC + offs, mask=mask, other=0.0).to(tl.float32)
    a_raw = tl.load(A + offs, mask=mask, other=0.0)
    b = tl.load(B + offs, mask=mask, other=0.0).to(tl.float32)
    act, dact = _act_and_grad(a_raw.to(tl.float32), ACT)
    db = dc * act.to(a_raw.dtype).to(tl.float32)
    da = dc * b * dact
    tl.store(DA + offs, da.to(DA.dtype.element_ty), mask=mask)
    tl.store(DB + offs, db.to(DB.dtype.element_ty), mask=mask)


def glu_forward(a1: torch.Tensor, b1: torch.Tensor, act: int, block: int | None = None) -> torch.Tensor:
    """``act(a1) * b1`` for flat contiguous ``a1``/``b1``."""
    c = torch.empty_like(a1)
    n = a1.numel()
    if n:
        block = block or hardware.GLU_BLOCK
        _glu_forward_kernel[(triton.cdiv(n, block),)](
            a1, b1, c, n, ACT=act, BLOCK=block, num_warps=hardware.GLU_NUM_WARPS
        )
    return c


def glu_backward(
    dc: torch.Tensor, a1: torch.Tensor, b1: torch.Tensor, act: int, in_place: bool, block: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients for flat ``a1``/``b1``; with ``in_place`` they are written into ``a1``/``b1``."""
    dc1 = flat(dc)
    da, db = (a1, b1) if in_place else (torch.empty_like(a1), torch.empty_like(b1))
    n = a1.numel()
    if n:
        block = block or hardware.GLU_BLOCK
        _glu_backward_kernel[(triton.cdiv(n, block),)](
            dc1, a1, b1, da, db, n, ACT=act, BLOCK=block, num_warps=hardware.GLU_NUM_WARPS
        )
    return da, db


class LigerGLUFunction(torch.autograd.Function):
    """The autograd Function of the gated activations: `LigerSwiGLUFunction` and
    `LigerGEGLUFunction` check their arguments and call `shared_forward` with their activation;
    backward (the same for both) is this one."""

    @staticmethod
    def shared_forward(ctx, a: torch.Tensor, b: torch.Tensor, act: int, in_place: bool) -> torch.Tensor:
        a1, b1 = flat(a), flat(b)
        c = glu_forward(a1, b1, act)
        ctx.save_for_backward(a1, b1)
        ctx.act, ctx.in_place, ctx.shape = act, in_place, a.shape
        return c.view(a.shape)

    @staticmethod
    def backward(ctx, dc):
        a1, b1 = ctx.saved_tensors
        da, db = glu_backward(dc, a1, b1, ctx.act, ctx.in_place)
        if ctx.in_place:
            # The kernel overwrote a and b behind autograd's back: bump their version counters,
            # so a node that also saved them (a misuse of in_place) raises instead of reading
            # gradients as activations.
            torch.autograd.graph.increment_version((a1, b1))
        return da.view(ctx.shape), db.view(ctx.shape), None
