"""Gated activations (swiglu, geglu) for Intel GPUs: one elementwise kernel pair, the
activation chosen by a constexpr.

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

from liger_ops_xpu import hardware
from liger_ops_xpu._jit import tanh
from liger_ops_xpu._tiling import plan_flat

SILU = 0
GELU_TANH = 1


@triton.jit
def _activation(a, ACT: tl.constexpr):
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
def _glu_forward_kernel(A, B, Y, n_elements, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    a = tl.load(A + offs, mask=mask, other=0.0)
    b = tl.load(B + offs, mask=mask, other=0.0)
    act, _ = _activation(a.to(tl.float32), ACT)
    # Rounded like the model, multiplied in fp32 (the same result as a multiply in a's dtype,
    # whose exact product rounds once; bf16 arithmetic is not emulated by older interpreters).
    y = act.to(a.dtype).to(tl.float32) * b.to(tl.float32)
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _glu_backward_kernel(DY, A, B, DA, DB, n_elements, ACT: tl.constexpr, BLOCK: tl.constexpr):
    # DA/DB may alias A/B (in_place): every element is read before this program writes it.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
    a = tl.load(A + offs, mask=mask, other=0.0)
    b = tl.load(B + offs, mask=mask, other=0.0).to(tl.float32)
    act, d_act = _activation(a.to(tl.float32), ACT)
    db = dy * act.to(a.dtype).to(tl.float32)
    da = dy * b * d_act
    tl.store(DA + offs, da.to(DA.dtype.element_ty), mask=mask)
    tl.store(DB + offs, db.to(DB.dtype.element_ty), mask=mask)


def _launch(kernel, n: int, device: torch.device, *args, act: int) -> None:
    plan = plan_flat(n)
    kernel[(plan.programs,)](
        *args,
        n,
        ACT=act,
        BLOCK=plan.block,
        **hardware.launch_kwargs(kernel, device, plan.num_warps, register_heavy=False),
    )


class LigerGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, in_place, act):
        a_c, b_c = a.contiguous(), b.contiguous()
        y = torch.empty_like(a_c)
        if a_c.numel():
            _launch(_glu_forward_kernel, a_c.numel(), a.device, a_c, b_c, y, act=act)
        ctx.save_for_backward(a_c, b_c)
        ctx.in_place, ctx.act = in_place, act
        return y.view(a.shape)

    @staticmethod
    def backward(ctx, dy):
        a, b = ctx.saved_tensors
        dy = dy.contiguous()
        # in_place: the caller owns a and b (see the contract); their buffers take the gradients.
        da, db = (a, b) if ctx.in_place else (torch.empty_like(a), torch.empty_like(b))
        if a.numel():
            _launch(_glu_backward_kernel, a.numel(), a.device, dy, a, b, da, db, act=ctx.act)
        return da.view(dy.shape), db.view(dy.shape), None, None
