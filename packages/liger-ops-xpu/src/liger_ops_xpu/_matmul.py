"""``a @ b.T`` with float32 output from bf16/fp16 operands, for fused_linear_jsd's logits.

An XPU-only module: the contract wants float32 products (no rounding of the logits to the
input dtype), which torch on XPU gives only by upcasting both operands: a full float32 copy of
each lm_head weight and a float32 GEMM that skips the matrix engines (the CUDA and Ascend
packages get float32 output from their own matmul libraries). This kernel feeds the 16-bit
tiles straight to ``tl.dot`` (DPAS on Xe-HPC/Xe2) with float32 accumulation and stores float32.

Interpreter shim: older interpreters do not emulate bf16 arithmetic (a bf16 ``tl.dot`` comes
out as garbage), so there the tiles are upcast first: the same products, exactly representable
in float32, accumulated in float32 as on the device.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_ops_xpu import hardware
from liger_ops_xpu._tiling import unit_col


@triton.jit
def _matmul_nt_kernel(
    A,
    B,
    C,
    M,
    N,
    K,
    a_row_stride,
    b_row_stride,
    c_row_stride,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    N_K_BLOCKS: tl.constexpr,
    UPCAST: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_mask = rm < M
    n_mask = rn < N
    a_rows = A + rm.to(tl.int64)[:, None] * a_row_stride
    b_cols = B + rn.to(tl.int64)[None, :] * b_row_stride
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(N_K_BLOCKS):
        k = kb * BLOCK_K + rk
        k_mask = k < K
        a = tl.load(a_rows + k[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        b = tl.load(b_cols + k[:, None], mask=k_mask[:, None] & n_mask[None, :], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
    c_ptrs = C + rm.to(tl.int64)[:, None] * c_row_stride + rn[None, :]
    tl.store(c_ptrs, acc, mask=m_mask[:, None] & n_mask[None, :])


def plan_matmul(m: int, n: int, k: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K): the tuned tiles, shrunk to small operands, never below the
    smallest tile ``tl.dot`` takes."""
    return tuple(
        max(hardware.MIN_DOT_BLOCK, min(cap, triton.next_power_of_2(size)))
        for cap, size in ((hardware.MATMUL_BLOCK_M, m), (hardware.MATMUL_BLOCK_N, n), (hardware.MATMUL_BLOCK_K, k))
    )


def matmul_nt_f32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b.T`` in float32; a (M, K), b (N, K) of one 16-bit dtype (float32 goes to torch)."""
    if a.dtype == torch.float32 or b.dtype == torch.float32:
        return a.float() @ b.float().t()
    a, b = unit_col(a), unit_col(b)
    (m, k), n = a.shape, b.shape[0]
    c = torch.empty((m, n), dtype=torch.float32, device=a.device)
    if c.numel() == 0:
        return c
    if k == 0:
        return c.zero_()
    block_m, block_n, block_k = plan_matmul(m, n, k)
    kernel = _matmul_nt_kernel
    kernel[(triton.cdiv(m, block_m), triton.cdiv(n, block_n))](
        a,
        b,
        c,
        m,
        n,
        k,
        a.stride(0),
        b.stride(0),
        c.stride(0),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        N_K_BLOCKS=triton.cdiv(k, block_k),
        UPCAST=hardware.interpreting(kernel),
        **hardware.launch_kwargs(kernel, a.device, hardware.MATMUL_NUM_WARPS),
    )
    return c
