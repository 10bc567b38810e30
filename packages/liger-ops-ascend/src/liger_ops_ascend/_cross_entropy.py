"""The cross-entropy row kernels for Ascend NPUs (z-loss, label smoothing, class weights,
softcap), shared by cross_entropy and fused_linear_cross_entropy (on its logits chunks).

Vocabulary rows are walked in ``BLOCK_N`` chunks sized to the UB (`_tiling.plan_rows`; a
262144-wide vocabulary is never one tile), several short rows per tile; one program per
vector core walks the row blocks. The forward is one online pass per row (running max, sum
of exponentials, and for label smoothing the weighted sum of logits) giving per-row loss,
z-loss and ``lse``; the forward never modifies the logits. The backward is a second pass that
rebuilds ``softmax = exp(x - lse)`` chunk by chunk and writes the gradient, each row scaled
by its own coefficients (so every reduction, and fused_linear_cross_entropy's chunks, use
the same kernel); the target's own term is one element per row, stored after the chunks. The backward may write the gradient over the logits it reads (each chunk
is read before the same program writes it): cross_entropy's opt-in ``in_place``, and the
logits chunks fused_linear_cross_entropy owns.

Per row, with ``p = softmax(x)``, ``w`` the class weights (ones without), ``s`` the label
smoothing, ``V`` the vocabulary, ``a`` and ``b`` the upstream scales of the loss and z-loss:
``d/dx_j = p_j (a ((1 - s) w_y + s/V sum(w)) + 2 b zs lse) - a (1 - s) w_y [j = y] - a s/V w_j``,
times ``1 - (x_j / cap)^2`` under softcapping.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import below, online_lse_step, row_block, tanh, tile_indices
from liger_ops_ascend._tiling import FP32, RowPlan, dma, elem_bytes, mask, plan_rows, rows_f32, strides_of, work
from liger_ops_ascend.launch import Tile, launch


@triton.jit
def _softcapped(x, cap):
    """cap * tanh(x / cap)."""
    return cap * tanh(x / cap)


@triton.jit
def _targets(T, rows, row_mask, ignore_index):
    """``(keep, y_safe)`` of a row block: rows with a target to score, and the target (0 where
    none). ``keep`` is compared in fp32 (`_jit.below`'s reason): targets and ``ignore_index``
    are exact there (below 2**24; an index past it rounds to a float that is still no target)."""
    y = tl.load(T + rows, mask=row_mask, other=ignore_index)
    keep = y.to(tl.float32) != ignore_index
    return keep, tl.where(keep, y, 0)


@triton.jit
def _target_weight(W, y_safe, keep, HAS_WEIGHT: tl.constexpr):
    """The class weight of each row's target (1 without class weights; 0 on rows without one)."""
    if HAS_WEIGHT:
        w_y = tl.load(W + y_safe, mask=keep, other=0.0).to(tl.float32)
    else:
        w_y = tl.where(keep, 1.0, 0.0)
    return w_y


@triton.jit
def _cross_entropy_forward_kernel(
    X, T, W, SUM_W, LOSS, Z, LSE, x_row_stride, n_rows, n_cols, n_blocks, n_chunks,
    ignore_index, lse_square_scale, label_smoothing, softcap,
    HAS_WEIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr, SMOOTH: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    for blk in range(pid, n_blocks, num_programs):
        row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        keep, y_safe = _targets(T, rows, row_mask, ignore_index)
        x_base = X + row0.to(tl.int64) * x_row_stride
        x_tile = x_base + m_idx[:, None] * x_row_stride
        run_max = tl.full((BLOCK_M,), -float("inf"), tl.float32)
        run_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
        sx = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for c in range(n_chunks):
            cols = c * BLOCK_N + n_idx
            col_mask = cols < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            if HAS_SOFTCAP or SMOOTH:
                x = tl.load(x_tile + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                # softcap(-inf) is -cap, and the smoothing sum wants zeros: the padded columns
                # are masked after the load, compared in fp32.
                live = below(n_idx, n_cols - c * BLOCK_N)[None, :]
                if HAS_SOFTCAP:
                    x = _softcapped(x, softcap)
                if SMOOTH:
                    if HAS_WEIGHT:
                        wj = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
                        sx += tl.sum(tl.where(live, x * wj[None, :], 0.0), axis=1)
                    else:
                        sx += tl.sum(tl.where(live, x, 0.0), axis=1)
                x = tl.where(live, x, -float("inf"))
            else:
                # The padded columns' -inf comes with the load: no compare at all.
                x = tl.load(x_tile + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)
            run_max, run_sum = online_lse_step(run_max, run_sum, x)
        # Rows past the end (all -inf, no sum) get lse = 0: finite, and their stores are masked off.
        lse = tl.where(run_sum > 0.0, run_max + tl.log(tl.where(run_sum > 0.0, run_sum, 1.0)), 0.0)
        # A target outside the row (vocab_parallel_cross_entropy's rows whose class another rank
        # holds) reads column 0 instead: no access leaves the row (the row's loss is not used).
        y_safe = tl.where(below(y_safe, n_cols), y_safe, 0)
        x_y = tl.load(x_base + m_idx * x_row_stride + y_safe, mask=keep, other=0.0).to(tl.float32)
        if HAS_SOFTCAP:
            x_y = _softcapped(x_y, softcap)
        w_y = _target_weight(W, y_safe, keep, HAS_WEIGHT)
        loss = (1.0 - label_smoothing) * w_y * (lse - x_y)
        if SMOOTH:
            sum_w = tl.load(SUM_W)
            loss += label_smoothing / n_cols * (lse * sum_w - sx)
        z = lse_square_scale * lse * lse
        tl.store(LOSS + rows, tl.where(keep, loss, 0.0), mask=row_mask)
        tl.store(Z + rows, tl.where(keep, z, 0.0), mask=row_mask)
        tl.store(LSE + rows, lse, mask=row_mask)


@triton.jit
def _cross_entropy_backward_kernel(
    X, T, W, SUM_W, LSE, A, B, DX, x_row_stride, dx_row_stride, n_rows, n_cols, n_blocks, n_chunks,
    ignore_index, lse_square_scale, label_smoothing, softcap,
    HAS_WEIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr, SMOOTH: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """DX = d(a * loss + b * z)/dX per row; DX may be X itself (the logits buffer's owner).

    The chunks get the terms every column shares; the target's own term is a correction of one
    element per row, stored after the chunk that holds it (no per-chunk compare against the
    target, as upstream liger-kernel's Ascend backward does)."""
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    for blk in range(pid, n_blocks, num_programs):
        row0, rows, row_mask = row_block(blk, pid, n_rows, BLOCK_M)
        keep, y_safe = _targets(T, rows, row_mask, ignore_index)
        # Rows past the end are zero-filled: the target's store is masked by `keep`, which the
        # static check cannot relate to the row mask (and the fill of BLOCK_M values is cheap).
        lse = tl.load(LSE + rows, mask=row_mask, other=0.0)
        a = tl.where(keep, tl.load(A + rows, mask=row_mask, other=0.0), 0.0)
        b = tl.where(keep, tl.load(B + rows, mask=row_mask, other=0.0), 0.0)
        w_y = _target_weight(W, y_safe, keep, HAS_WEIGHT)
        coef_p = a * (1.0 - label_smoothing) * w_y + 2.0 * lse_square_scale * b * lse
        if SMOOTH:
            coef_p += a * label_smoothing / n_cols * tl.load(SUM_W)
        # A target outside the row (see the forward) has no target term; its element is column 0,
        # rewritten below with the value the chunks gave it, so no access leaves the row (a mask
        # alone would do on the device, but Triton-Ascend's interpreter stores masked-off lanes).
        own = below(y_safe, n_cols)
        y_safe = tl.where(own, y_safe, 0)
        coef_y = tl.where(own, a * (1.0 - label_smoothing) * w_y, 0.0)
        coef_w = a * label_smoothing / n_cols
        x_row = X + row0.to(tl.int64) * x_row_stride + m_idx * x_row_stride
        dx_row = DX + row0.to(tl.int64) * dx_row_stride + m_idx * dx_row_stride
        # The target's logit, read before a chunk's gradient may overwrite it (DX may be X).
        x_y = tl.load(x_row + y_safe, mask=keep, other=0.0).to(tl.float32)
        if HAS_SOFTCAP:
            x_y = _softcapped(x_y, softcap)
        for c in range(n_chunks):
            cols = c * BLOCK_N + n_idx
            col_mask = cols < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            # Padded columns only reach masked-off stores: no fill.
            x = tl.load(x_row[:, None] + cols[None, :], mask=mask, care_padding=False).to(tl.float32)
            if HAS_SOFTCAP:
                x = _softcapped(x, softcap)
            g = coef_p[:, None] * tl.exp(x - lse[:, None])
            if SMOOTH:
                if HAS_WEIGHT:
                    g -= coef_w[:, None] * tl.load(W + cols, mask=col_mask, care_padding=False).to(tl.float32)[None, :]
                else:
                    g -= coef_w[:, None]
            if HAS_SOFTCAP:
                t = x / softcap
                g = g * (1.0 - t * t)
            tl.store(dx_row[:, None] + cols[None, :], g.to(DX.dtype.element_ty), mask=mask)
        # The target's element: the shared terms at x_y, less the target's own term.
        g_y = coef_p * tl.exp(x_y - lse) - coef_y
        if SMOOTH:
            if HAS_WEIGHT:
                g_y -= coef_w * w_y
            else:
                g_y -= coef_w
        if HAS_SOFTCAP:
            t_y = x_y / softcap
            g_y = g_y * (1.0 - t_y * t_y)
        tl.store(dx_row + y_safe, g_y.to(DX.dtype.element_ty), mask=keep)


# -- tile plans ------------------------------------------------------------------------------
#
# Tiles in the terms of the UB model (ub_model.md), for the heaviest variant of each kernel
# (softcap, smoothing, class weights: one kernel serves all, the plan does not know which).


def forward_tiles(m: int, n: int, xb: int, wb: int) -> tuple[Tile, ...]:
    tiles = dma("logits", m, n, xb) + dma("target", 1, m, 4)
    tiles += [t for name in ("loss", "z", "lse") for t in dma(name, 1, m, FP32)]
    # Peak: the chunk in fp32, the softcap's tanh (or the weighted product) and exp(x - max).
    tiles += work("f32_", m, n, 3)
    # The padded-column mask of softcap/smoothing: an fp32 index and its compare, per chunk.
    tiles += work("col_index", 1, n, 1) + work("col_live", 1, n, 1, 1)
    tiles += dma("class_weight", 1, n, wb) + (work("class_weight_f32", 1, n, 1) if wb else [])
    rows = ("keep", "max", "max_new", "sum", "smooth", "lse_f32", "x_y", "w_y", "loss_f32", "z_f32")
    return tuple(tiles + mask(m, n) + rows_f32(rows, m))


def backward_tiles(m: int, n: int, xb: int, wb: int) -> tuple[Tile, ...]:
    tiles = dma("logits", m, n, xb) + dma("grad", m, n, xb) + dma("target", 1, m, 4)
    tiles += [t for name in ("lse", "a", "b") for t in dma(name, 1, m, FP32)]
    # Peak: the chunk in fp32 (softcapped), exp(x - lse) and the gradient.
    tiles += work("f32_", m, n, 3)
    tiles += dma("class_weight", 1, n, wb) + (work("class_weight_f32", 1, n, 1) if wb else [])
    rows = ("keep", "lse_f32", "w_y", "coef_p", "coef_y", "coef_w", "x_y", "g_y")
    return tuple(tiles + mask(m, n) + rows_f32(rows, m))


def plan_tiles(
    direction: str,
    n_rows: int,
    n_cols: int,
    dtype: torch.dtype,
    w_dtype: torch.dtype | None,
    hw: hardware.Hardware,
    row_strides: Sequence[tuple[int, int]] | None = None,
) -> RowPlan:
    """Tile plan of the forward or backward pass over ``(tokens, vocab)`` logits (one kernel
    serves whole and chunked rows); ``row_strides`` as `plan_rows` takes them (default dense)."""
    kernels = ((f"cross_entropy_{direction}", forward_tiles if direction == "forward" else backward_tiles),)
    xb = elem_bytes(dtype)
    sizes = {"xb": xb, "wb": elem_bytes(w_dtype)}
    strides = [(n_cols, xb)] if row_strides is None else row_strides
    return plan_rows(f"cross_entropy {direction}", n_rows, n_cols, kernels, kernels, hw, sizes, strides)


# -- host side -------------------------------------------------------------------------------


class CEOptions:
    """The loss options as the kernels take them."""

    def __init__(self, weight, ignore_index, lse_square_scale, label_smoothing, softcap):
        self.weight = weight
        self.ignore_index = int(ignore_index)
        self.lse_square_scale = float(lse_square_scale)
        self.label_smoothing = float(label_smoothing)
        self.softcap = softcap
        # sum(w) for label smoothing, on the device (no host sync); V without weights.
        self.sum_w = None
        if self.label_smoothing > 0 and weight is not None:
            self.sum_w = weight.float().sum().reshape(1)

    def sum_w_arg(self, n_cols: int, device: torch.device) -> torch.Tensor:
        if self.sum_w is not None:
            return self.sum_w
        return torch.full((1,), float(n_cols), dtype=torch.float32, device=device)

    def flags(self) -> dict:
        return {
            "HAS_WEIGHT": self.weight is not None,
            "HAS_SOFTCAP": self.softcap is not None,
            "SMOOTH": self.label_smoothing > 0,
        }

    def scalars(self) -> tuple:
        return (self.ignore_index, self.lse_square_scale, self.label_smoothing, float(self.softcap or 1.0))


def cross_entropy_forward(
    logits: torch.Tensor, target: torch.Tensor, opts: CEOptions, hw: hardware.Hardware
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row: (loss without z-loss, z-loss, lse), fp32; 0 on ignored rows (lse excepted)."""
    n_rows, n_cols = logits.shape
    dev = logits.device
    loss, z, lse = (torch.empty(n_rows, dtype=torch.float32, device=dev) for _ in range(3))
    if n_rows == 0:
        return loss, z, lse
    w = opts.weight
    p = plan_tiles("forward", n_rows, n_cols, logits.dtype, None if w is None else w.dtype, hw, strides_of(logits))
    launch(
        _cross_entropy_forward_kernel, p.kernels[0], hw, logits, target, logits if w is None else w, opts.sum_w_arg(n_cols, dev),
        loss, z, lse, logits.stride(0), n_rows, n_cols, p.n_blocks, p.n_chunks, *opts.scalars(),
        BLOCK_M=p.block_m, BLOCK_N=p.block_n, **opts.flags(),
    )  # fmt: skip
    return loss, z, lse


def cross_entropy_backward(
    logits: torch.Tensor,
    target: torch.Tensor,
    lse: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    opts: CEOptions,
    hw: hardware.Hardware,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Gradient of ``sum_i a_i loss_i + b_i z_i`` w.r.t. the logits (into ``out``, which may be
    ``logits`` itself when the caller owns that buffer)."""
    n_rows, n_cols = logits.shape
    dx = torch.empty((n_rows, n_cols), dtype=logits.dtype, device=logits.device) if out is None else out
    if n_rows == 0:
        return dx
    w = opts.weight
    strides = strides_of(logits, dx)
    p = plan_tiles("backward", n_rows, n_cols, logits.dtype, None if w is None else w.dtype, hw, strides)
    launch(
        _cross_entropy_backward_kernel, p.kernels[0], hw, logits, target, logits if w is None else w,
        opts.sum_w_arg(n_cols, logits.device), lse, a, b, dx, logits.stride(0), dx.stride(0), n_rows, n_cols,
        p.n_blocks, p.n_chunks, *opts.scalars(), BLOCK_M=p.block_m, BLOCK_N=p.block_n, **opts.flags(),
    )  # fmt: skip
    return dx


def reduce_rows(
    loss_rows: torch.Tensor, z_rows: torch.Tensor, reduction: str, n_valid: int, weight_sum: float
) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    """(loss, z_loss) reduced; and the per-row scales (a, b) of a unit upstream gradient."""
    if reduction == "none":
        return loss_rows + z_rows, z_rows, 1.0, 1.0
    if reduction == "sum":
        return (loss_rows.sum() + z_rows.sum()), z_rows.sum(), 1.0, 1.0
    # Everything ignored: the sums are 0; divide by 1 so the result is 0, not NaN.
    denom = weight_sum if weight_sum != 0 else 1.0
    n = n_valid if n_valid else 1
    z_mean = z_rows.sum() / n
    return loss_rows.sum() / denom + z_mean, z_mean, 1.0 / denom, 1.0 / n


def prepare_target(target: torch.Tensor) -> torch.Tensor:
    """The class indices as the kernels take them."""
    # int32 in the kernels: int64 vector arithmetic runs as scalar code on the vector cores (the
    # kernels compare targets in fp32; int32 and int64 vector compares are both scalar code).
    return target.to(torch.int32) if target.dtype != torch.int32 else target
