"""The gated activations (swiglu, geglu) for Ascend NPUs: one elementwise kernel pair.

``c = act(a) * b``, act computed in fp32 and rounded to the input dtype before the multiply
(as the models' eager code does). The inputs are flattened and walked as blocks of
``BLOCK`` elements by one program per vector core (``range(pid, n_blocks, programs)``); the
block is the largest power of two whose live tiles fit the UB budget (`_tiling.flat_plan`),
so a 14336-wide row or a whole batch is sub-blocked the same way.

GELU (tanh approximation) is written with a sigmoid, ``0.5 * (1 + tanh(u)) = sigmoid(2u)``:
no cancellation near ``u = 0`` and only ``exp``, which the NPU and the interpreter both have.

in_place: the backward writes grad_a and grad_b over ``a`` and ``b`` (each element is read
before it is overwritten by the same program).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from liger_ops_ascend import hardware
from liger_ops_ascend._tiling import FP32, FlatPlan, elem_bytes, f32_copy, flat_plan
from liger_ops_ascend.launch import Tile, launch

SILU = 0
GELU_TANH = 1
_NAMES = {SILU: "swiglu", GELU_TANH: "geglu"}
SQRT_2_OVER_PI = 0.7978845608028654


@triton.jit
def _act_and_grad(a, ACT: tl.constexpr):
    """(act(a), d act / da) in fp32."""
    if ACT == 0:
        s = tl.sigmoid(a)
        return a * s, s * (1.0 + a * (1.0 - s))
    else:
        a2 = a * a
        u = 0.7978845608028654 * a * (1.0 + 0.044715 * a2)
        s = tl.sigmoid(2.0 * u)
        du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * a2)
        return a * s, s + 2.0 * a * s * (1.0 - s) * du


@triton.jit
def _gated_forward_kernel(A, B, C, n, n_blocks, ACT: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    idx = tl.arange(0, BLOCK)
    for blk in range(pid, n_blocks, num_programs):
        start = (pid * 0 + blk).to(tl.int64) * BLOCK
        # Compare in int32: int64 vector compares run as scalar code on the vector cores.
        mask = idx < tl.minimum(n - start, BLOCK).to(tl.int32)
        a = tl.load(A + start + idx, mask=mask, other=0.0)
        b = tl.load(B + start + idx, mask=mask, other=0.0)
        act, _ = _act_and_grad(a.to(tl.float32), ACT)
        c = act.to(a.dtype).to(tl.float32) * b.to(tl.float32)
        tl.store(C + start + idx, c.to(C.dtype.element_ty), mask=mask)


@triton.jit
def _gated_backward_kernel(DC, A, B, DA, DB, n, n_blocks, ACT: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    idx = tl.arange(0, BLOCK)
    for blk in range(pid, n_blocks, num_programs):
        start = (pid * 0 + blk).to(tl.int64) * BLOCK
        # Compare in int32: int64 vector compares run as scalar code on the vector cores.
        mask = idx < tl.minimum(n - start, BLOCK).to(tl.int32)
        dc = tl.load(DC + start + idx, mask=mask, other=0.0).to(tl.float32)
        a = tl.load(A + start + idx, mask=mask, other=0.0)
        b = tl.load(B + start + idx, mask=mask, other=0.0).to(tl.float32)
        act, dact = _act_and_grad(a.to(tl.float32), ACT)
        db = dc * act.to(a.dtype).to(tl.float32)
        da = dc * b * dact
        tl.store(DA + start + idx, da.to(DA.dtype.element_ty), mask=mask)
        tl.store(DB + start + idx, db.to(DB.dtype.element_ty), mask=mask)


def forward_tiles(block: int, xb: int) -> tuple[Tile, ...]:
    tiles = [Tile(t, 1, block, xb) for t in ("a", "b", "act_rounded", "c")]
    tiles += f32_copy("a", 1, block, xb) + f32_copy("b", 1, block, xb) + f32_copy("act_rounded", 1, block, xb)
    tiles += [Tile(t, 1, block, FP32) for t in ("u", "sigmoid", "act", "c_f32")]
    return tuple(tiles)


def backward_tiles(block: int, xb: int) -> tuple[Tile, ...]:
    tiles = [Tile(t, 1, block, xb) for t in ("dc", "a", "b", "act_rounded", "da", "db")]
    for t in ("dc", "a", "b", "act_rounded"):
        tiles += f32_copy(t, 1, block, xb)
    tiles += [Tile(t, 1, block, FP32) for t in ("u", "sigmoid", "act", "dact", "du", "da_f32", "db_f32")]
    return tuple(tiles)


@functools.lru_cache(maxsize=1024)
def _plan(act: int, direction: str, n: int, xb: int, hw: hardware.Hardware) -> FlatPlan:
    tiles = functools.partial(forward_tiles if direction == "forward" else backward_tiles, xb=xb)
    name = f"{_NAMES[act]}_{direction}"
    return flat_plan(name, n, ((name, tiles),), hw, hardware.min_block(xb))


def plan(act: int, direction: str, n: int, dtype: torch.dtype, hw: hardware.Hardware) -> FlatPlan:
    """Block and launch of ``direction`` over ``n`` elements of ``dtype``."""
    return _plan(act, direction, n, elem_bytes(dtype), hw)


class LigerGatedFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, act, in_place):
        hw = hardware.current(a.device)
        a_c, b_c = a.contiguous(), b.contiguous()
        c = torch.empty_like(a_c)
        n = a_c.numel()
        if n:
            p = plan(act, "forward", n, a.dtype, hw)
            launch(_gated_forward_kernel, p.kernels[0], hw, a_c, b_c, c, n, p.n_blocks, ACT=act, BLOCK=p.block)
        ctx.save_for_backward(a_c, b_c)
        ctx.act, ctx.in_place, ctx.hw = act, in_place, hw
        return c

    @staticmethod
    def backward(ctx, dc):
        a_c, b_c = ctx.saved_tensors
        hw = ctx.hw
        dc = dc.contiguous()
        da, db = (a_c, b_c) if ctx.in_place else (torch.empty_like(a_c), torch.empty_like(b_c))
        n = a_c.numel()
        if n:
            p = plan(ctx.act, "backward", n, a_c.dtype, hw)
            launch(
                _gated_backward_kernel,
                p.kernels[0],
                hw,
                dc,
                a_c,
                b_c,
                da,
                db,
                n,
                p.n_blocks,
                ACT=ctx.act,
                BLOCK=p.block,
            )
        return da, db, None, None
