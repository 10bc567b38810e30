"""Cross-entropy kernels shared by `cross_entropy` and `fused_linear_cross_entropy`.

The forward (`cross_entropy_forward`) has two plans, chosen by the number of rows:

- Many rows (`use_row_programs`): `_cross_entropy_row_kernel`, one program per row, streams
  the row's vocabulary in BLOCK_N-wide steps with a running max and sum of exp, reads the target
  logit with one masked load and writes the row's loss and lse (and z-loss when asked):
  nothing else is allocated, and there are enough rows to keep every SM busy.
- Few rows: every (row, vocabulary tile) pair is one program, so the whole GPU streams the
  logits whatever the number of rows (one row per program would leave SMs idle and serialise
  a 128k-wide row). Two launches:

  1. `_cross_entropy_partials_kernel`: per tile, the max and the sum of ``exp(x - max)``
     (online-softmax pieces), the class-weighted sum of ``x`` for label smoothing, and the
     target logit (saved, because an in-place gradient may overwrite it before another tile
     reads it).
  2. `_cross_entropy_finish_kernel`: each program combines its row's partials into ``lse`` (a
     few dozen floats, cheaper than a third launch), then optionally writes the row's loss
     terms (tile 0) and the gradient of its tile (fp32 arithmetic, one rounding at the store).

The gradient from a saved lse (`cross_entropy_backward`) always runs on (row, tile) programs:
one read and one write per logit, no partials.

Row offsets are int64 (`liger_ops_cuda._jit.row_offset`); column offsets stay int32. The
targets' statistics (the mean's scales, a count of bad targets) are computed on the device
(`target_stats`): no host synchronisation before the main kernels are queued.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.ops import _losses as L
from liger_ops_cuda import hardware
from liger_ops_cuda._jit import online_lse_step, row_offset, tanh


@triton.jit
def softcapped(x, softcap, HAS_SOFTCAP: tl.constexpr):
    """``softcap * tanh(x / softcap)`` with HAS_SOFTCAP, else ``x``."""
    if HAS_SOFTCAP:
        x = softcap * tanh(x / softcap)
    return x


@triton.jit
def target_weight(W, WSUM, y, in_range, n_cols, HAS_WEIGHT: tl.constexpr):
    """(w[y], sum_j w_j): the class weights, or 1 and n_cols without them. Masked: an
    out-of-range target (reported by the caller after the launch) reads nothing."""
    if HAS_WEIGHT:
        w_y = tl.load(W + y, mask=in_range, other=0.0).to(tl.float32)
        w_sum = tl.load(WSUM)
    else:
        w_y = 1.0
        w_sum = n_cols * 1.0
    return w_y, w_sum


@triton.jit
def ce_loss_terms(lse, x_y, w_y, w_sum, wx, label_smoothing, eps, SMOOTH: tl.constexpr):
    """A row's loss without z-loss: w_y (lse - x_y), label smoothing mixing in
    eps (sum_j w_j lse - sum_j w_j x_j) (``wx``: that last sum; eps = smoothing / vocab)."""
    loss = w_y * (lse - x_y)
    if SMOOTH:
        loss = (1.0 - label_smoothing) * loss + eps * (w_sum * lse - wx)
    return loss


@triton.jit
def ce_grad_coefficients(up, scale_loss, scale_z, w_y, w_sum, lse, label_smoothing, lse_square_scale, eps, SMOOTH):
    """Per-row factors of the gradient (any shape: scalars, or vectors over a tile's rows).

    d(total)/dx_j = a * [((1-s) w_y + eps W) p_j - (1-s) w_y [j == y] - eps w_j] + b * 2 zs lse p_j,
    a, b: the incoming gradient times the reduction's scale for the loss and z-loss terms.
    Returns (a, c_y, c_p): grad_j = c_p p_j - c_y [j == y] - a eps w_j.
    """
    a = up * scale_loss
    c_y = a * (1.0 - label_smoothing) * w_y
    c_p = c_y + up * scale_z * 2.0 * lse_square_scale * lse
    if SMOOTH:
        c_p += a * eps * w_sum
    return a, c_y, c_p


@triton.jit
def ce_grad_values(
    x, lse, is_target, a, c_y, c_p, eps, w_cols, softcap, HAS_SOFTCAP: tl.constexpr, SMOOTH: tl.constexpr
):
    """The gradient for raw (biased, not yet softcapped) logits ``x`` in fp32; row factors from
    `ce_grad_coefficients`, ``w_cols`` the class weights of x's columns (or 1.0). Shapes
    broadcast, so one helper serves row tiles and (vocab, token) tiles alike."""
    if HAS_SOFTCAP:
        th = tanh(x / softcap)
        x = softcap * th
    grad = c_p * tl.exp(x - lse)
    if SMOOTH:
        grad -= a * eps * w_cols
    grad = tl.where(is_target, grad - c_y, grad)
    if HAS_SOFTCAP:
        grad = grad * (1.0 - th * th)
    return grad


@triton.jit
def _cross_entropy_partials_kernel(
    X,
    x_row_stride,
    BIAS,
    Y,
    W,
    PART_MAX,
    PART_SUM,
    PART_WX,
    XY,
    n_cols,
    n_tiles,
    ignore_index,
    softcap,
    HAS_BIAS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    SMOOTH: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0)
    tile = tl.program_id(1)
    y = tl.load(Y + row)
    if y == ignore_index:
        return
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(X + row_offset(row, x_row_stride) + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        x += tl.load(BIAS + cols, mask=mask, other=0.0).to(tl.float32)
    x = softcapped(x, softcap, HAS_SOFTCAP)
    xm = tl.where(mask, x, float("-inf"))
    m = tl.max(xm, axis=0)
    # A tile of -inf logits (masked vocabulary): sum 0 (shift by 0), not exp(-inf - -inf) = NaN.
    s = tl.sum(tl.exp(xm - tl.where(m == float("-inf"), 0.0, m)), axis=0)
    out = row.to(tl.int64) * n_tiles + tile
    tl.store(PART_MAX + out, m)
    tl.store(PART_SUM + out, s)
    if SMOOTH:
        if HAS_WEIGHT:
            wx = x * tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        else:
            wx = x
        tl.store(PART_WX + out, tl.sum(tl.where(mask, wx, 0.0), axis=0))
    # The tile holding the target saves its (biased, softcapped) logit.
    hit = cols == y
    if tl.sum(hit.to(tl.int32), axis=0) > 0:
        tl.store(XY + row, tl.sum(tl.where(hit, x, 0.0), axis=0))


@triton.jit
def _cross_entropy_finish_kernel(
    X,
    x_row_stride,
    G,
    g_row_stride,
    BIAS,
    Y,
    W,
    WSUM,
    PART_MAX,
    PART_SUM,
    PART_WX,
    XY,
    LSE,
    LOSS,
    ZLOSS,
    UP,
    up_stride,
    n_cols,
    n_tiles,
    ignore_index,
    softcap,
    label_smoothing,
    lse_square_scale,
    SCALES,
    HAS_BIAS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    SMOOTH: tl.constexpr,
    LSE_FROM_PARTIALS: tl.constexpr,
    WRITE_LOSS: tl.constexpr,
    WRITE_Z: tl.constexpr,
    WRITE_GRAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_TILES: tl.constexpr,
):
    row = tl.program_id(0)
    tile = tl.program_id(1)
    y = tl.load(Y + row)
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    g_row = G + row_offset(row, g_row_stride)
    if y == ignore_index:
        if WRITE_LOSS:
            if tile == 0:
                tl.store(LOSS + row, 0.0)
                if WRITE_Z:
                    tl.store(ZLOSS + row, 0.0)
                tl.store(LSE + row, 0.0)
        if WRITE_GRAD:
            tl.store(g_row + cols, tl.zeros((BLOCK_N,), tl.float32).to(G.dtype.element_ty), mask=mask)
        return

    if LSE_FROM_PARTIALS:
        t = tl.arange(0, BLOCK_TILES)
        tmask = t < n_tiles
        base = row.to(tl.int64) * n_tiles
        pm = tl.load(PART_MAX + base + t, mask=tmask, other=float("-inf"))
        ps = tl.load(PART_SUM + base + t, mask=tmask, other=0.0)
        m = tl.max(pm, axis=0)
        lse = m + tl.log(tl.sum(ps * tl.exp(pm - m), axis=0))
    else:
        lse = tl.load(LSE + row)

    w_y, w_sum = target_weight(W, WSUM, y, (y >= 0) & (y < n_cols), n_cols, HAS_WEIGHT)
    eps = label_smoothing / n_cols

    if WRITE_LOSS:
        if tile == 0:
            wx = 0.0
            if SMOOTH:
                t2 = tl.arange(0, BLOCK_TILES)
                wx = tl.sum(tl.load(PART_WX + row.to(tl.int64) * n_tiles + t2, mask=t2 < n_tiles, other=0.0), axis=0)
            loss = ce_loss_terms(lse, tl.load(XY + row), w_y, w_sum, wx, label_smoothing, eps, SMOOTH)
            tl.store(LOSS + row, loss)
            if WRITE_Z:
                tl.store(ZLOSS + row, lse_square_scale * lse * lse)
            tl.store(LSE + row, lse)

    if WRITE_GRAD:
        up = tl.load(UP + row.to(tl.int64) * up_stride).to(tl.float32)
        a, c_y, c_p = ce_grad_coefficients(
            up, tl.load(SCALES), tl.load(SCALES + 1), w_y, w_sum, lse, label_smoothing, lse_square_scale, eps, SMOOTH
        )
        x = tl.load(X + row_offset(row, x_row_stride) + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            x += tl.load(BIAS + cols, mask=mask, other=0.0).to(tl.float32)
        w_cols = 1.0
        if SMOOTH and HAS_WEIGHT:
            w_cols = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        grad = ce_grad_values(x, lse, cols == y, a, c_y, c_p, eps, w_cols, softcap, HAS_SOFTCAP, SMOOTH)
        tl.store(g_row + cols, grad.to(G.dtype.element_ty), mask=mask)


@triton.jit
def _cross_entropy_row_kernel(
    X,
    x_row_stride,
    BIAS,
    Y,
    W,
    WSUM,
    LSE,
    LOSS,
    ZLOSS,
    n_cols,
    ignore_index,
    softcap,
    label_smoothing,
    lse_square_scale,
    HAS_BIAS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    SMOOTH: tl.constexpr,
    WRITE_Z: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # One program per row: the whole vocabulary in BLOCK_N-wide steps with a running max and sum
    # of exp, so the row's loss, lse (and z) are its only writes: no partials, no saved target logit.
    row = tl.program_id(0)
    y = tl.load(Y + row)
    if y == ignore_index:
        tl.store(LOSS + row, 0.0)
        tl.store(LSE + row, 0.0)
        if WRITE_Z:
            tl.store(ZLOSS + row, 0.0)
        return
    x_row = X + row_offset(row, x_row_stride)
    # The target logit: one masked scalar load, issued before the stream (an out-of-range target,
    # reported by the caller after the launch, reads nothing).
    in_range = (y >= 0) & (y < n_cols)
    x_y = tl.load(x_row + y, mask=in_range, other=0.0).to(tl.float32)
    if HAS_BIAS:
        x_y += tl.load(BIAS + y, mask=in_range, other=0.0).to(tl.float32)
    x_y = softcapped(x_y, softcap, HAS_SOFTCAP)

    offs = tl.arange(0, BLOCK_N)
    m = float("-inf")
    s = 0.0
    wx = 0.0
    for start in range(0, n_cols, BLOCK_N):
        cols = start + offs
        mask = cols < n_cols
        # Read once and never again by this kernel: evict_first keeps L2 for the small reused
        # vectors (bias, class weights).
        x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        if HAS_BIAS:
            x += tl.load(BIAS + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        x = softcapped(x, softcap, HAS_SOFTCAP)
        m, s = online_lse_step(m, s, tl.where(mask, x, float("-inf")))
        if SMOOTH:
            if HAS_WEIGHT:
                x = x * tl.load(W + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            wx += tl.sum(tl.where(mask, x, 0.0), axis=0)
    lse = m + tl.log(s)

    w_y, w_sum = target_weight(W, WSUM, y, in_range, n_cols, HAS_WEIGHT)
    loss = ce_loss_terms(lse, x_y, w_y, w_sum, wx, label_smoothing, label_smoothing / n_cols, SMOOTH)
    tl.store(LOSS + row, loss)
    tl.store(LSE + row, lse)
    if WRITE_Z:
        tl.store(ZLOSS + row, lse_square_scale * lse * lse)


@triton.jit
def _cross_entropy_target_stats_kernel(
    Y,
    W,
    OUT,
    n_rows,
    n_cols,
    ignore_index,
    HAS_WEIGHT: tl.constexpr,
    MEAN: tl.constexpr,
    WEIGHT_TOTAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # One program (a fixed summation order: deterministic; one launch, one 4-float output instead
    # of a dozen row-sized temporaries): OUT = [scale of the loss terms, scale of the z-loss
    # terms, count of bad targets, sum_j w_j].
    offs = tl.arange(0, BLOCK)
    n_acc = tl.zeros((BLOCK,), tl.int32)
    bad_acc = tl.zeros((BLOCK,), tl.int32)
    w_acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_rows, BLOCK):
        r = start + offs
        live = r < n_rows
        y = tl.load(Y + r, mask=live, other=0)
        valid = live & (y != ignore_index)
        bad = valid & ((y < 0) | (y >= n_cols))
        n_acc += valid.to(tl.int32)
        bad_acc += bad.to(tl.int32)
        if HAS_WEIGHT and MEAN:
            w_acc += tl.load(W + y, mask=valid & (bad == 0), other=0.0).to(tl.float32)
    n = tl.sum(n_acc, axis=0).to(tl.float32)
    if MEAN:
        # 1 / sum(w[y]) and 1 / n over the counted rows; 1 when there are none (all-ignored: 0, not NaN).
        if HAS_WEIGHT:
            wsum = tl.sum(w_acc, axis=0)
        else:
            wsum = n
        tl.store(OUT, 1.0 / tl.where(wsum == 0.0, 1.0, wsum))
        tl.store(OUT + 1, 1.0 / tl.maximum(n, 1.0))
    else:
        tl.store(OUT, 1.0)
        tl.store(OUT + 1, 1.0)
    tl.store(OUT + 2, tl.sum(bad_acc, axis=0).to(tl.float32))
    if WEIGHT_TOTAL:
        total = tl.zeros((BLOCK,), tl.float32)
        for start in range(0, n_cols, BLOCK):
            c = start + offs
            total += tl.load(W + c, mask=c < n_cols, other=0.0).to(tl.float32)
        tl.store(OUT + 3, tl.sum(total, axis=0))


class TargetCheck:
    """Targets outside ``[0, vocab)`` (other than ignore_index), counted on the device.

    The count is copied to pinned host memory behind the op's first kernels; `raise_if_bad`
    runs after the main kernels are queued, so the host waits while the GPU is busy with them
    (no idle GPU, unlike reading the count up front). During CUDA-graph capture nothing can be
    read back and the check is skipped; the kernels mask their loads, so a bad target then
    gives a wrong loss, never an out-of-bounds access.
    """

    def __init__(self, op, target, ignore_index, n_classes, weight, count):
        """``count``: a one-element device tensor, the number of bad targets."""
        self.args = (op, target, ignore_index, n_classes, weight)
        self.skip = target.is_cuda and torch.cuda.is_current_stream_capturing()
        if self.skip:
            return
        if target.is_cuda:
            self.host = torch.empty((), dtype=count.dtype, device="cpu", pin_memory=True)  # not the default device
            self.host.copy_(count, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host, self.event = count, None

    def raise_if_bad(self) -> None:
        if self.skip:
            return
        if self.event is not None:
            self.event.synchronize()
        if int(self.host):
            op, target, ignore_index, n_classes, weight = self.args
            L.label_stats(op, target, ignore_index, n_classes, weight)  # raises, naming the first bad target
            raise ValueError(f"{op}: a target is outside [0, {n_classes}) and not ignore_index={ignore_index}")


def target_stats(
    op: str,
    target: torch.Tensor,
    ignore_index: int,
    n_classes: int,
    weight: torch.Tensor | None,
    reduction: str,
    weight_total: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, TargetCheck]:
    """(scales, weight total, deferred target check) from one launch and one 4-float buffer.

    ``scales``: ``[scale of the summed loss terms, scale of the summed z-loss terms]`` on the
    device (mean: ``1 / sum(w[y])`` and ``1 / n`` over the counted rows, 1 when there are none,
    so an all-ignored batch gives 0, never NaN; sum/none: 1). ``weight total``: ``sum_j w_j``
    as a 1-element device tensor when ``weight_total`` and ``weight`` are given, else None.
    ``target`` and ``weight`` must be contiguous.
    """
    # [loss scale, z-loss scale, bad targets, sum_j w_j]
    stats = torch.empty(4, dtype=torch.float32, device=target.device)
    has_weight = weight is not None
    _cross_entropy_target_stats_kernel[(1,)](
        target, weight if has_weight else stats, stats, target.numel(), n_classes, ignore_index,
        HAS_WEIGHT=has_weight, MEAN=reduction == "mean", WEIGHT_TOTAL=has_weight and weight_total,
        BLOCK=hardware.CE_STATS_BLOCK, num_warps=hardware.CE_STATS_NUM_WARPS,
    )  # fmt: skip
    total = stats[3:4] if weight_total and has_weight else None
    return stats[:2], total, TargetCheck(op, target, ignore_index, n_classes, weight, stats[2])


class RowLoss:
    """Per-row results of `cross_entropy_forward`: fp32 ``loss`` (without z-loss), ``z`` (None when not asked
    for) and ``lse``."""

    __slots__ = ("loss", "z", "lse")

    def __init__(self, loss, z, lse):
        self.loss, self.z, self.lse = loss, z, lse


def plan_vocab_tiles(n_cols: int) -> tuple[int, int, int]:
    """(block, tiles per row, warps) for rows of ``n_cols`` logits."""
    block = min(hardware.CE_BLOCK, triton.next_power_of_2(max(n_cols, 1)))
    n_tiles = triton.cdiv(n_cols, block)
    warps = max(1, min(hardware.CE_NUM_WARPS, block // 32))
    return block, n_tiles, warps


def plan_vocab_rows(n_cols: int) -> tuple[int, int]:
    """(block, warps) of the one-program-per-row forward over rows of ``n_cols`` logits."""
    block = min(hardware.CE_ROW_BLOCK, triton.next_power_of_2(max(n_cols, 1)))
    warps = max(1, min(hardware.CE_ROW_NUM_WARPS, block // 32))
    return block, warps


def use_row_programs(n_rows: int, device: torch.device) -> bool:
    """One program per row when there are enough rows to fill every SM through the last wave
    (``hardware.CE_ROW_PROGRAMS_MIN_ROWS_PER_SM``); otherwise (row, tile) programs."""
    index = device.index if device.type == "cuda" else None
    return n_rows >= hardware.CE_ROW_PROGRAMS_MIN_ROWS_PER_SM * hardware.sm_count(index)


def cross_entropy_forward(
    logits: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None,
    weight_total: torch.Tensor | None,
    bias: torch.Tensor | None,
    ignore_index: int,
    lse_square_scale: float,
    label_smoothing: float,
    softcap: float | None,
    grad_out: torch.Tensor | None = None,
    upstream: torch.Tensor | None = None,
    scales: torch.Tensor | None = None,
    want_z: bool = True,
) -> RowLoss:
    """Forward over (rows, vocab) ``logits`` (unit column stride): per-row loss, z-loss, lse.

    Many rows (`use_row_programs`): one program per row, no buffers beyond the per-row results.
    Few rows: (row, tile) programs with per-tile partials, so the GPU stays busy.
    With ``grad_out`` (may be ``logits`` itself: each program reads its tile before writing it,
    and the target logits were read before any gradient is written) also writes the gradient,
    scaled by ``upstream`` (a 1-element or per-row tensor) times ``scales`` (a device tensor
    ``[scale of the loss terms, scale of the z-loss terms]``, see `target_stats`).
    ``want_z=False``: no z buffer (``RowLoss.z`` is None).
    """
    n_rows, n_cols = logits.shape
    dev = logits.device
    write_grad = grad_out is not None
    if write_grad and upstream is None:
        raise ValueError("cross_entropy_forward: grad_out needs upstream")
    loss = torch.empty(n_rows, dtype=torch.float32, device=dev)
    lse = torch.empty_like(loss)
    z = torch.empty_like(loss) if want_z else None
    if n_rows == 0:
        return RowLoss(loss, z, lse)
    flags = dict(
        HAS_BIAS=bias is not None,
        HAS_WEIGHT=weight is not None,
        HAS_SOFTCAP=softcap is not None,
        SMOOTH=label_smoothing > 0,
        WRITE_Z=want_z,
    )
    sc = float(softcap) if softcap is not None else 1.0
    bias_ = bias if bias is not None else logits
    weight_ = weight if weight is not None else logits
    wsum_ = weight_total if weight_total is not None else loss
    z_ = z if want_z else loss  # never written when not wanted

    if use_row_programs(n_rows, dev):
        block, warps = plan_vocab_rows(n_cols)
        _cross_entropy_row_kernel[(n_rows,)](
            logits, logits.stride(0), bias_, target, weight_, wsum_, lse, loss, z_, n_cols, ignore_index, sc,
            float(label_smoothing), float(lse_square_scale), BLOCK_N=block, num_warps=warps, **flags,
        )  # fmt: skip
        if write_grad:
            # The forward has read every row in full before this launch writes: in place is safe.
            cross_entropy_backward(
                logits, target, weight, weight_total, bias, lse, grad_out, upstream, ignore_index,
                lse_square_scale, label_smoothing, softcap, scales,
            )  # fmt: skip
        return RowLoss(loss, z, lse)

    block, n_tiles, warps = plan_vocab_tiles(n_cols)
    part_max = torch.empty((n_rows, n_tiles), dtype=torch.float32, device=dev)
    part_sum = torch.empty_like(part_max)
    part_wx = torch.empty_like(part_max) if label_smoothing > 0 else part_max
    xy = torch.empty(n_rows, dtype=torch.float32, device=dev)
    tile_flags = {k: v for k, v in flags.items() if k != "WRITE_Z"}
    _cross_entropy_partials_kernel[(n_rows, n_tiles)](
        logits, logits.stride(0), bias_, target, weight_, part_max, part_sum, part_wx, xy,
        n_cols, n_tiles, ignore_index, sc, BLOCK_N=block, num_warps=warps, **tile_flags,
    )  # fmt: skip
    up = upstream if write_grad else loss
    _cross_entropy_finish_kernel[(n_rows, n_tiles if write_grad else 1)](
        logits, logits.stride(0), grad_out if write_grad else logits, grad_out.stride(0) if write_grad else 0,
        bias_, target, weight_, wsum_, part_max, part_sum, part_wx, xy, lse, loss, z_,
        up, 1 if write_grad and up.numel() > 1 else 0, n_cols, n_tiles, ignore_index, sc,
        float(label_smoothing), float(lse_square_scale), scales if write_grad else loss,
        LSE_FROM_PARTIALS=True, WRITE_LOSS=True, WRITE_GRAD=write_grad, BLOCK_N=block,
        BLOCK_TILES=max(2, triton.next_power_of_2(n_tiles)), num_warps=warps, **flags,
    )  # fmt: skip
    return RowLoss(loss, z, lse)


def cross_entropy_backward(
    logits: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None,
    weight_total: torch.Tensor | None,
    bias: torch.Tensor | None,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    upstream: torch.Tensor,
    ignore_index: int,
    lse_square_scale: float,
    label_smoothing: float,
    softcap: float | None,
    scales: torch.Tensor,
) -> None:
    """Backward alone, from the saved per-row ``lse``: one read of the logits, one write."""
    n_rows, n_cols = logits.shape
    if n_rows == 0:
        return
    block, n_tiles, warps = plan_vocab_tiles(n_cols)
    dummy = lse
    _cross_entropy_finish_kernel[(n_rows, n_tiles)](
        logits, logits.stride(0), grad_out, grad_out.stride(0), bias if bias is not None else logits, target,
        weight if weight is not None else logits, weight_total if weight_total is not None else dummy,
        dummy, dummy, dummy, dummy, lse, dummy, dummy, upstream, 1 if upstream.numel() > 1 else 0,
        n_cols, n_tiles, ignore_index, float(softcap) if softcap is not None else 1.0,
        float(label_smoothing), float(lse_square_scale), scales,
        HAS_BIAS=bias is not None, HAS_WEIGHT=weight is not None, HAS_SOFTCAP=softcap is not None,
        SMOOTH=label_smoothing > 0, LSE_FROM_PARTIALS=False, WRITE_LOSS=False, WRITE_Z=False, WRITE_GRAD=True,
        BLOCK_N=block, BLOCK_TILES=2, num_warps=warps,
    )  # fmt: skip


def loss_outputs(ctx, loss: torch.Tensor, z: torch.Tensor, return_z_loss: bool) -> torch.Tensor | tuple:
    """What a loss Function returns: ``loss``, or ``(loss, z_loss)`` with the z-loss (a logged
    value) non-differentiable. An unused output gets no gradient (None), not a zero tensor."""
    ctx.set_materialize_grads(False)
    if not return_z_loss:
        return loss
    ctx.mark_non_differentiable(z)
    return loss, z


def reduce_rows(
    rows: RowLoss, reduction: str, scales: torch.Tensor, dtype: torch.dtype = torch.float32, z_out: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, z_loss) in ``dtype`` from the per-row terms, without row-sized temporaries.

    ``rows.z`` may be None (no z-loss computed): z_loss is then zeros; for reduction "none"
    a real zero vector only when ``z_out`` (the caller returns it), else a broadcast zero.
    """
    n = rows.loss.shape[0]
    if rows.z is None:
        if reduction == "none":
            loss = rows.loss
        elif reduction == "sum":
            loss = rows.loss.sum()
        else:
            loss = rows.loss.sum() * scales[0]
        if reduction != "none":
            z = torch.zeros((), dtype=dtype, device=loss.device)
        elif z_out:
            z = torch.zeros(n, dtype=dtype, device=loss.device)
        else:
            z = torch.zeros((), dtype=dtype, device=loss.device).expand(n)
        return loss.to(dtype), z
    if reduction == "none":
        return (rows.loss + rows.z).to(dtype), rows.z.to(dtype)
    if reduction == "sum":
        z = rows.z.sum()
        return (rows.loss.sum() + z).to(dtype), z.to(dtype)
    z = rows.z.sum() * scales[1]
    return (rows.loss.sum() * scales[0] + z).to(dtype), z.to(dtype)
