"""mHC for NVIDIA GPUs: the routing coefficients, the pre-mix and the post + residual mix (Triton
kernels, launch plans and the kernel adapter of `liger_core.drivers.mhc`).

The projection ``mix = (v @ phi) * rstd`` (``v``: a token's HC streams flattened, ``rstd =
rsqrt(mean(v^2) + rms_eps)``) is memory-bound (``M = HC^2 + 2 HC`` columns): one kernel streams x
in its own dtype, a program per block of tokens and split of ``K = HC * C``, accumulating
``v @ phi`` and the sum of squares in float32 (torch adds the splits' partials), and x (not a
float32 copy) is what backward keeps. Backward is one kernel, a program per block of K columns
and split of the tokens: ``d_v = d_proj @ phi^T - v * coef`` written once in x's dtype and
``d_phi = v^T @ d_proj`` summed in registers (no atomics; the splits' partials added after),
from the small per-token ``d_proj`` and ``coef`` that torch forms first. The other kernels own
the per-token part: the two sigmoid maps and the Sinkhorn-Knopp iterations over the ``HC x HC``
residual matrix, whose backward walks the iterations in reverse. A program takes BLOCK_T tokens
as a (BLOCK_T, BLOCK_HC, BLOCK_HC) register tile (BLOCK_HC: HC to a power of two, padded lanes held at 0).

Forward keeps, when a gradient is needed, the matrix entering each of the ``tmax - 1`` later
iterations (``hist``: (tmax - 1) * HC^2 floats per token, small beside the HC * C streams).
Backward of one iteration (``B = A / (rowsum(A) + eps)``, ``A' = B / (colsum(B) + eps)``), with
``G`` the gradient of ``A'``: ``dB = (G - colsum(G * A')) / (colsum(B) + eps)``, ``dA = (dB -
rowsum(dB * B)) / (rowsum(A) + eps)``; the first iteration's input is ``softmax(L) + eps``,
recomputed from the logits, and the softmax's backward closes the walk.

The two mixes are memory-bound sums over the stream axis: a program takes BLOCK_T tokens and
walks their channels BLOCK_C at a time, reading each stream element once per pass and
accumulating in float32; the per-token map gradients (sums over the channels) stay in registers
across the walk, so no program writes another's tokens (no atomics).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import mhc as mhc_driver
from liger_ops_cuda import hardware

# Stands in for -inf on padded logits: finite, so a fully padded row's max does not make NaNs.
_PAD_LOGIT: tl.constexpr = tl.constexpr(-1.0e30)  # a global a kernel reads must be constexpr


@triton.jit
def _token_tiles(pid, n_tokens, hc, BLOCK_T: tl.constexpr, BLOCK_HC: tl.constexpr):
    """The program's tokens and lanes: ``(t2, mask2, lanes, t3, rows3, cols3, mask3)``, tokens in
    int64 as the first axis of a (BLOCK_T, BLOCK_HC) and a (BLOCK_T, BLOCK_HC, BLOCK_HC) tile."""
    tokens = pid * BLOCK_T + tl.arange(0, BLOCK_T)
    token_mask = tokens < n_tokens
    lanes = tl.arange(0, BLOCK_HC)
    lane_mask = lanes < hc
    t2 = tokens.to(tl.int64)[:, None]
    mask2 = token_mask[:, None] & lane_mask[None, :]
    t3 = tokens.to(tl.int64)[:, None, None]
    rows3 = lanes[None, :, None]
    cols3 = lanes[None, None, :]
    mask3 = token_mask[:, None, None] & lane_mask[None, :, None] & lane_mask[None, None, :]
    return t2, mask2, lanes, t3, rows3, cols3, mask3


@triton.jit
def _res_softmax(MIX, BIAS, alpha_res, t3, rows3, cols3, mask3, hc, n_mix):
    """Row softmax of the residual logits ``alpha_res * mix_res + b_res``, 0 on padded lanes."""
    res = 2 * hc + rows3 * hc + cols3
    mix = tl.load(MIX + t3 * n_mix + res, mask=mask3, other=0.0)
    bias = tl.load(BIAS + res, mask=(rows3 < hc) & (cols3 < hc), other=0.0).to(tl.float32)
    logits = tl.where(mask3, mix * alpha_res + bias, _PAD_LOGIT)
    exps = tl.exp(logits - tl.max(logits, axis=2)[:, :, None])
    exps = tl.where(mask3, exps, 0.0)
    return exps / tl.maximum(tl.sum(exps, axis=2)[:, :, None], 1e-30)


@triton.jit
def _mhc_coeffs_forward_kernel(
    MIX,
    BIAS,
    ALPHAS,
    H_PRE,
    H_POST,
    H_RES,
    HIST,
    n_tokens,
    hc,
    pre_eps,
    sinkhorn_eps,
    post_mult,
    TMAX: tl.constexpr,
    STORE_HIST: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_HC: tl.constexpr,
):
    t2, mask2, lanes, t3, rows3, cols3, mask3 = _token_tiles(tl.program_id(0), n_tokens, hc, BLOCK_T, BLOCK_HC)
    n_mix = hc * hc + 2 * hc
    alpha_pre = tl.load(ALPHAS)
    alpha_post = tl.load(ALPHAS + 1)
    alpha_res = tl.load(ALPHAS + 2)
    # The two sigmoid maps (columns [0, HC) and [HC, 2 HC) of mix).
    mix_pre = tl.load(MIX + t2 * n_mix + lanes[None, :], mask=mask2, other=0.0)
    mix_post = tl.load(MIX + t2 * n_mix + hc + lanes[None, :], mask=mask2, other=0.0)
    b_pre = tl.load(BIAS + lanes, mask=lanes < hc, other=0.0).to(tl.float32)
    b_post = tl.load(BIAS + hc + lanes, mask=lanes < hc, other=0.0).to(tl.float32)
    tl.store(H_PRE + t2 * hc + lanes[None, :], tl.sigmoid(mix_pre * alpha_pre + b_pre[None, :]) + pre_eps, mask=mask2)
    h_post = tl.sigmoid(mix_post * alpha_post + b_post[None, :]) * post_mult
    tl.store(H_POST + t2 * hc + lanes[None, :], h_post, mask=mask2)
    # Sinkhorn: the softmax step with its column normalisation, then TMAX - 1 row/column pairs.
    mat = tl.where(mask3, _res_softmax(MIX, BIAS, alpha_res, t3, rows3, cols3, mask3, hc, n_mix) + sinkhorn_eps, 0.0)
    mat = mat / (tl.sum(mat, axis=1)[:, None, :] + sinkhorn_eps)
    square = hc * hc
    hist = HIST + t3 * ((TMAX - 1) * square) + rows3 * hc + cols3
    for step in range(1, TMAX):
        if STORE_HIST:
            tl.store(hist + (step - 1) * square, mat, mask=mask3)
        mat = mat / (tl.sum(mat, axis=2)[:, :, None] + sinkhorn_eps)
        mat = mat / (tl.sum(mat, axis=1)[:, None, :] + sinkhorn_eps)
    tl.store(H_RES + t3 * square + rows3 * hc + cols3, mat, mask=mask3)


@triton.jit
def _mhc_coeffs_backward_kernel(
    MIX,
    BIAS,
    ALPHAS,
    HIST,
    D_PRE,
    D_POST,
    D_RES,
    D_LOGITS,
    n_tokens,
    hc,
    sinkhorn_eps,
    post_mult,
    TMAX: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_HC: tl.constexpr,
):
    # D_LOGITS: (tokens, HC * HC + 2 * HC) float32, the gradient of each logit (before its alpha).
    t2, mask2, lanes, t3, rows3, cols3, mask3 = _token_tiles(tl.program_id(0), n_tokens, hc, BLOCK_T, BLOCK_HC)
    n_mix = hc * hc + 2 * hc
    alpha_pre = tl.load(ALPHAS)
    alpha_post = tl.load(ALPHAS + 1)
    alpha_res = tl.load(ALPHAS + 2)
    mix_pre = tl.load(MIX + t2 * n_mix + lanes[None, :], mask=mask2, other=0.0)
    mix_post = tl.load(MIX + t2 * n_mix + hc + lanes[None, :], mask=mask2, other=0.0)
    b_pre = tl.load(BIAS + lanes, mask=lanes < hc, other=0.0).to(tl.float32)
    b_post = tl.load(BIAS + hc + lanes, mask=lanes < hc, other=0.0).to(tl.float32)
    s_pre = tl.sigmoid(mix_pre * alpha_pre + b_pre[None, :])
    s_post = tl.sigmoid(mix_post * alpha_post + b_post[None, :])
    d_pre = tl.load(D_PRE + t2 * hc + lanes[None, :], mask=mask2, other=0.0)
    d_post = tl.load(D_POST + t2 * hc + lanes[None, :], mask=mask2, other=0.0)
    tl.store(D_LOGITS + t2 * n_mix + lanes[None, :], d_pre * s_pre * (1.0 - s_pre), mask=mask2)
    d_post_logits = d_post * post_mult * s_post * (1.0 - s_post)
    tl.store(D_LOGITS + t2 * n_mix + hc + lanes[None, :], d_post_logits, mask=mask2)
    # Sinkhorn in reverse: the iterations TMAX - 1 .. 1, each from the matrix that entered it.
    square = hc * hc
    grad = tl.load(D_RES + t3 * square + rows3 * hc + cols3, mask=mask3, other=0.0)
    hist = HIST + t3 * ((TMAX - 1) * square) + rows3 * hc + cols3
    for back in range(TMAX - 1):
        entering = tl.load(hist + (TMAX - 2 - back) * square, mask=mask3, other=0.0)
        row_sum = tl.sum(entering, axis=2)[:, :, None] + sinkhorn_eps
        row_normed = entering / row_sum
        col_sum = tl.sum(row_normed, axis=1)[:, None, :] + sinkhorn_eps
        out = row_normed / col_sum
        d_row_normed = (grad - tl.sum(grad * out, axis=1)[:, None, :]) / col_sum
        grad = (d_row_normed - tl.sum(d_row_normed * row_normed, axis=2)[:, :, None]) / row_sum
        grad = tl.where(mask3, grad, 0.0)
    # The softmax step: P = softmax(L) + eps, A0 = P / (colsum(P) + eps).
    probs = _res_softmax(MIX, BIAS, alpha_res, t3, rows3, cols3, mask3, hc, n_mix)
    shifted = tl.where(mask3, probs + sinkhorn_eps, 0.0)
    col_sum = tl.sum(shifted, axis=1)[:, None, :] + sinkhorn_eps
    d_shifted = (grad - tl.sum(grad * (shifted / col_sum), axis=1)[:, None, :]) / col_sum
    d_logits = probs * (d_shifted - tl.sum(d_shifted * probs, axis=2)[:, :, None])
    tl.store(D_LOGITS + t3 * n_mix + 2 * hc + rows3 * hc + cols3, d_logits, mask=mask3)


def plan_mhc(hc: int, n_tokens: int) -> tuple[int, int, int]:
    """(BLOCK_T, BLOCK_HC, num_warps): tokens per program fill MHC_TILE_ELEMENTS of HC^2 lanes."""
    block_hc = triton.next_power_of_2(hc)
    block_t = max(1, hardware.MHC_TILE_ELEMENTS // (block_hc * block_hc))
    block_t = min(block_t, triton.next_power_of_2(max(n_tokens, 1)))
    return block_t, block_hc, hardware.MHC_NUM_WARPS


def sinkhorn_forward(mix, b, alphas, hc, tmax, pre_eps, sinkhorn_eps, post_mult, store_hist):
    """h_pre, h_post, h_res (float32) and the Sinkhorn history (None unless ``store_hist``)."""
    n_tokens = mix.shape[0]
    h_pre = torch.empty((n_tokens, hc), dtype=torch.float32, device=mix.device)
    h_post = torch.empty_like(h_pre)
    h_res = torch.empty((n_tokens, hc, hc), dtype=torch.float32, device=mix.device)
    store_hist = store_hist and tmax > 1
    hist = torch.empty((n_tokens, tmax - 1, hc, hc) if store_hist else (1,), dtype=torch.float32, device=mix.device)
    if n_tokens:
        block_t, block_hc, warps = plan_mhc(hc, n_tokens)
        _mhc_coeffs_forward_kernel[(triton.cdiv(n_tokens, block_t),)](
            mix,
            b,
            alphas,
            h_pre,
            h_post,
            h_res,
            hist,
            n_tokens,
            hc,
            pre_eps,
            sinkhorn_eps,
            post_mult,
            TMAX=tmax,
            STORE_HIST=store_hist,
            BLOCK_T=block_t,
            BLOCK_HC=block_hc,
            num_warps=warps,
        )
    return h_pre, h_post, h_res, (hist if store_hist else None)


def sinkhorn_backward(mix, b, alphas, hist, d_pre, d_post, d_res, hc, tmax, sinkhorn_eps, post_mult):
    """The gradient of every logit (tokens, HC * HC + 2 * HC), float32."""
    n_tokens = mix.shape[0]
    d_logits = torch.empty_like(mix)
    if n_tokens:
        block_t, block_hc, warps = plan_mhc(hc, n_tokens)
        _mhc_coeffs_backward_kernel[(triton.cdiv(n_tokens, block_t),)](
            mix,
            b,
            alphas,
            hist if hist is not None else mix,
            d_pre,
            d_post,
            d_res,
            d_logits,
            n_tokens,
            hc,
            sinkhorn_eps,
            post_mult,
            TMAX=tmax,
            BLOCK_T=block_t,
            BLOCK_HC=block_hc,
            num_warps=warps,
        )
    return d_logits


# -- the projection: mix = (v @ phi) * rstd ------------------------------------------------------


@triton.jit
def _mhc_projection_forward_kernel(
    X,
    PHI,
    MIX_PARTIAL,
    SQUARE_PARTIAL,
    n_tokens,
    k,
    n_mix,
    k_per_split,
    PRECISION: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    # X: (tokens, K) contiguous; PHI: (K, M) contiguous. Program (token block, split) sums its
    # split's k_per_split values of K: MIX_PARTIAL[split] (tokens, M) = x @ phi over them,
    # SQUARE_PARTIAL[split] (tokens,) = sum x^2 (float32; `projection_forward` adds the splits).
    # Splitting K gives a few thousand tokens enough programs while each token block stays wide
    # enough that phi, which every block reads, costs less traffic than x.
    # PRECISION "tf32" only when x and phi are both 16-bit floats: TF32 holds their values exactly
    # and float32 their products, so the tensor-core dot is the float32 projection; otherwise
    # "ieee" (no TF32 rounding of float32 operands).
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    split = tl.program_id(1)
    token_mask = tokens < n_tokens
    rows = tokens.to(tl.int64)[:, None] * k
    cols = tl.arange(0, BLOCK_M)
    col_mask = cols < n_mix
    acc = tl.zeros((BLOCK_T, BLOCK_M), dtype=tl.float32)
    square_sum = tl.zeros((BLOCK_T,), dtype=tl.float32)
    k_start = split * k_per_split
    k_end = tl.minimum(k_start + k_per_split, k)
    for k0 in range(k_start, k_end, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_mask = ks < k_end
        x = tl.load(X + rows + ks[None, :], mask=token_mask[:, None] & k_mask[None, :], other=0.0)
        phi_mask = k_mask[:, None] & col_mask[None, :]
        phi = tl.load(PHI + ks.to(tl.int64)[:, None] * n_mix + cols[None, :], mask=phi_mask, other=0.0)
        x = x.to(tl.float32)
        square_sum += tl.sum(x * x, axis=1)
        acc = tl.dot(x, phi.to(tl.float32), acc, input_precision=PRECISION)
    out_mask = token_mask[:, None] & col_mask[None, :]
    partial = split.to(tl.int64) * n_tokens + tokens.to(tl.int64)
    tl.store(MIX_PARTIAL + partial[:, None] * n_mix + cols[None, :], acc, mask=out_mask)
    tl.store(SQUARE_PARTIAL + partial, square_sum, mask=token_mask)


@triton.jit
def _mhc_projection_backward_kernel(
    X,
    PHI,
    D_PROJ,
    COEF,
    D_X,
    D_PHI_PARTIAL,
    n_tokens,
    k,
    n_mix,
    tokens_per_split,
    PRECISION: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    # Program (K block, split) owns BLOCK_K columns of v and the split's tokens_per_split tokens:
    # it walks them a block at a time, writing d_x = d_proj @ phi^T - v * coef for its columns and
    # summing d_phi = v^T @ d_proj in registers into D_PHI_PARTIAL[split] (K, M), so x is read
    # once, d_x written once, and d_phi needs no atomics (`projection_backward` adds the splits).
    # D_PROJ: (tokens, M) = d_mix * rstd; COEF: (tokens,) = sum(d_mix * mix) * rstd^2 / K (float32).
    # PRECISION "tf32" only for 16-bit x: x is exact in TF32 and d_x is rounded to x's dtype, far
    # coarser than TF32's rounding of d_proj; float32 x takes "ieee" (the float32 tolerances).
    ks = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    k_mask = ks < k
    cols = tl.arange(0, BLOCK_M)
    col_mask = cols < n_mix
    phi_offsets = ks.to(tl.int64)[:, None] * n_mix + cols[None, :]
    phi_mask = k_mask[:, None] & col_mask[None, :]
    phi_t = tl.trans(tl.load(PHI + phi_offsets, mask=phi_mask, other=0.0).to(tl.float32))
    d_phi = tl.zeros((BLOCK_K, BLOCK_M), dtype=tl.float32)
    t_start = tl.program_id(1) * tokens_per_split
    t_end = tl.minimum(t_start + tokens_per_split, n_tokens)
    for t0 in range(t_start, t_end, BLOCK_T):
        tokens = t0 + tl.arange(0, BLOCK_T)
        token_mask = tokens < t_end
        t64 = tokens.to(tl.int64)[:, None]
        x_mask = token_mask[:, None] & k_mask[None, :]
        x = tl.load(X + t64 * k + ks[None, :], mask=x_mask, other=0.0).to(tl.float32)
        d_proj = tl.load(D_PROJ + t64 * n_mix + cols[None, :], mask=token_mask[:, None] & col_mask[None, :], other=0.0)
        coef = tl.load(COEF + tokens, mask=token_mask, other=0.0)
        d_x = tl.dot(d_proj, phi_t, input_precision=PRECISION) - x * coef[:, None]
        tl.store(D_X + t64 * k + ks[None, :], d_x.to(D_X.dtype.element_ty), mask=x_mask)
        d_phi = tl.dot(tl.trans(x), d_proj, d_phi, input_precision=PRECISION)
    tl.store(D_PHI_PARTIAL + tl.program_id(1).to(tl.int64) * k * n_mix + phi_offsets, d_phi, mask=phi_mask)


def _dot_block(n: int, cap: int) -> int:
    # tl.dot takes operands of at least 16 along every axis.
    return max(16, min(cap, triton.next_power_of_2(max(n, 1))))


def _splits(n: int, block: int, other_programs: int, device: torch.device) -> tuple[int, int]:
    """(splits, span): ``n`` cut into ``splits`` spans of ``span`` (whole blocks) so that about
    MHC_PROJ_PROGRAMS_PER_SM programs per SM run beside the ``other_programs`` of the other axis."""
    wanted = hardware.sm_count(device.index) * hardware.MHC_PROJ_PROGRAMS_PER_SM
    blocks = triton.cdiv(n, block)
    splits = max(1, min(blocks, triton.cdiv(wanted, other_programs)))
    span = triton.cdiv(blocks, splits) * block
    return triton.cdiv(n, span), span


def projection_forward(v, phi, rms_eps):
    """(mix (tokens, M), rstd (tokens,)) float32 from v (tokens, K) and phi (K, M), contiguous."""
    n_tokens, k = v.shape
    n_mix = phi.shape[1]
    if not n_tokens:
        return v.new_empty((0, n_mix), dtype=torch.float32), v.new_empty((0,), dtype=torch.float32)
    block_t = _dot_block(n_tokens, hardware.MHC_PROJ_BLOCK_T)
    block_k = _dot_block(k, hardware.MHC_PROJ_BLOCK_K)
    token_blocks = triton.cdiv(n_tokens, block_t)
    splits, k_per_split = _splits(k, block_k, token_blocks, v.device)
    mix_partial = torch.empty((splits, n_tokens, n_mix), dtype=torch.float32, device=v.device)
    square_partial = torch.empty((splits, n_tokens), dtype=torch.float32, device=v.device)
    _mhc_projection_forward_kernel[(token_blocks, splits)](
        v, phi, mix_partial, square_partial, n_tokens, k, n_mix, k_per_split,
        PRECISION="ieee" if torch.float32 in (v.dtype, phi.dtype) else "tf32",
        BLOCK_T=block_t, BLOCK_K=block_k, BLOCK_M=_dot_block(n_mix, n_mix * 2),
        num_warps=hardware.MHC_PROJ_NUM_WARPS,
    )  # fmt: skip
    rstd = (square_partial.sum(0) / k + rms_eps).rsqrt_()
    return mix_partial.sum(0).mul_(rstd[:, None]), rstd


def projection_backward(v, phi, d_proj, coef):
    """(grad_v in v's dtype, grad_phi float32) from d_proj (tokens, M) and coef (tokens,) float32."""
    n_tokens, k = v.shape
    n_mix = phi.shape[1]
    d_v = torch.empty_like(v)
    if not n_tokens:
        return d_v, torch.zeros((k, n_mix), dtype=torch.float32, device=v.device)
    block_k = _dot_block(k, hardware.MHC_PROJ_BACKWARD_BLOCK_K)
    block_t = _dot_block(n_tokens, hardware.MHC_PROJ_BACKWARD_BLOCK_T)
    k_blocks = triton.cdiv(k, block_k)
    splits, tokens_per_split = _splits(n_tokens, block_t, k_blocks, v.device)
    d_phi_partial = torch.empty((splits, k, n_mix), dtype=torch.float32, device=v.device)
    _mhc_projection_backward_kernel[(k_blocks, splits)](
        v, phi, d_proj, coef, d_v, d_phi_partial, n_tokens, k, n_mix, tokens_per_split,
        PRECISION="ieee" if v.dtype == torch.float32 else "tf32",
        BLOCK_T=block_t, BLOCK_K=block_k, BLOCK_M=_dot_block(n_mix, n_mix * 2),
        num_warps=hardware.MHC_PROJ_BACKWARD_NUM_WARPS,
    )  # fmt: skip
    return d_v, d_phi_partial.sum(0)


# -- the pre-mix and the post + residual mix -----------------------------------------------------


@triton.jit
def _mix_tokens(pid, n_tokens, hc, BLOCK_T: tl.constexpr, BLOCK_HC: tl.constexpr):
    """``(t2, token_mask, streams, map_mask)``: the program's tokens (int64, a (BLOCK_T, 1)
    column), their mask, the stream lanes and the (BLOCK_T, BLOCK_HC) mask of the per-token maps."""
    tokens = pid * BLOCK_T + tl.arange(0, BLOCK_T)
    streams = tl.arange(0, BLOCK_HC)
    t2 = tokens.to(tl.int64)[:, None]
    token_mask = (tokens < n_tokens)[:, None]
    return t2, token_mask, streams, token_mask & (streams < hc)[None, :]


@triton.jit
def _mhc_pre_forward_kernel(
    X,
    H_PRE,
    OUT,
    n_tokens,
    hc,
    n_channels,
    BLOCK_T: tl.constexpr,
    BLOCK_HC: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    # X: (tokens, HC, C) contiguous; H_PRE: (tokens, HC); OUT: (tokens, C) in x's dtype.
    t2, token_mask, streams, map_mask = _mix_tokens(tl.program_id(0), n_tokens, hc, BLOCK_T, BLOCK_HC)
    h_pre = tl.load(H_PRE + t2 * hc + streams[None, :], mask=map_mask, other=0.0).to(tl.float32)
    x_rows = X + ((t2 * hc + streams[None, :]) * n_channels)[:, :, None]
    for c0 in range(0, n_channels, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        col_mask = cols < n_channels
        x_mask = map_mask[:, :, None] & col_mask[None, None, :]
        x = tl.load(x_rows + cols[None, None, :], mask=x_mask, other=0.0).to(tl.float32)
        x_in = tl.sum(x * h_pre[:, :, None], axis=1)
        out_mask = token_mask & col_mask[None, :]
        tl.store(OUT + t2 * n_channels + cols[None, :], x_in.to(OUT.dtype.element_ty), mask=out_mask)


@triton.jit
def _mhc_pre_backward_kernel(
    X,
    H_PRE,
    D_OUT,
    D_X,
    D_H_PRE,
    n_tokens,
    hc,
    n_channels,
    BLOCK_T: tl.constexpr,
    BLOCK_HC: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    # D_X: (tokens, HC, C) in x's dtype; D_H_PRE: (tokens, HC) float32, the sums over the channels.
    t2, token_mask, streams, map_mask = _mix_tokens(tl.program_id(0), n_tokens, hc, BLOCK_T, BLOCK_HC)
    h_pre = tl.load(H_PRE + t2 * hc + streams[None, :], mask=map_mask, other=0.0).to(tl.float32)
    stream_rows = ((t2 * hc + streams[None, :]) * n_channels)[:, :, None]
    d_h_pre = tl.zeros((BLOCK_T, BLOCK_HC), dtype=tl.float32)
    for c0 in range(0, n_channels, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        col_mask = cols < n_channels
        x_mask = map_mask[:, :, None] & col_mask[None, None, :]
        d_out = tl.load(D_OUT + t2 * n_channels + cols[None, :], mask=token_mask & col_mask[None, :], other=0.0)
        d_out = d_out.to(tl.float32)[:, None, :]
        x = tl.load(X + stream_rows + cols[None, None, :], mask=x_mask, other=0.0).to(tl.float32)
        d_x = d_out * h_pre[:, :, None]
        tl.store(D_X + stream_rows + cols[None, None, :], d_x.to(D_X.dtype.element_ty), mask=x_mask)
        d_h_pre += tl.sum(d_out * x, axis=2)
    tl.store(D_H_PRE + t2 * hc + streams[None, :], d_h_pre, mask=map_mask)


@triton.jit
def _mhc_post_res_forward_kernel(
    X,
    F_OUT,
    H_POST,
    H_RES,
    OUT,
    n_tokens,
    hc,
    n_channels,
    BLOCK_T: tl.constexpr,
    BLOCK_HC: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    # X, OUT: (tokens, HC, C) contiguous, OUT in x's dtype; F_OUT: (tokens, C); H_POST: (tokens,
    # HC); H_RES: (tokens, HC, HC), rows the output stream. The mix is a (tokens, out stream, in
    # stream, channels) tile summed over the in streams.
    t2, token_mask, streams, map_mask = _mix_tokens(tl.program_id(0), n_tokens, hc, BLOCK_T, BLOCK_HC)
    h_post = tl.load(H_POST + t2 * hc + streams[None, :], mask=map_mask, other=0.0).to(tl.float32)
    res_mask = map_mask[:, :, None] & (streams < hc)[None, None, :]
    res_offsets = ((t2 * hc + streams[None, :]) * hc)[:, :, None] + streams[None, None, :]
    h_res = tl.load(H_RES + res_offsets, mask=res_mask, other=0.0).to(tl.float32)
    stream_rows = ((t2 * hc + streams[None, :]) * n_channels)[:, :, None]
    for c0 in range(0, n_channels, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        col_mask = cols < n_channels
        x_mask = map_mask[:, :, None] & col_mask[None, None, :]
        x = tl.load(X + stream_rows + cols[None, None, :], mask=x_mask, other=0.0).to(tl.float32)
        f_out = tl.load(F_OUT + t2 * n_channels + cols[None, :], mask=token_mask & col_mask[None, :], other=0.0)
        mixed = tl.sum(h_res[:, :, :, None] * x[:, None, :, :], axis=2)
        out = mixed + h_post[:, :, None] * f_out.to(tl.float32)[:, None, :]
        tl.store(OUT + stream_rows + cols[None, None, :], out.to(OUT.dtype.element_ty), mask=x_mask)


@triton.jit
def _mhc_post_res_backward_kernel(
    X,
    F_OUT,
    H_POST,
    H_RES,
    D_OUT,
    D_X,
    D_F_OUT,
    D_H_POST,
    D_H_RES,
    n_tokens,
    hc,
    n_channels,
    BLOCK_T: tl.constexpr,
    BLOCK_HC: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    # D_X, D_F_OUT in their inputs' dtypes; D_H_POST, D_H_RES float32, the sums over the channels.
    t2, token_mask, streams, map_mask = _mix_tokens(tl.program_id(0), n_tokens, hc, BLOCK_T, BLOCK_HC)
    h_post = tl.load(H_POST + t2 * hc + streams[None, :], mask=map_mask, other=0.0).to(tl.float32)
    res_mask = map_mask[:, :, None] & (streams < hc)[None, None, :]
    res_offsets = ((t2 * hc + streams[None, :]) * hc)[:, :, None] + streams[None, None, :]
    h_res = tl.load(H_RES + res_offsets, mask=res_mask, other=0.0).to(tl.float32)
    stream_rows = ((t2 * hc + streams[None, :]) * n_channels)[:, :, None]
    d_h_post = tl.zeros((BLOCK_T, BLOCK_HC), dtype=tl.float32)
    d_h_res = tl.zeros((BLOCK_T, BLOCK_HC, BLOCK_HC), dtype=tl.float32)
    for c0 in range(0, n_channels, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        col_mask = cols < n_channels
        x_mask = map_mask[:, :, None] & col_mask[None, None, :]
        row_mask = token_mask & col_mask[None, :]
        d_out = tl.load(D_OUT + stream_rows + cols[None, None, :], mask=x_mask, other=0.0).to(tl.float32)
        x = tl.load(X + stream_rows + cols[None, None, :], mask=x_mask, other=0.0).to(tl.float32)
        f_out = tl.load(F_OUT + t2 * n_channels + cols[None, :], mask=row_mask, other=0.0).to(tl.float32)
        d_f_out = tl.sum(d_out * h_post[:, :, None], axis=1)
        tl.store(D_F_OUT + t2 * n_channels + cols[None, :], d_f_out.to(D_F_OUT.dtype.element_ty), mask=row_mask)
        d_h_post += tl.sum(d_out * f_out[:, None, :], axis=2)
        # (tokens, out stream, in stream, channels): grad_x sums the out streams, grad_h_res the channels.
        d_x = tl.sum(h_res[:, :, :, None] * d_out[:, :, None, :], axis=1)
        tl.store(D_X + stream_rows + cols[None, None, :], d_x.to(D_X.dtype.element_ty), mask=x_mask)
        d_h_res += tl.sum(d_out[:, :, None, :] * x[:, None, :, :], axis=3)
    tl.store(D_H_POST + t2 * hc + streams[None, :], d_h_post, mask=map_mask)
    tl.store(D_H_RES + res_offsets, d_h_res, mask=res_mask)


def plan_mix(hc: int, n_tokens: int, n_channels: int, square: bool) -> tuple[int, int, int, int]:
    """(BLOCK_T, BLOCK_HC, BLOCK_C, num_warps) of a mix: the largest tile (BLOCK_T x BLOCK_HC x
    BLOCK_C, times BLOCK_HC again when ``square``: the post-mix's matrix) within
    MHC_MIX_TILE_ELEMENTS, the channels first (contiguous), then as many tokens as fit."""
    block_hc = triton.next_power_of_2(hc)
    lanes = block_hc * block_hc if square else block_hc
    block_c = min(
        triton.next_power_of_2(max(n_channels, 1)),
        hardware.MHC_MIX_BLOCK_C,
        max(1, hardware.MHC_MIX_TILE_ELEMENTS // lanes),
    )
    block_t = max(1, hardware.MHC_MIX_TILE_ELEMENTS // (lanes * block_c))
    block_t = min(block_t, triton.next_power_of_2(max(n_tokens, 1)))
    return block_t, block_hc, block_c, hardware.MHC_MIX_NUM_WARPS


def pre_forward(x, h_pre):
    """x_in (tokens, C) in x's dtype from x (tokens, HC, C) and h_pre (tokens, HC), contiguous."""
    n_tokens, hc, n_channels = x.shape
    out = torch.empty((n_tokens, n_channels), dtype=x.dtype, device=x.device)
    if n_tokens and n_channels:
        block_t, block_hc, block_c, warps = plan_mix(hc, n_tokens, n_channels, square=False)
        _mhc_pre_forward_kernel[(triton.cdiv(n_tokens, block_t),)](
            x, h_pre, out, n_tokens, hc, n_channels, BLOCK_T=block_t, BLOCK_HC=block_hc, BLOCK_C=block_c,
            num_warps=warps,
        )  # fmt: skip
    return out


def pre_backward(x, h_pre, d_out):
    """(grad_x in x's dtype, grad_h_pre float32)."""
    n_tokens, hc, n_channels = x.shape
    d_x = torch.empty_like(x)
    d_h_pre = torch.zeros((n_tokens, hc), dtype=torch.float32, device=x.device)
    if n_tokens and n_channels:
        block_t, block_hc, block_c, warps = plan_mix(hc, n_tokens, n_channels, square=False)
        _mhc_pre_backward_kernel[(triton.cdiv(n_tokens, block_t),)](
            x, h_pre, d_out, d_x, d_h_pre, n_tokens, hc, n_channels, BLOCK_T=block_t, BLOCK_HC=block_hc,
            BLOCK_C=block_c, num_warps=warps,
        )  # fmt: skip
    return d_x, d_h_pre


def post_res_forward(x, f_out, h_post, h_res):
    """x_out (tokens, HC, C) in x's dtype; every input contiguous, flattened over the tokens."""
    n_tokens, hc, n_channels = x.shape
    out = torch.empty_like(x)
    if n_tokens and n_channels:
        block_t, block_hc, block_c, warps = plan_mix(hc, n_tokens, n_channels, square=True)
        _mhc_post_res_forward_kernel[(triton.cdiv(n_tokens, block_t),)](
            x, f_out, h_post, h_res, out, n_tokens, hc, n_channels, BLOCK_T=block_t, BLOCK_HC=block_hc,
            BLOCK_C=block_c, num_warps=warps,
        )  # fmt: skip
    return out


def post_res_backward(x, f_out, h_post, h_res, d_out):
    """(grad_x, grad_f_out) in their inputs' dtypes, (grad_h_post, grad_h_res) float32."""
    n_tokens, hc, n_channels = x.shape
    d_x = torch.empty_like(x)
    d_f_out = torch.empty_like(f_out)
    d_h_post = torch.zeros((n_tokens, hc), dtype=torch.float32, device=x.device)
    d_h_res = torch.zeros((n_tokens, hc, hc), dtype=torch.float32, device=x.device)
    if n_tokens and n_channels:
        block_t, block_hc, block_c, warps = plan_mix(hc, n_tokens, n_channels, square=True)
        _mhc_post_res_backward_kernel[(triton.cdiv(n_tokens, block_t),)](
            x, f_out, h_post, h_res, d_out, d_x, d_f_out, d_h_post, d_h_res, n_tokens, hc, n_channels,
            BLOCK_T=block_t, BLOCK_HC=block_hc, BLOCK_C=block_c, num_warps=warps,
        )  # fmt: skip
    return d_x, d_f_out, d_h_post, d_h_res


class MHCKernels:
    """`liger_core.drivers.mhc.MHCKernels` on this module's kernels."""

    protocol = mhc_driver.PROTOCOL
    projection_forward = staticmethod(projection_forward)
    projection_backward = staticmethod(projection_backward)
    sinkhorn_forward = staticmethod(sinkhorn_forward)
    sinkhorn_backward = staticmethod(sinkhorn_backward)

    @staticmethod
    def pre_forward(x, h_pre):
        return pre_forward(x, h_pre), x

    pre_backward = staticmethod(pre_backward)

    @staticmethod
    def post_res_forward(x, f_out, h_post, h_res):
        return post_res_forward(x, f_out, h_post, h_res), x, f_out

    post_res_backward = staticmethod(post_res_backward)


_functions = mhc_driver.autograd_functions(MHCKernels(), __name__)
LigerMHCCoeffsFunction = implements("mhc_coeffs")(_functions["mhc_coeffs"])
LigerMHCPreFunction = implements("mhc_pre")(_functions["mhc_pre"])
LigerMHCPostResFunction = implements("mhc_post_res")(_functions["mhc_post_res"])
