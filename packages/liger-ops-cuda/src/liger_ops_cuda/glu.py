"""Gated activations for NVIDIA GPUs: SwiGLU (``silu(a) * b``) and GEGLU (``gelu_tanh(a) * b``),
one Triton kernel pair (the activation a constexpr) and its launch; the same over one fused
gate-up tensor (fused_gate_up_swiglu), whose rows hold the gate half then the up half; and the
kernel adapter of `liger_core.drivers.glu`.

Both are elementwise and memory-bound: forward reads a and b and writes c; backward reads
dc, a and b and writes grad_a and grad_b, recomputing the activation rather than saving it.
Each program streams one contiguous block of GLU_BLOCK elements; the activation runs in
float32 and is rounded to the input dtype before the multiply, as the models' eager code does.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import glu as glu_driver
from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import flat, launch_flat

# The activation (the kernels' ACT constexpr): the driver's codes.
SILU = glu_driver.SILU
GELU_TANH = glu_driver.GELU_TANH


@triton.jit
def _act_and_grad(a, ACT: tl.constexpr):
    """The activation of float32 ``a`` and its derivative. GELU's tanh form through a sigmoid,
    ``0.5 * (1 + tanh(u)) = sigmoid(2u)``: one exp, no cancellation near 0. 0.79788... =
    sqrt(2 / pi) and 0.044715 are its constants, as literals: a compiled kernel may not read
    non-constexpr globals."""
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
def _act(a, ACT: tl.constexpr):
    """The activation alone (the forward kernel's)."""
    if ACT == 0:
        return a * tl.sigmoid(a)
    else:
        return a * tl.sigmoid(1.5957691216057308 * a * (1.0 + 0.044715 * a * a))


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


@triton.jit
def _gate_up_forward_kernel(GU, C, n_cols, n_col_blocks, gu_row_stride, ACT: tl.constexpr, BLOCK: tl.constexpr):
    # One program per BLOCK columns of one row; the row holds the gate (n_cols) then the up half.
    pid = tl.program_id(0).to(tl.int64)
    row = pid // n_col_blocks
    cols = (pid - row * n_col_blocks) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    gate_ptrs = GU + row * gu_row_stride + cols
    a = tl.load(gate_ptrs, mask=mask, other=0.0)
    b = tl.load(gate_ptrs + n_cols, mask=mask, other=0.0).to(tl.float32)
    act = _act(a.to(tl.float32), ACT).to(a.dtype).to(tl.float32)
    tl.store(C + row * n_cols + cols, (act * b).to(C.dtype.element_ty), mask=mask)


@triton.jit
def _gate_up_backward_kernel(
    DC, GU, DGU, n_cols, n_col_blocks, gu_row_stride, dgu_row_stride, ACT: tl.constexpr, BLOCK: tl.constexpr
):
    # DGU may be GU itself (in_place): this program reads its gate and up elements before it
    # writes their gradients, and no other program touches them.
    pid = tl.program_id(0).to(tl.int64)
    row = pid // n_col_blocks
    cols = (pid - row * n_col_blocks) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    gate_ptrs = GU + row * gu_row_stride + cols
    dc = tl.load(DC + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    a_raw = tl.load(gate_ptrs, mask=mask, other=0.0)
    b = tl.load(gate_ptrs + n_cols, mask=mask, other=0.0).to(tl.float32)
    act, dact = _act_and_grad(a_raw.to(tl.float32), ACT)
    db = dc * act.to(a_raw.dtype).to(tl.float32)
    da = dc * b * dact
    grad_ptrs = DGU + row * dgu_row_stride + cols
    tl.store(grad_ptrs, da.to(DGU.dtype.element_ty), mask=mask)
    tl.store(grad_ptrs + n_cols, db.to(DGU.dtype.element_ty), mask=mask)


def glu_forward(a1: torch.Tensor, b1: torch.Tensor, act: int, block: int | None = None) -> torch.Tensor:
    """``act(a1) * b1`` for flat contiguous ``a1``/``b1``."""
    c = torch.empty_like(a1)
    launch_flat(_glu_forward_kernel, a1.numel(), a1, b1, c, ACT=act, block=block)
    return c


def glu_backward(
    dc: torch.Tensor, a1: torch.Tensor, b1: torch.Tensor, act: int, in_place: bool, block: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients for flat ``a1``/``b1``; with ``in_place`` they are written into ``a1``/``b1``."""
    da, db = (a1, b1) if in_place else (torch.empty_like(a1), torch.empty_like(b1))
    launch_flat(_glu_backward_kernel, a1.numel(), flat(dc), a1, b1, da, db, ACT=act, block=block)
    return da, db


def plan_gate_up(n_cols: int) -> tuple[int, int, int]:
    """(BLOCK, column blocks per row, warps) of the gate-up kernels: GLU_BLOCK-wide column blocks,
    narrower for halves that fit a smaller power of two (no program mostly masked off)."""
    block = min(hardware.GLU_BLOCK, triton.next_power_of_2(max(n_cols, 1)))
    warps = max(1, min(hardware.GLU_NUM_WARPS, block * hardware.GLU_NUM_WARPS // hardware.GLU_BLOCK))
    return block, triton.cdiv(n_cols, block), warps


def gate_up_forward(gu: torch.Tensor, act: int) -> torch.Tensor:
    """``act(gate) * up`` of ``(rows, 2 * n_cols)`` ``gu`` (unit column stride): ``(rows, n_cols)``."""
    n_rows, n_cols = gu.shape[0], gu.shape[1] // 2
    c = torch.empty((n_rows, n_cols), dtype=gu.dtype, device=gu.device)
    block, n_col_blocks, warps = plan_gate_up(n_cols)
    if n_rows:
        _gate_up_forward_kernel[(n_rows * n_col_blocks,)](
            gu, c, n_cols, n_col_blocks, gu.stride(0), ACT=act, BLOCK=block, num_warps=warps
        )
    return c


def gate_up_backward(dc: torch.Tensor, gu: torch.Tensor, act: int, in_place: bool) -> torch.Tensor:
    """The gradient of ``gu`` in one ``(rows, 2 * n_cols)`` tensor; ``in_place``: written over ``gu``."""
    n_rows, n_cols = gu.shape[0], gu.shape[1] // 2
    dgu = gu if in_place else torch.empty((n_rows, 2 * n_cols), dtype=gu.dtype, device=gu.device)
    block, n_col_blocks, warps = plan_gate_up(n_cols)
    if n_rows:
        _gate_up_backward_kernel[(n_rows * n_col_blocks,)](
            dc, gu, dgu, n_cols, n_col_blocks, gu.stride(0), dgu.stride(0), ACT=act, BLOCK=block, num_warps=warps
        )
    return dgu


class GLUKernels:
    """`liger_core.drivers.glu.GLUKernels` on this module's kernels (no state: plans are per call)."""

    protocol = glu_driver.PROTOCOL

    @staticmethod
    def forward(a: torch.Tensor, b: torch.Tensor, activation: int) -> tuple[torch.Tensor, None]:
        return glu_forward(a, b, activation), None

    @staticmethod
    def backward(dc, a, b, activation: int, in_place: bool, state: None) -> tuple[torch.Tensor, torch.Tensor]:
        return glu_backward(dc, a, b, activation, in_place)

    @staticmethod
    def gate_up_forward(gate_up: torch.Tensor, activation: int) -> tuple[torch.Tensor, None]:
        return gate_up_forward(gate_up, activation), None

    @staticmethod
    def gate_up_backward(dc, gate_up, activation: int, in_place: bool, state: None) -> torch.Tensor:
        return gate_up_backward(dc, gate_up, activation, in_place)


_functions = glu_driver.autograd_functions(GLUKernels(), __name__)
LigerSwiGLUFunction = implements("swiglu")(_functions["swiglu"])
LigerGEGLUFunction = implements("geglu")(_functions["geglu"])
LigerFusedGateUpSwiGLUFunction = implements("fused_gate_up_swiglu")(_functions["fused_gate_up_swiglu"])
