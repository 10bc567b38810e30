"""Fused linear cross-entropy for NVIDIA GPUs: token chunks, tensor-core GEMMs, in-place CE; the
kernels, launch plans and the kernel adapter of `liger_core.drivers.fused_linear_cross_entropy`.

Per chunk of tokens: ``logits = x_c @ W^T`` (cuBLAS, input dtype, into one reused buffer),
then the cross-entropy kernels compute the chunk's loss terms and overwrite the logits with
their gradient (fp32 arithmetic, one rounding), then ``grad_x_c = G @ W`` and
``grad_W += G^T @ x_c`` (GEMMs into preallocated buffers: the first chunk writes grad_W, the
rest accumulate with addmm). The full logits never exist; beyond grad_W and grad_x the
memory is one chunk of logits in the input dtype, ``rows x vocab x itemsize`` bytes within the
fused linear memory budget (`liger_core.memory_budget`, default
``hardware.FUSED_LINEAR_MEMORY_BUDGET``; rows a multiple of ``FUSED_LINEAR_ROW_MULTIPLE``).

The gradients are computed during forward for reduction "mean"/"sum" (upstream assumed 1;
backward rescales them in place only if the incoming gradient is not 1, decided on the
device). For "none" the per-token incoming gradient must weight each row before the sum
into grad_W, so forward saves the per-row lse and backward recomputes the chunks' logits.

Vocabulary-major path (tokens <= hidden, grad_W in the input's dtype, gradients in forward):
the logits of *all* tokens, stored transposed (``L^T = W @ x^T``, vocab x tokens), fit in
grad_W's own storage, which is free until grad_W is written. No chunk buffer, and each of the
three GEMMs runs once at full size. The CE kernels walk (vocab, token) tiles of L^T (an lse pass
over vocabulary groups, a finish per token, the gradient in place); then ``grad_x = G @ W``,
and grad_W is written block by block, vocabulary descending: block ``[v0, v1)`` of grad_W
covers L^T's rows ``[v0 H / n, v1 H / n)``, at or past v0 because n <= H, so it overwrites only
rows already consumed and, where it overlaps its own source rows, those are copied out first.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import fused_linear_cross_entropy as flce_driver
from liger_ops_cuda import hardware
from liger_ops_cuda._cross_entropy import (
    ce_grad_coefficients,
    ce_grad_values,
    ce_loss_terms,
    cross_entropy_backward,
    cross_entropy_forward,
    reduce_rows,
    softcapped,
    target_stats,
    target_weight,
)
from liger_ops_cuda._jit import online_lse_step
from liger_ops_cuda._tiling import accumulate_weight_grad, plan_chunks, scale_unless_one


def _chunk_loop(
    x, w, target, bias, ce_weight, weight_total, ignore_index, lse_square_scale, label_smoothing, softcap,
    scales, rows_out, *, grad_x=None, grad_w=None, grad_b=None, upstream=None, saved_lse=None, rows=None,
):  # fmt: skip
    """Run every chunk: losses into ``rows_out`` (forward) and/or gradients (when ``upstream``).
    With ``saved_lse`` (backward of "none"), the gradient comes from it without a forward pass.
    ``rows``: tokens per chunk (default: planned from the memory budget in force). Returns it."""
    n, _ = x.shape
    vocab = w.shape[0]
    # The one per-chunk buffer: (rows, vocab) logits in the input dtype, overwritten by their gradient.
    c = rows or plan_chunks(n, vocab, bytes_per_logit=x.element_size())
    want_grad = upstream is not None
    buf = torch.empty((min(c, n), vocab), dtype=x.dtype, device=x.device) if n else None
    first = True
    for s in range(0, n, c):
        e = min(s + c, n)
        xc = x[s:e]
        logits = buf[: e - s]
        torch.mm(xc, w.t(), out=logits)
        t = target[s:e]
        if saved_lse is not None:
            up = upstream[s:e] if upstream.numel() > 1 else upstream
            cross_entropy_backward(
                logits, t, ce_weight, weight_total, bias, saved_lse[s:e], logits, up, ignore_index,
                lse_square_scale, label_smoothing, softcap, scales,
            )  # fmt: skip
        else:
            rows = cross_entropy_forward(
                logits, t, ce_weight, weight_total, bias, ignore_index, lse_square_scale, label_smoothing, softcap,
                grad_out=logits if want_grad else None, upstream=upstream, scales=scales,
            )  # fmt: skip
            rows_out.loss[s:e] = rows.loss
            rows_out.z[s:e] = rows.z
            rows_out.lse[s:e] = rows.lse
        if want_grad:
            # `logits` now holds d(loss)/d(logits) for the chunk.
            if grad_x is not None:
                torch.mm(logits, w, out=grad_x[s:e])
            if grad_w is not None:
                accumulate_weight_grad(grad_w, logits, xc, first)
            if grad_b is not None:
                grad_b += logits.sum(0, dtype=torch.float32)
        first = False
    if want_grad and grad_w is not None and first:
        grad_w.zero_()  # no tokens at all
    return c


@triton.jit
def _vocab_major_offsets(vs, toks, n_tokens):
    # int64: vocab x tokens may pass 2**31 (it is as large as grad_W).
    return vs[:, None].to(tl.int64) * n_tokens + toks[None, :]


@triton.jit
def _vocab_major_partials_kernel(
    LT, BIAS, W, PART_MAX, PART_SUM, PART_WX, n_tokens, n_vocab, rows_per_group, softcap,
    HAS_BIAS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr, SMOOTH: tl.constexpr,
    BLOCK_V: tl.constexpr, BLOCK_T: tl.constexpr,
):  # fmt: skip
    # One program: BLOCK_T tokens x one vocabulary group; online max / sum of exp (and the
    # smoothing sum) per token, written as the group's partials.
    toks = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    tmask = toks < n_tokens
    group = tl.program_id(1)
    v_start = group * rows_per_group
    v_stop = tl.minimum(v_start + rows_per_group, n_vocab)
    m = tl.full((BLOCK_T,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK_T,), tl.float32)
    wx = tl.zeros((BLOCK_T,), tl.float32)
    for v0 in range(v_start, v_stop, BLOCK_V):
        vs = v0 + tl.arange(0, BLOCK_V)
        vmask = vs < v_stop
        mask = vmask[:, None] & tmask[None, :]
        x = tl.load(LT + _vocab_major_offsets(vs, toks, n_tokens), mask=mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            x += tl.load(BIAS + vs, mask=vmask, other=0.0).to(tl.float32)[:, None]
        x = softcapped(x, softcap, HAS_SOFTCAP)
        m, s = online_lse_step(m, s, tl.where(mask, x, float("-inf")))
        if SMOOTH:
            if HAS_WEIGHT:
                x = x * tl.load(W + vs, mask=vmask, other=0.0).to(tl.float32)[:, None]
            wx += tl.sum(tl.where(mask, x, 0.0), axis=0)
    out = group.to(tl.int64) * n_tokens + toks
    tl.store(PART_MAX + out, m, mask=tmask)
    tl.store(PART_SUM + out, s, mask=tmask)
    if SMOOTH:
        tl.store(PART_WX + out, wx, mask=tmask)


@triton.jit
def _vocab_major_finish_kernel(
    LT, BIAS, Y, W, WSUM, PART_MAX, PART_SUM, PART_WX, LOSS, ZLOSS, LSE, n_tokens, n_vocab, n_groups,
    ignore_index, softcap, label_smoothing, lse_square_scale,
    HAS_BIAS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr, SMOOTH: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_G: tl.constexpr,
):  # fmt: skip
    # Per token: lse from the groups' partials, the target logit read from L^T, the loss terms.
    toks = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    tmask = toks < n_tokens
    g = tl.arange(0, BLOCK_G)
    pmask = (g < n_groups)[:, None] & tmask[None, :]
    offs = g[:, None].to(tl.int64) * n_tokens + toks[None, :]
    pm = tl.load(PART_MAX + offs, mask=pmask, other=float("-inf"))
    ps = tl.load(PART_SUM + offs, mask=pmask, other=0.0)
    m = tl.max(pm, axis=0)
    m = tl.where(m == float("-inf"), 0.0, m)  # lanes past the last token
    total = tl.sum(ps * tl.exp(pm - m[None, :]), axis=0)
    lse = m + tl.log(tl.where(tmask, total, 1.0))
    y = tl.load(Y + toks, mask=tmask, other=ignore_index)
    valid = tmask & (y != ignore_index)
    # An out-of-range target (reported by the caller after the launch) reads nothing.
    in_range = valid & (y >= 0) & (y < n_vocab)
    x_y = tl.load(LT + y.to(tl.int64) * n_tokens + toks, mask=in_range, other=0.0).to(tl.float32)
    if HAS_BIAS:
        x_y += tl.load(BIAS + y, mask=in_range, other=0.0).to(tl.float32)
    x_y = softcapped(x_y, softcap, HAS_SOFTCAP)
    w_y, w_sum = target_weight(W, WSUM, y, in_range, n_vocab, HAS_WEIGHT)
    wx = 0.0
    if SMOOTH:
        wx = tl.sum(tl.load(PART_WX + offs, mask=pmask, other=0.0), axis=0)
    loss = ce_loss_terms(lse, x_y, w_y, w_sum, wx, label_smoothing, label_smoothing / n_vocab, SMOOTH)
    tl.store(LOSS + toks, tl.where(valid, loss, 0.0), mask=tmask)
    tl.store(ZLOSS + toks, tl.where(valid, lse_square_scale * lse * lse, 0.0), mask=tmask)
    tl.store(LSE + toks, tl.where(valid, lse, 0.0), mask=tmask)


@triton.jit
def _vocab_major_grad_kernel(
    LT, BIAS, Y, W, WSUM, LSE, SCALES, UP, n_tokens, n_vocab,
    ignore_index, softcap, label_smoothing, lse_square_scale,
    HAS_BIAS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr, SMOOTH: tl.constexpr,
    BLOCK_V: tl.constexpr, BLOCK_T: tl.constexpr,
):  # fmt: skip
    # L^T tile -> gradient tile, in place (each program reads its tile before writing it).
    vs = tl.program_id(0) * BLOCK_V + tl.arange(0, BLOCK_V)
    toks = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    vmask = vs < n_vocab
    tmask = toks < n_tokens
    mask = vmask[:, None] & tmask[None, :]
    offs = _vocab_major_offsets(vs, toks, n_tokens)
    y = tl.load(Y + toks, mask=tmask, other=ignore_index)
    valid = y != ignore_index
    lse = tl.load(LSE + toks, mask=tmask, other=0.0)
    w_y, w_sum = target_weight(W, WSUM, y, tmask & valid & (y >= 0) & (y < n_vocab), n_vocab, HAS_WEIGHT)
    eps = label_smoothing / n_vocab
    up = tl.load(UP).to(tl.float32) + tl.zeros((BLOCK_T,), tl.float32)  # per token, like lse
    a, c_y, c_p = ce_grad_coefficients(
        up, tl.load(SCALES), tl.load(SCALES + 1), w_y, w_sum, lse,
        label_smoothing, lse_square_scale, eps, SMOOTH,
    )  # fmt: skip
    x = tl.load(LT + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        x += tl.load(BIAS + vs, mask=vmask, other=0.0).to(tl.float32)[:, None]
    w_cols = 1.0
    if SMOOTH and HAS_WEIGHT:
        w_cols = tl.load(W + vs, mask=vmask, other=0.0).to(tl.float32)[:, None]
    grad = ce_grad_values(
        x, lse[None, :], vs[:, None] == y[None, :], a[None, :], c_y[None, :], c_p[None, :], eps, w_cols,
        softcap, HAS_SOFTCAP, SMOOTH,
    )  # fmt: skip
    grad = tl.where(valid[None, :], grad, 0.0)
    tl.store(LT + offs, grad.to(LT.dtype.element_ty), mask=mask)


def _vocab_major_fits(x: torch.Tensor, grad_w: torch.Tensor | None) -> bool:
    """Whether the vocabulary-major path applies: all tokens' logits fit in grad_W's storage."""
    n, hidden = x.shape
    return grad_w is not None and grad_w.dtype == x.dtype and grad_w.is_contiguous() and 0 < n <= hidden


def _vocab_major_pass(
    x, w, target, bias, ce_weight, weight_total, ignore_index, lse_square_scale, label_smoothing, softcap,
    scales, rows_out, *, grad_x, grad_w, grad_b, upstream,
):  # fmt: skip
    """Loss terms and every gradient with the logits held in grad_W's storage (see the module
    docstring). Requires `_vocab_major_fits`."""
    n, hidden = x.shape
    vocab = w.shape[0]
    lt = grad_w.view(-1)[: vocab * n].view(vocab, n)  # L^T, then G^T, in grad_W's storage
    torch.mm(w, x.t(), out=lt)
    flags = dict(
        HAS_BIAS=bias is not None,
        HAS_WEIGHT=ce_weight is not None,
        HAS_SOFTCAP=softcap is not None,
        SMOOTH=label_smoothing > 0,
    )
    sc = float(softcap) if softcap is not None else 1.0
    bv, bt, warps = hardware.FLCE_VT_BLOCK_V, hardware.FLCE_VT_BLOCK_T, hardware.FLCE_VT_NUM_WARPS
    token_tiles = triton.cdiv(n, bt)
    wanted = hardware.FLCE_VT_PROGRAMS_PER_SM * hardware.sm_count(x.device.index)
    groups = max(1, min(triton.cdiv(vocab, bv), triton.cdiv(wanted, token_tiles)))
    rows_per_group = triton.cdiv(triton.cdiv(vocab, groups), bv) * bv
    groups = triton.cdiv(vocab, rows_per_group)
    dev = x.device
    part_max = torch.empty((groups, n), dtype=torch.float32, device=dev)
    part_sum = torch.empty_like(part_max)
    part_wx = torch.empty_like(part_max) if flags["SMOOTH"] else part_max
    bias_arg = bias if bias is not None else lt
    w_arg = ce_weight if ce_weight is not None else lt
    wsum_arg = weight_total if weight_total is not None else part_max
    _vocab_major_partials_kernel[(token_tiles, groups)](
        lt, bias_arg, w_arg, part_max, part_sum, part_wx, n, vocab, rows_per_group, sc,
        BLOCK_V=bv, BLOCK_T=bt, num_warps=warps, **flags,
    )  # fmt: skip
    _vocab_major_finish_kernel[(token_tiles,)](
        lt, bias_arg, target, w_arg, wsum_arg, part_max, part_sum, part_wx, rows_out.loss, rows_out.z,
        rows_out.lse, n, vocab, groups, ignore_index, sc, float(label_smoothing), float(lse_square_scale),
        BLOCK_T=bt, BLOCK_G=max(2, triton.next_power_of_2(groups)), num_warps=warps, **flags,
    )  # fmt: skip
    del part_max, part_sum, part_wx
    _vocab_major_grad_kernel[(triton.cdiv(vocab, bv), token_tiles)](
        lt, bias_arg, target, w_arg, wsum_arg, rows_out.lse, scales, upstream, n, vocab, ignore_index, sc,
        float(label_smoothing), float(lse_square_scale), BLOCK_V=bv, BLOCK_T=bt, num_warps=warps, **flags,
    )  # fmt: skip
    # lt now holds G^T. Everything that reads all of it comes before grad_W overwrites it.
    if grad_b is not None:
        grad_b += lt.sum(1, dtype=torch.float32)
    if grad_x is not None:
        torch.mm(lt.t(), w, out=grad_x)
    block = max(1, hardware.FLCE_VT_GRAD_WEIGHT_BLOCK_ELEMENTS // n)
    block = min(vocab, max(hardware.FLCE_CHUNK_MULTIPLE, block - block % hardware.FLCE_CHUNK_MULTIPLE))
    scratch = None
    for v0 in reversed(range(0, vocab, block)):
        v1 = min(v0 + block, vocab)
        src = lt[v0:v1]
        if v0 * hidden < v1 * n:  # grad_W[v0:v1] overlaps its own source rows: copy them out
            if scratch is None:
                scratch = torch.empty((block, n), dtype=lt.dtype, device=dev)
            src = scratch[: v1 - v0].copy_(src)
        torch.mm(src, x, out=grad_w[v0:v1])


class _Rows:
    def __init__(self, n, device):
        self.loss = torch.empty(n, dtype=torch.float32, device=device)
        self.z = torch.empty_like(self.loss)
        self.lse = torch.empty_like(self.loss)


class FusedLinearCrossEntropyKernels:
    """`liger_core.drivers.fused_linear_cross_entropy.FusedLinearCrossEntropyKernels`: this
    module's chunk loop and vocabulary-major pass."""

    protocol = flce_driver.PROTOCOL

    @staticmethod
    def forward(
        input, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction,
        softcap, return_z_loss, accum_dtype, needs, grads_now,
    ):  # fmt: skip
        need_x, need_w, need_b = needs
        x = input.contiguous()
        w = weight if weight.dtype == x.dtype else weight.to(x.dtype)  # as autocast would
        w = w.contiguous()
        weight_total = ce_weight.float().sum().reshape(1) if ce_weight is not None else None
        n = x.shape[0]
        scales, _, check = target_stats(
            "fused_linear_cross_entropy", target, ignore_index, weight.shape[0], ce_weight, reduction
        )
        rows = _Rows(n, x.device)
        common = (x, w, target, bias, ce_weight, weight_total, ignore_index, lse_square_scale, label_smoothing, softcap)
        grads, saved, state = None, (), None
        if grads_now:
            grads = _new_grads(x, weight, bias, need_x, need_w, need_b, accum_dtype)
            one = torch.ones(1, dtype=torch.float32, device=x.device)
            run = _vocab_major_pass if _vocab_major_fits(x, grads[1]) else _chunk_loop
            run(*common, scales, rows, grad_x=grads[0], grad_w=grads[1], grad_b=grads[2], upstream=one)
            grads = _finish_grads(grads, weight, bias)
        else:
            # The backward of "none" recomputes the chunks with this plan: the budget in force now.
            chunk_rows = _chunk_loop(*common, scales, rows)
            if any(needs):
                saved = (x, w, target, bias, ce_weight, weight_total, rows.lse, weight)
                state = (chunk_rows, (ignore_index, lse_square_scale, label_smoothing, softcap), accum_dtype)
        loss, z = reduce_rows(rows, reduction, scales)
        check.raise_if_bad()
        return loss, z, grads, saved, state

    @staticmethod
    def scale_grads(grads, grad_loss, state):
        for g in grads:
            scale_unless_one(g, grad_loss)  # in place, skipped on the device when 1
        return grads

    @staticmethod
    def backward(grad_loss, saved, state, needs):
        x, w, target, bias, ce_weight, weight_total, lse, weight = saved
        chunk_rows, args, accum_dtype = state
        grads = _new_grads(x, weight, bias, *needs, accum_dtype)
        _chunk_loop(
            x, w, target, bias, ce_weight, weight_total, *args, torch.ones(2, device=x.device), None,
            grad_x=grads[0], grad_w=grads[1], grad_b=grads[2], upstream=grad_loss, saved_lse=lse, rows=chunk_rows,
        )  # fmt: skip
        return _finish_grads(grads, weight, bias)


def _new_grads(x, weight, bias, need_x, need_w, need_b, accum_dtype):
    gx = torch.empty_like(x) if need_x else None
    gw = torch.empty(weight.shape, dtype=accum_dtype or weight.dtype, device=x.device) if need_w else None
    gb = torch.zeros(bias.shape, dtype=torch.float32, device=x.device) if need_b else None
    return gx, gw, gb


def _finish_grads(grads, weight, bias):
    gx, gw, gb = grads
    if gw is not None and gw.dtype != weight.dtype:
        gw = gw.to(weight.dtype)
    if gb is not None and gb.dtype != bias.dtype:
        gb = gb.to(bias.dtype)
    return gx, gw, gb


LigerFusedLinearCrossEntropyFunction = implements("fused_linear_cross_entropy")(
    flce_driver.autograd_function(FusedLinearCrossEntropyKernels(), __name__)
)
