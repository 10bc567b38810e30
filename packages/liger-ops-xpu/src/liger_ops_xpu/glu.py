"""Gated activations for Intel GPUs: swiglu (``silu(a) * b``) and geglu (``gelu_tanh(a) * b``),
one elementwise kernel pair with the activation chosen by a constexpr, its launch and the kernel
adapter of `liger_core.drivers.glu`.

A flat 1-D grid of ``ELEMENTWISE_BLOCK``-element programs over contiguous a and b: a pure
streaming op (3 reads and 2 writes per element in backward), so blocks are sized for memory
latency rather than registers, and the default register file leaves more threads resident
(no large GRF). The activation is computed in fp32 and rounded to the input dtype before the
multiply, as the models' eager code does; backward recomputes it (nothing saved but a and b).

fused_gate_up_swiglu reads both halves from one ``(rows, 2 * n_cols)`` gate-up tensor (the gate
first): one program per column block of one row, the block `plan_flat`'s for a row of n_cols
elements; its backward writes the gradient of both halves into one tensor.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import glu as glu_driver

from liger_ops_xpu import hardware
from liger_ops_xpu._tiling import launch_flat, plan_flat

SILU = glu_driver.SILU
GELU_TANH = glu_driver.GELU_TANH


@triton.jit
def _act_and_grad(a, ACT: tl.constexpr):
    """(act(a), act'(a)) in fp32. GELU's tanh form through a sigmoid, ``0.5 * (1 + tanh(u)) =
    sigmoid(2u)``: one exp, no cancellation near 0."""
    if ACT == 0:
        sig = 1.0 / (1.0 + tl.exp(-a))
        return a * sig, sig * (1.0 + a * (1.0 - sig))
    else:
        a2 = a * a
        u = 0.7978845608028654 * a * (1.0 + 0.044715 * a2)
        sig = 1.0 / (1.0 + tl.exp(-2.0 * u))
        du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * a2)
        return a * sig, sig + 2.0 * a * sig * (1.0 - sig) * du


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


@triton.jit
def _gate_up_forward_kernel(GU, C, n_cols, n_col_blocks, gu_row_stride, ACT: tl.constexpr, BLOCK: tl.constexpr):
    # One program per BLOCK columns of one row; the row holds the gate (n_cols) then the up half.
    pid = tl.program_id(0).to(tl.int64)
    row = pid // n_col_blocks
    cols = (pid - row * n_col_blocks) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    gate_ptrs = GU + row * gu_row_stride + cols
    a = tl.load(gate_ptrs, mask=mask, other=0.0)
    b = tl.load(gate_ptrs + n_cols, mask=mask, other=0.0)
    act, _ = _act_and_grad(a.to(tl.float32), ACT)
    c = act.to(a.dtype).to(tl.float32) * b.to(tl.float32)
    tl.store(C + row * n_cols + cols, c.to(C.dtype.element_ty), mask=mask)


@triton.jit
def _gate_up_backward_kernel(
    DC, GU, DGU, n_cols, n_col_blocks, gu_row_stride, dgu_row_stride, ACT: tl.constexpr, BLOCK: tl.constexpr
):
    # DGU may alias GU (in_place): this program reads its gate and up elements before it writes
    # their gradients, and no other program touches them.
    pid = tl.program_id(0).to(tl.int64)
    row = pid // n_col_blocks
    cols = (pid - row * n_col_blocks) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    gate_ptrs = GU + row * gu_row_stride + cols
    dc = tl.load(DC + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    a = tl.load(gate_ptrs, mask=mask, other=0.0)
    b = tl.load(gate_ptrs + n_cols, mask=mask, other=0.0).to(tl.float32)
    act, dact = _act_and_grad(a.to(tl.float32), ACT)
    db = dc * act.to(a.dtype).to(tl.float32)
    da = dc * b * dact
    grad_ptrs = DGU + row * dgu_row_stride + cols
    tl.store(grad_ptrs, da.to(DGU.dtype.element_ty), mask=mask)
    tl.store(grad_ptrs + n_cols, db.to(DGU.dtype.element_ty), mask=mask)


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


def gate_up_forward(gu: torch.Tensor, act: int) -> torch.Tensor:
    """``act(gate) * up`` of ``(rows, 2 * n_cols)`` ``gu`` (unit column stride): ``(rows, n_cols)``."""
    n_rows, n_cols = gu.shape[0], gu.shape[1] // 2
    c = torch.empty((n_rows, n_cols), dtype=gu.dtype, device=gu.device)
    plan = plan_flat(n_cols)
    if n_rows:
        _gate_up_forward_kernel[(n_rows * plan.programs,)](
            gu, c, n_cols, plan.programs, gu.stride(0), ACT=act, BLOCK=plan.block,
            **hardware.launch_kwargs(_gate_up_forward_kernel, gu.device, plan.num_warps, register_heavy=False),
        )  # fmt: skip
    return c


def gate_up_backward(dc: torch.Tensor, gu: torch.Tensor, act: int, in_place: bool) -> torch.Tensor:
    """The gradient of ``gu`` in one ``(rows, 2 * n_cols)`` tensor; ``in_place``: written over ``gu``."""
    n_rows, n_cols = gu.shape[0], gu.shape[1] // 2
    dgu = gu if in_place else torch.empty((n_rows, 2 * n_cols), dtype=gu.dtype, device=gu.device)
    plan = plan_flat(n_cols)
    if n_rows:
        _gate_up_backward_kernel[(n_rows * plan.programs,)](
            dc, gu, dgu, n_cols, plan.programs, gu.stride(0), dgu.stride(0), ACT=act, BLOCK=plan.block,
            **hardware.launch_kwargs(_gate_up_backward_kernel, gu.device, plan.num_warps, register_heavy=False),
        )  # fmt: skip
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
