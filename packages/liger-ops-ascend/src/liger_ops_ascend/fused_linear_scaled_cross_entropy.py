"""Fused linear scaled cross-entropy for Ascend NPUs: per-token NLL and entropy of
``softmax(input @ W^T / temperature)``, logits a chunk of tokens at a time; the kernels, chunk
loop and the kernel adapter of `liger_core.drivers.fused_linear_scaled_cross_entropy`.

The projection runs as torch matmuls (torch_npu sends them to the cube units of the AI cores);
the row kernels run on the vector cores over each chunk's logits (fused_linear_cross_entropy's
chunk plan, `_tiling.chunk_tokens`), in UB-sized vocabulary chunks (`_tiling.plan_rows`), several
short rows per tile, one program per vector core walking the row blocks. The forward is one
online pass per row: running max, sum of ``exp(z - max)`` and of ``exp(z - max) z`` with
``z = logits / T``, giving ``lse``, ``nll = lse - z_y`` and ``entropy = lse - sum p z``.

Both outputs are per token, so each row's upstream gradients must weight its logits' gradient
before the sum into grad_W: forward keeps the per-row lse and entropy (fp32), and backward
recomputes each chunk's logits and overwrites them (a buffer this module owns; each chunk is
read before the same program writes it) with
``(grad_nll (p - [v == y]) - grad_entropy p (z - lse + entropy)) / T``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import fused_linear_scaled_cross_entropy as flsce_driver
from liger_core.ops import _losses
from liger_core.ops.fused_linear_scaled_cross_entropy import OP_NAME

from liger_ops_ascend import hardware
from liger_ops_ascend._cross_entropy import _targets, prepare_target
from liger_ops_ascend._jit import below, col_tile, row_block, rows_or_zeros, tile_indices
from liger_ops_ascend._tiling import RowPlan, chunk_tokens, dma, elem_bytes, mask, plan_rows, rows_f32, work
from liger_ops_ascend.launch import Tile, launch


@triton.jit
def _fused_linear_scaled_cross_entropy_forward_kernel(
    X, Y, NLL, ENTROPY, LSE, x_row_stride, n_rows, n_cols, n_blocks, n_chunks, inv_temperature, ignore_index,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid, num_programs, m_idx, _ = tile_indices(BLOCK_M, BLOCK_N)
    for blk in range(pid, n_blocks, num_programs):
        row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        keep, y = _targets(Y, rows, row_mask, ignore_index)
        base = row0.to(tl.int64)
        x_tile = X + base * x_row_stride + m_idx[:, None] * x_row_stride
        run_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        run_sum = tl.zeros((BLOCK_M,), tl.float32)
        run_zsum = tl.zeros((BLOCK_M,), tl.float32)
        for c in range(n_chunks):
            cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
            z = tl.load(x_tile + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32) * inv_temperature
            new_max = tl.maximum(run_max, tl.max(z, axis=1), propagate_nan=tl.PropagateNan.ALL)
            # Rows of a block past the end stay at -inf: keep their rescale finite.
            safe = tl.where(new_max == float("-inf"), 0.0, new_max)
            rescale = tl.exp(run_max - safe)
            e = tl.exp(z - safe[:, None])  # 0 on masked entries
            run_sum = run_sum * rescale + tl.sum(e, axis=1)
            # Masked entries (e == 0) weigh 0: 0 * -inf would be NaN. An fp32 compare, not the
            # integer mask (`_jit.below`'s reason); an entry whose e underflowed adds 0 either way.
            run_zsum = run_zsum * rescale + tl.sum(e * tl.where(e > 0.0, z, 0.0), axis=1)
            run_max = new_max
        # Rows past the end (no sum) get lse 0, finite (their stores are masked off); a live
        # row's sum is at least 1.
        live = run_sum > 0.0
        live_sum = tl.where(live, run_sum, 1.0)
        lse = tl.where(live, run_max + tl.log(live_sum), 0.0)
        # The target logits: one masked gather (an out-of-range target, refused on the host, reads nothing).
        hit = keep & (y >= 0) & below(y, n_cols)
        z_y = tl.load(X + base * x_row_stride + m_idx * x_row_stride + y, mask=hit, other=0.0).to(tl.float32)
        tl.store(NLL + rows, tl.where(keep, lse - z_y * inv_temperature, 0.0), mask=row_mask)
        tl.store(ENTROPY + rows, tl.where(keep, lse - run_zsum / live_sum, 0.0), mask=row_mask)
        tl.store(LSE + rows, lse, mask=row_mask)


@triton.jit
def _fused_linear_scaled_cross_entropy_backward_kernel(
    X, Y, LSE, ENTROPY, UP_NLL, UP_ENTROPY, x_row_stride, n_rows, n_cols, n_blocks, n_chunks, inv_temperature,
    ignore_index, HAS_UP_NLL: tl.constexpr, HAS_UP_ENTROPY: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid, num_programs, m_idx, _ = tile_indices(BLOCK_M, BLOCK_N)
    for blk in range(pid, n_blocks, num_programs):
        row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        keep, y = _targets(Y, rows, row_mask, ignore_index)
        lse = tl.load(LSE + rows, mask=row_mask, care_padding=False)
        entropy = tl.load(ENTROPY + rows, mask=row_mask, care_padding=False)
        up_nll = rows_or_zeros(UP_NLL, rows, row_mask, HAS_UP_NLL, BLOCK_M)
        up_entropy = rows_or_zeros(UP_ENTROPY, rows, row_mask, HAS_UP_ENTROPY, BLOCK_M)
        x_tile = X + row0.to(tl.int64) * x_row_stride + m_idx[:, None] * x_row_stride
        for c in range(n_chunks):
            cols, mask = col_tile(c, n_cols, row_mask, BLOCK_N)
            # Padded entries only reach masked-off stores: no fill.
            z = tl.load(x_tile + cols[None, :], mask=mask, care_padding=False).to(tl.float32) * inv_temperature
            p = tl.exp(z - lse[:, None])
            g = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
            if HAS_UP_NLL:
                # The target compared in fp32 (`_jit.below`'s reason).
                is_y = cols.to(tl.float32)[None, :] == y.to(tl.float32)[:, None]
                g = up_nll[:, None] * tl.where(is_y, p - 1.0, p)
            if HAS_UP_ENTROPY:
                g -= up_entropy[:, None] * p * (z - lse[:, None] + entropy[:, None])
            g = tl.where(keep[:, None], g * inv_temperature, 0.0)
            tl.store(x_tile + cols[None, :], g.to(X.dtype.element_ty), mask=mask)


def fused_linear_scaled_cross_entropy_tiles(m: int, n: int, xb: int) -> tuple[Tile, ...]:
    """The live tiles of either kernel (the backward's are the larger: it also stores the
    gradient), in the terms of the UB model (ub_model.md)."""
    tiles = dma("logits", m, n, xb) + dma("grad", m, n, xb)
    # Peak: z in fp32, exp(z - max) (or p), the masked z (or the target compare's select), the gradient.
    tiles += work("f32_", m, n, 5)
    tiles += work("col_index", 1, n, 1) + work("is_target", m, n, 1, 1)
    rows = ("y", "keep", "max", "max_new", "rescale", "sum", "zsum", "lse", "entropy", "z_y", "up_nll", "up_entropy")
    return tuple(tiles + mask(m, n) + rows_f32(rows, m))


def plan_fused_linear_scaled_cross_entropy(
    direction: str,
    n_rows: int,
    n_cols: int,
    dtype: torch.dtype,
    hw: hardware.Hardware,
    row_strides: Sequence[tuple[int, int]] | None = None,
) -> RowPlan:
    """The tile plan of the ``direction`` ("forward" or "backward") kernel over a chunk's
    ``(n_rows, n_cols)`` logits."""
    name = f"{OP_NAME}_{direction}"
    kernels = ((name, fused_linear_scaled_cross_entropy_tiles),)
    xb = elem_bytes(dtype)
    strides = [(n_cols, xb)] if row_strides is None else row_strides
    return plan_rows(name, n_rows, n_cols, kernels, kernels, hw, {"xb": xb}, strides)


def fused_linear_scaled_cross_entropy_forward(logits, target, inv_temperature, ignore_index, hw):
    """``(nll, entropy, lse)``, fp32 per row of a chunk's dense ``(rows, vocab)`` logits."""
    n_rows, n_cols = logits.shape
    nll, entropy, lse = (torch.empty(n_rows, dtype=torch.float32, device=logits.device) for _ in range(3))
    p = plan_fused_linear_scaled_cross_entropy("forward", n_rows, n_cols, logits.dtype, hw)
    launch(
        _fused_linear_scaled_cross_entropy_forward_kernel, p.kernels[0], hw, logits, target, nll, entropy, lse,
        logits.stride(0), n_rows, n_cols, p.n_blocks, p.n_chunks, inv_temperature, ignore_index,
        BLOCK_M=p.block_m, BLOCK_N=p.block_n,
    )  # fmt: skip
    return nll, entropy, lse


def fused_linear_scaled_cross_entropy_backward(
    logits, target, lse, entropy, up_nll, up_entropy, inv_temperature, ignore_index, hw
):  # fmt: skip
    """Overwrite a chunk's dense logits with d(loss)/d(logits); ``up_nll`` / ``up_entropy`` the
    chunk rows' incoming gradients (None: that output feeds nothing)."""
    n_rows, n_cols = logits.shape
    p = plan_fused_linear_scaled_cross_entropy("backward", n_rows, n_cols, logits.dtype, hw)
    launch(
        _fused_linear_scaled_cross_entropy_backward_kernel, p.kernels[0], hw, logits, target, lse, entropy,
        up_nll if up_nll is not None else lse, up_entropy if up_entropy is not None else lse, logits.stride(0),
        n_rows, n_cols, p.n_blocks, p.n_chunks, inv_temperature, ignore_index,
        HAS_UP_NLL=up_nll is not None, HAS_UP_ENTROPY=up_entropy is not None, BLOCK_M=p.block_m, BLOCK_N=p.block_n,
    )  # fmt: skip


def _chunks(x, w):
    """``(start, end, logits)`` per token chunk (`_tiling.chunk_tokens`)."""
    n_tokens, hidden = x.shape
    step = chunk_tokens(n_tokens, hidden, w.shape[0], x.element_size())
    for start in range(0, n_tokens, step):
        end = min(start + step, n_tokens)
        yield start, end, x[start:end] @ w.t()


class FusedLinearScaledCrossEntropyKernels:
    """`liger_core.drivers.fused_linear_scaled_cross_entropy.FusedLinearScaledCrossEntropyKernels`:
    this module's kernels over `_chunks`."""

    protocol = flsce_driver.PROTOCOL

    @staticmethod
    def forward(x, w, target, inv_t, ignore_index):
        _losses.label_stats(OP_NAME, target, ignore_index, w.shape[0])
        hw = hardware.current(x.device)
        t = prepare_target(target).contiguous()
        n = x.shape[0]
        nll, entropy, lse = (torch.empty(n, dtype=torch.float32, device=x.device) for _ in range(3))
        for start, end, logits in _chunks(x, w):
            nll[start:end], entropy[start:end], lse[start:end] = fused_linear_scaled_cross_entropy_forward(
                logits, t[start:end], inv_t, ignore_index, hw
            )
        return nll, entropy, lse, t

    @staticmethod
    def backward(x, w, t, lse, entropy, up_nll, up_entropy, inv_t, ignore_index, need_x, need_w, w_dtype):
        hw = hardware.current(x.device)
        gx = torch.empty_like(x) if need_x else None
        gw = torch.zeros(w.shape, dtype=w_dtype, device=x.device) if need_w else None
        for start, end, logits in _chunks(x, w):
            # The chunk's gradient overwrites its logits (our own buffer).
            fused_linear_scaled_cross_entropy_backward(
                logits, t[start:end], lse[start:end], entropy[start:end],
                None if up_nll is None else up_nll[start:end], None if up_entropy is None else up_entropy[start:end],
                inv_t, ignore_index, hw,
            )  # fmt: skip
            if gx is not None:
                gx[start:end] = logits @ w
            if gw is not None:
                gw += (logits.t() @ x[start:end]).to(gw.dtype)
        return gx, gw


LigerFusedLinearScaledCrossEntropyFunction = implements("fused_linear_scaled_cross_entropy")(
    flsce_driver.autograd_function(FusedLinearScaledCrossEntropyKernels(), __name__)
)
