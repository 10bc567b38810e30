"""Gated activations for Ascend NPUs: SwiGLU (``silu(a) * b``) and GEGLU (``gelu_tanh(a) * b``),
one elementwise kernel pair (the activation a constexpr), its tile plans, launch and autograd
Functions.

``c = act(a) * b``, act computed in fp32 and rounded to the input dtype before the multiply
(as the models' eager code does). The inputs are flattened and walked as blocks of
``BLOCK`` elements by one program per vector core (``range(pid, n_blocks, programs)``); the
block is the largest power of two whose live tiles fit the UB budget (`_tiling.plan_flat`),
whatever the number of elements (no recompile per batch size), so a 14336-wide row or a whole
batch is sub-blocked the same way.

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
from liger_core.backend import implements
from liger_core.ops.geglu import check_args as check_geglu_args
from liger_core.ops.swiglu import check_args as check_swiglu_args

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import flat_block, flat_indices
from liger_ops_ascend._tiling import FlatPlan, dma, elem_bytes, launch_flat, plan_flat, work
from liger_ops_ascend.launch import Tile

SILU = 0
GELU_TANH = 1
_NAMES = {SILU: "swiglu", GELU_TANH: "geglu"}


@triton.jit
def _act_and_grad(a, ACT: tl.constexpr):
    """(act(a), d act / da) in fp32. 0.79788... = sqrt(2 / pi) and 0.044715 are GELU's tanh-form
    constants, as literals: a compiled kernel may not read non-constexpr globals."""
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
def _glu_forward_kernel(A, B, C, n, n_blocks, ACT: tl.constexpr, BLOCK: tl.constexpr):
    pid, num_programs, idx = flat_indices(BLOCK)
    for blk in range(pid, n_blocks, num_programs):
        start, mask = flat_block(blk, pid, n, idx, BLOCK)
        # Padded lanes only reach masked-off stores: no fill before the DMA.
        a = tl.load(A + start + idx, mask=mask, care_padding=False)
        b = tl.load(B + start + idx, mask=mask, care_padding=False)
        act, _ = _act_and_grad(a.to(tl.float32), ACT)
        c = act.to(a.dtype).to(tl.float32) * b.to(tl.float32)
        tl.store(C + start + idx, c.to(C.dtype.element_ty), mask=mask)


@triton.jit
def _glu_backward_kernel(DC, A, B, DA, DB, n, n_blocks, ACT: tl.constexpr, BLOCK: tl.constexpr):
    pid, num_programs, idx = flat_indices(BLOCK)
    for blk in range(pid, n_blocks, num_programs):
        start, mask = flat_block(blk, pid, n, idx, BLOCK)
        dc = tl.load(DC + start + idx, mask=mask, care_padding=False).to(tl.float32)
        a = tl.load(A + start + idx, mask=mask, care_padding=False)
        b = tl.load(B + start + idx, mask=mask, care_padding=False).to(tl.float32)
        act, dact = _act_and_grad(a.to(tl.float32), ACT)
        db = dc * act.to(a.dtype).to(tl.float32)
        da = dc * b * dact
        tl.store(DA + start + idx, da.to(DA.dtype.element_ty), mask=mask)
        tl.store(DB + start + idx, db.to(DB.dtype.element_ty), mask=mask)


# Tiles in the terms of the UB model (ub_model.md). Peak fp32 tiles, by hand from the kernels:
# forward, SiLU: a (then act in its place), sigmoid, b; GELU adds a^2 / u. Backward, SiLU: dc,
# b, act, d act / da and one product once a and the sigmoid are dead; GELU adds du.
_F32_PEAK = {("forward", SILU): 3, ("forward", GELU_TANH): 4, ("backward", SILU): 5, ("backward", GELU_TANH): 6}


def forward_tiles(block: int, xb: int, act: int = SILU) -> tuple[Tile, ...]:
    tiles = dma("a", 1, block, xb) + dma("b", 1, block, xb) + dma("c", 1, block, xb)
    # act is rounded to the input dtype before the multiply: one tile in that dtype.
    tiles += work("f32_", 1, block, _F32_PEAK["forward", act]) + work("act_rounded", 1, block, 1, xb)
    return tuple(tiles)


def backward_tiles(block: int, xb: int, act: int = SILU) -> tuple[Tile, ...]:
    tiles = [t for name in ("dc", "a", "b", "da", "db") for t in dma(name, 1, block, xb)]
    tiles += work("f32_", 1, block, _F32_PEAK["backward", act]) + work("act_rounded", 1, block, 1, xb)
    return tuple(tiles)


@functools.lru_cache(maxsize=1024)
def _plan_tiles(act: int, direction: str, n: int, xb: int, hw: hardware.Hardware, max_block: int) -> FlatPlan:
    tiles = functools.partial(forward_tiles if direction == "forward" else backward_tiles, xb=xb, act=act)
    name = f"{_NAMES[act]}_{direction}"
    return plan_flat(name, n, ((name, tiles),), hw, hardware.min_block(xb), max_block)


def plan_tiles(act: int, direction: str, n: int, dtype: torch.dtype, hw: hardware.Hardware) -> FlatPlan:
    """Block and launch of ``direction`` over ``n`` elements of ``dtype``."""
    return _plan_tiles(act, direction, n, elem_bytes(dtype), hw, hardware.MAX_BLOCK_N)


# -- host side -------------------------------------------------------------------------------


def glu_forward(a: torch.Tensor, b: torch.Tensor, act: int, hw: hardware.Hardware) -> torch.Tensor:
    """``act(a) * b`` of contiguous ``a`` and ``b``."""
    c = torch.empty_like(a)
    n = a.numel()
    if n:
        launch_flat(_glu_forward_kernel, n, plan_tiles(act, "forward", n, a.dtype, hw), hw, a, b, c, ACT=act)
    return c


def glu_backward(
    dc: torch.Tensor, a: torch.Tensor, b: torch.Tensor, act: int, in_place: bool, hw: hardware.Hardware
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_a, grad_b)`` of contiguous tensors; ``in_place``: written over ``a`` and ``b``."""
    da, db = (a, b) if in_place else (torch.empty_like(a), torch.empty_like(b))
    n = a.numel()
    if n:
        p = plan_tiles(act, "backward", n, a.dtype, hw)
        launch_flat(_glu_backward_kernel, n, p, hw, dc, a, b, da, db, ACT=act)
    return da, db


class LigerGLUFunction(torch.autograd.Function):
    """``act(a) * b`` for the activation ``act`` (SILU, GELU_TANH). The ops' Functions
    (`LigerSwiGLUFunction`, `LigerGEGLUFunction`) check their arguments and call `forward`
    with their activation; the backward is this one (autograd drops its trailing None)."""

    @staticmethod
    def forward(ctx, a, b, act, in_place):
        hw = hardware.current(a.device)
        a_c, b_c = a.contiguous(), b.contiguous()
        c = glu_forward(a_c, b_c, act, hw)
        ctx.save_for_backward(a_c, b_c)
        ctx.act, ctx.in_place, ctx.hw = act, in_place, hw
        return c

    @staticmethod
    def backward(ctx, dc):
        a_c, b_c = ctx.saved_tensors
        da, db = glu_backward(dc.contiguous(), a_c, b_c, ctx.act, ctx.in_place, ctx.hw)
        return da, db, None, None


@implements("swiglu")
class LigerSwiGLUFunction(LigerGLUFunction):
    @staticmethod
    def forward(ctx, a, b, in_place):
        check_swiglu_args(a, b, in_place)
        return LigerGLUFunction.forward(ctx, a, b, SILU, in_place)


@implements("geglu")
class LigerGEGLUFunction(LigerGLUFunction):
    @staticmethod
    def forward(ctx, a, b, in_place):
        check_geglu_args(a, b, in_place)
        return LigerGLUFunction.forward(ctx, a, b, GELU_TANH, in_place)
