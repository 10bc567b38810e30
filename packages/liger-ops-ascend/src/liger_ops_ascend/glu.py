"""Gated activations for Ascend NPUs: SwiGLU (``silu(a) * b``) and GEGLU (``gelu_tanh(a) * b``),
one elementwise kernel pair (the activation a constexpr), its tile plans, launch and the kernel
adapter of `liger_core.drivers.glu`.

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

fused_gate_up_swiglu reads both halves from one ``(rows, 2 * n_cols)`` gate-up tensor (the gate
first): the blocks are column blocks of one row (``rows x ceil(n_cols / BLOCK)`` of them, walked
grid-stride as above), so each DMA stays inside one row; the block is swiglu's UB-sized one,
capped at the half's width. Its backward writes the gradient of both halves into one tensor.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import glu as glu_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import flat_block, flat_indices
from liger_ops_ascend._tiling import FlatPlan, as_rows, dma, elem_bytes, launch_flat, plan_flat, work
from liger_ops_ascend.launch import Tile, launch

SILU = glu_driver.SILU
GELU_TANH = glu_driver.GELU_TANH
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


@triton.jit
def _row_block(blk, pid, n_cols, n_col_blocks, idx, BLOCK: tl.constexpr):
    """``(row, first column, mask)`` of block ``blk`` of a walk over the column blocks of every
    row (int64 row and column, int32 mask bound as `flat_block`'s)."""
    blk64 = (pid * 0 + blk).to(tl.int64)
    row = blk64 // n_col_blocks
    col0 = (blk64 - row * n_col_blocks) * BLOCK
    return row, col0, idx < tl.minimum(n_cols - col0, BLOCK).to(tl.int32)


@triton.jit
def _gate_up_forward_kernel(
    GU, C, n_cols, gu_row_stride, n_col_blocks, n_blocks, ACT: tl.constexpr, BLOCK: tl.constexpr
):
    pid, num_programs, idx = flat_indices(BLOCK)
    for blk in range(pid, n_blocks, num_programs):
        row, col0, mask = _row_block(blk, pid, n_cols, n_col_blocks, idx, BLOCK)
        gate_start = row * gu_row_stride + col0
        a = tl.load(GU + gate_start + idx, mask=mask, care_padding=False)
        b = tl.load(GU + gate_start + n_cols + idx, mask=mask, care_padding=False)
        act, _ = _act_and_grad(a.to(tl.float32), ACT)
        c = act.to(a.dtype).to(tl.float32) * b.to(tl.float32)
        tl.store(C + row * n_cols + col0 + idx, c.to(C.dtype.element_ty), mask=mask)


@triton.jit
def _gate_up_backward_kernel(
    DC, GU, DGU, n_cols, gu_row_stride, dgu_row_stride, n_col_blocks, n_blocks, ACT: tl.constexpr, BLOCK: tl.constexpr
):
    # DGU may be GU itself (in_place): a block's gate and up elements are read before its program
    # writes their gradients, and no other program touches them.
    pid, num_programs, idx = flat_indices(BLOCK)
    for blk in range(pid, n_blocks, num_programs):
        row, col0, mask = _row_block(blk, pid, n_cols, n_col_blocks, idx, BLOCK)
        gate_start = row * gu_row_stride + col0
        dc = tl.load(DC + row * n_cols + col0 + idx, mask=mask, care_padding=False).to(tl.float32)
        a = tl.load(GU + gate_start + idx, mask=mask, care_padding=False)
        b = tl.load(GU + gate_start + n_cols + idx, mask=mask, care_padding=False).to(tl.float32)
        act, dact = _act_and_grad(a.to(tl.float32), ACT)
        db = dc * act.to(a.dtype).to(tl.float32)
        da = dc * b * dact
        grad_start = row * dgu_row_stride + col0
        tl.store(DGU + grad_start + idx, da.to(DGU.dtype.element_ty), mask=mask)
        tl.store(DGU + grad_start + n_cols + idx, db.to(DGU.dtype.element_ty), mask=mask)


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


@dataclasses.dataclass(frozen=True)
class GateUpPlan:
    """The column blocks of every row of a gate-up tensor: ``flat`` (block, programs, grid-stride
    trips, blocks in all, the guard's plan) and ``n_col_blocks`` per row."""

    flat: FlatPlan
    n_col_blocks: int


@functools.lru_cache(maxsize=1024)
def _plan_gate_up(direction: str, n_rows: int, n_cols: int, xb: int, hw: hardware.Hardware) -> GateUpPlan:
    # swiglu's tiles and UB-sized block (the same buffers per element), capped at the half's width.
    name = f"fused_gate_up_swiglu_{direction}"
    tiles = functools.partial(forward_tiles if direction == "forward" else backward_tiles, xb=xb, act=SILU)
    cap = min(hardware.MAX_BLOCK_N, max(hardware.min_block(xb), triton.next_power_of_2(max(n_cols, 1))))
    p = plan_flat(name, n_cols, ((name, tiles),), hw, hardware.min_block(xb), cap)
    n_col_blocks = triton.cdiv(max(n_cols, 1), p.block)
    n_blocks = max(n_rows, 1) * n_col_blocks
    programs = min(hw.vector_cores, n_blocks)
    kernels = tuple(dataclasses.replace(k, grid=(programs,)) for k in p.kernels)
    flat = FlatPlan(p.block, programs, triton.cdiv(n_blocks, programs), n_blocks, kernels)
    return GateUpPlan(flat, n_col_blocks)


def plan_gate_up(direction: str, n_rows: int, n_cols: int, dtype: torch.dtype, hw: hardware.Hardware) -> GateUpPlan:
    """Blocks and launch of ``direction`` over ``n_rows`` gate-up rows of halves ``n_cols`` wide."""
    return _plan_gate_up(direction, n_rows, n_cols, elem_bytes(dtype), hw)


def gate_up_forward(gu: torch.Tensor, act: int, hw: hardware.Hardware) -> torch.Tensor:
    """``act(gate) * up`` of ``(rows, 2 * n_cols)`` ``gu`` (unit column stride): ``(rows, n_cols)``."""
    n_rows, n_cols = gu.shape[0], gu.shape[1] // 2
    c = torch.empty((n_rows, n_cols), dtype=gu.dtype, device=gu.device)
    if n_rows:
        p = plan_gate_up("forward", n_rows, n_cols, gu.dtype, hw)
        launch(
            _gate_up_forward_kernel, p.flat.kernels[0], hw, gu, c, n_cols, gu.stride(0), p.n_col_blocks,
            p.flat.n_blocks, ACT=act, BLOCK=p.flat.block,
        )  # fmt: skip
    return c


def gate_up_backward(
    dc: torch.Tensor, gu: torch.Tensor, act: int, in_place: bool, hw: hardware.Hardware
) -> torch.Tensor:
    """The gradient of ``gu`` in one ``(rows, 2 * n_cols)`` tensor; ``in_place``: written over ``gu``."""
    n_rows, n_cols = gu.shape[0], gu.shape[1] // 2
    dgu = gu if in_place else torch.empty((n_rows, 2 * n_cols), dtype=gu.dtype, device=gu.device)
    if n_rows:
        p = plan_gate_up("backward", n_rows, n_cols, gu.dtype, hw)
        launch(
            _gate_up_backward_kernel, p.flat.kernels[0], hw, dc, gu, dgu, n_cols, gu.stride(0), dgu.stride(0),
            p.n_col_blocks, p.flat.n_blocks, ACT=act, BLOCK=p.flat.block,
        )  # fmt: skip
    return dgu


class GLUKernels:
    """`liger_core.drivers.glu.GLUKernels` on this module's kernels (the state: the device's hardware
    facts). The gate-up rows get this backend's row-stride bound (`as_rows`)."""

    protocol = glu_driver.PROTOCOL

    @staticmethod
    def forward(a: torch.Tensor, b: torch.Tensor, activation: int) -> tuple[torch.Tensor, hardware.Hardware]:
        hw = hardware.current(a.device)
        return glu_forward(a, b, activation, hw), hw

    @staticmethod
    def backward(dc, a, b, activation: int, in_place: bool, hw: hardware.Hardware) -> tuple[torch.Tensor, torch.Tensor]:
        return glu_backward(dc, a, b, activation, in_place, hw)

    @staticmethod
    def gate_up_forward(gate_up: torch.Tensor, activation: int) -> tuple[torch.Tensor, hardware.Hardware]:
        hw = hardware.current(gate_up.device)
        return gate_up_forward(as_rows(gate_up), activation, hw), hw

    @staticmethod
    def gate_up_backward(dc, gate_up, activation: int, in_place: bool, hw: hardware.Hardware) -> torch.Tensor:
        # in_place is asked only of a contiguous gate_up, which as_rows leaves as it is.
        return gate_up_backward(dc, as_rows(gate_up), activation, in_place, hw)


_functions = glu_driver.autograd_functions(GLUKernels(), __name__)
LigerSwiGLUFunction = implements("swiglu")(_functions["swiglu"])
LigerGEGLUFunction = implements("geglu")(_functions["geglu"])
LigerFusedGateUpSwiGLUFunction = implements("fused_gate_up_swiglu")(_functions["fused_gate_up_swiglu"])
