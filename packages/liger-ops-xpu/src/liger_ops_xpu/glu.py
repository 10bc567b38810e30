"""Gated activations for Intel GPUs: swiglu (``silu(a) * b``) and geglu (``gelu_tanh(a) * b``),
one elementwise kernel pair with the activation chosen by a constexpr, its launch and both ops'
autograd Functions (the backward shared).

A flat 1-D grid of ``ELEMENTWISE_BLOCK``-element programs over contiguous a and b: a pure
streaming op (3 reads and 2 writes per element in backward), so blocks are sized for memory
latency rather than registers, and the default register file leaves more threads resident
(no large GRF). The activation is computed in fp32 and rounded to the input dtype before the
multiply, as the models' eager code does; backward recomputes it (nothing saved but a and b).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.ops import geglu, swiglu

from liger_ops_xpu._jit import tanh
from liger_ops_xpu._tiling import launch_flat

SILU = 0
GELU_TANH = 1


@triton.jit
def _act_and_grad(a, ACT: tl.constexpr):
    """(act(a), act'(a)) in fp32."""
    if ACT == 0:
        sig = 1.0 / (1.0 + tl.exp(-a))
        return a * sig, sig * (1.0 + a * (1.0 - sig))
    else:
        inner = 0.7978845608028654 * (a + 0.044715 * a * a * a)
        t = tanh(inner)
        d_inner = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * a * a)
        return 0.5 * a * (1.0 + t), 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * d_inner


@triton.jit
def _glu_forward_kernel(A, B, C, n, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(A + offs, mask=mask, other=0.0)
    b = tl.load(B + offs, mask=mask, other=0.0)
    act, _ = _act_and_grad(a.to(tl.float32), ACT)
    # Rounded like the model, multiplied in fp32 (the same result as a multiply in a's dtype,
    # whose exact product rounds once; bf16 arithmetic is not emulated by older interpreters).
    c = act.to(a.dtype).to(tl.float32) * b.to(tl.float32)
    tl.store(C + offs, c.to(C.dtype.element_ty), mask=mask)


@triton.jit
def _glu_backward_kernel(DC, A, B, DA, DB, n, ACT: tl.constexpr, BLOCK: tl.constexpr):
    # DA/DB may alias A/B (in_place): every element is read before this program writes it.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dc = tl.load(DC + offs, mask=mask, other=0.0).to(tl.float32)
    a = tl.load(A + offs, mask=mask, other=0.0)
    b = tl.load(B + offs, mask=mask, other=0.0).to(tl.float32)
    act, dact = _act_and_grad(a.to(tl.float32), ACT)
    db = dc * act.to(a.dtype).to(tl.float32)
    da = dc * b * dact
    tl.store(DA + offs, da.to(DA.dtype.element_ty), mask=mask)
    tl.store(DB + offs, db.to(DB.dtype.element_ty), mask=mask)


def glu_forward(a1: torch.Tensor, b1: torch.Tensor, act: int) -> torch.Tensor:
    """``act(a1) * b1`` for contiguous ``a1``/``b1``."""
    c = torch.empty_like(a1)
    launch_flat(_glu_forward_kernel, a1.numel(), a1.device, a1, b1, c, ACT=act)
    return c


def glu_backward(dc: torch.Tensor, a1: torch.Tensor, b1: torch.Tensor, act: int, in_place: bool):
    """Gradients for contiguous ``a1``/``b1``; with ``in_place`` they are written into them."""
    dc = dc.contiguous()
    # in_place: the caller owns a and b (see the contract); their buffers take the gradients.
    da, db = (a1, b1) if in_place else (torch.empty_like(a1), torch.empty_like(b1))
    launch_flat(_glu_backward_kernel, a1.numel(), a1.device, dc, a1, b1, da, db, ACT=act)
    return da, db


class LigerGLUFunction(torch.autograd.Function):
    """The autograd of swiglu and geglu (``(a, b, in_place)``): each op's subclass below checks
    its arguments and calls `forward_act` with its activation; backward is this one."""

    @staticmethod
    def forward_act(ctx, a: torch.Tensor, b: torch.Tensor, in_place: bool, act: int) -> torch.Tensor:
        a1, b1 = a.contiguous(), b.contiguous()
        c = glu_forward(a1, b1, act)
        ctx.save_for_backward(a1, b1)
        ctx.in_place, ctx.act = in_place, act
        return c.view(a.shape)

    @staticmethod
    def backward(ctx, dc):
        a1, b1 = ctx.saved_tensors
        da, db = glu_backward(dc, a1, b1, ctx.act, ctx.in_place)
        return da.view(dc.shape), db.view(dc.shape), None


@implements("swiglu")
class LigerSwiGLUFunction(LigerGLUFunction):
    @staticmethod
    def forward(ctx, a, b, in_place):
        swiglu.check_args(a, b, in_place)
        return LigerGLUFunction.forward_act(ctx, a, b, in_place, SILU)


@implements("geglu")
class LigerGEGLUFunction(LigerGLUFunction):
    @staticmethod
    def forward(ctx, a, b, in_place):
        geglu.check_args(a, b, in_place)
        return LigerGLUFunction.forward_act(ctx, a, b, in_place, GELU_TANH)
