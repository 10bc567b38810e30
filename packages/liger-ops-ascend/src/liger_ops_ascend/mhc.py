"""mHC for Ascend NPUs: the routing coefficients, the pre-mix and the post + residual mix (Triton
kernels, UB plans and the kernel adapter of `liger_core.drivers.mhc`).

The projection ``mix = (v @ phi) * rstd`` (``v``: a token's HC streams flattened, ``rstd =
rsqrt(mean(v^2) + rms_eps)``) is one float32 GEMM over the tokens plus a row reduction, left to
torch (the cube cores), upcast to float32 there (the driver keeps v in x's dtype); its backward
is two more GEMMs. The kernels own the per-token part: the two sigmoid maps and the Sinkhorn-Knopp iterations over the ``HC x HC`` residual matrix, whose
backward walks the iterations in reverse. A program takes BLOCK_T tokens as a (BLOCK_T,
BLOCK_HC, BLOCK_HC) UB tile (BLOCK_HC: HC to a power of two, padded lanes held at 0); one
program per vector core walks the token tiles (grid-stride: the grid stays under 65536), and
BLOCK_T comes from the UB plan (every live tile in the Unified Buffer budget, `launch` checks).

Forward keeps, when a gradient is needed, the matrix entering each of the ``tmax - 1`` later
iterations (``hist``: (tmax - 1) * HC^2 floats per token, small beside the HC * C streams).
Backward of one iteration (``B = A / (rowsum(A) + eps)``, ``A' = B / (colsum(B) + eps)``), with
``G`` the gradient of ``A'``: ``dB = (G - colsum(G * A')) / (colsum(B) + eps)``, ``dA = (dB -
rowsum(dB * B)) / (rowsum(A) + eps)``; the first iteration's input is ``softmax(L) + eps``,
recomputed from the logits, and the softmax's backward closes the walk.

The two mixes are memory-bound sums over the stream axis: a program walks its token tiles
(grid-stride, one program per vector core) and each tile's channels BLOCK_C at a time, reading
each stream element once per pass and accumulating in float32; the per-token map gradients (sums
over the channels) stay in the UB across the walk, so no program writes another's tokens. Rows
of channels are DMA'd several at a time, so their pitch is kept 32-byte aligned: the kernel
adapter pads the channel axis of a tensor whose pitch is not (``pitch`` below, in elements) and
hands the driver the padded copies to keep for backward.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import mhc as mhc_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import below
from liger_ops_ascend.launch import KernelPlan, Tile, launch

# Stands in for -inf on padded logits: finite, so a fully padded row's max does not make NaNs.
_PAD_LOGIT: tl.constexpr = tl.constexpr(-1.0e30)  # a global a kernel reads must be constexpr


@triton.jit
def _token_tiles(tile, pid, n_tokens, hc, BLOCK_T: tl.constexpr, BLOCK_HC: tl.constexpr):
    """The program's tokens and lanes: ``(t0, m2, mask2, lanes, m3, rows3, cols3, mask3)``.

    ``t0``: the tile's first token, an int64 scalar base (the offsets inside the tile stay int32:
    int64 vector arithmetic runs as scalar code); ``m2``/``m3``: the tile's token indices as the
    first axis of a (BLOCK_T, BLOCK_HC) and a (BLOCK_T, BLOCK_HC, BLOCK_HC) tile. ``mask3`` comes
    from fp32 compares (``_jit.below``): it also selects padded lanes in ``tl.where``, and the
    vector units have no integer compare. ``mask2`` only masks loads and stores, some without a
    padding fill: integer compares against int32 bounds, which the compiler turns into DMA
    lengths (triton-ascend 3.2.0's DiscreteMaskAccessConversion aborts on a fill-less load whose
    mask comes from fp32 compares). ``pid * 0 + tile``: the interpreter's loop variable is a
    Python int."""
    t0 = (pid * 0 + tile).to(tl.int64) * BLOCK_T
    tokens = tl.arange(0, BLOCK_T)
    token_ok = below(tokens, n_tokens - t0)
    lanes = tl.arange(0, BLOCK_HC)
    lane_ok = below(lanes, hc)
    m2 = tokens[:, None]
    tokens_left = tl.minimum(n_tokens - t0, BLOCK_T).to(tl.int32)
    mask2 = (tokens < tokens_left)[:, None] & (lanes < hc)[None, :]
    m3 = tokens[:, None, None]
    rows3 = lanes[None, :, None]
    cols3 = lanes[None, None, :]
    mask3 = token_ok[:, None, None] & lane_ok[None, :, None] & lane_ok[None, None, :]
    return t0, m2, mask2, lanes, m3, rows3, cols3, mask3


@triton.jit
def _res_softmax(MIX, BIAS, alpha_res, t0, m3, rows3, cols3, mask3, hc, n_mix):
    """Row softmax of the residual logits ``alpha_res * mix_res + b_res``, 0 on padded lanes."""
    res = 2 * hc + rows3 * hc + cols3
    mix = tl.load(MIX + t0 * n_mix + m3 * n_mix + res, mask=mask3, other=0.0)
    bias = tl.load(BIAS + res, mask=(rows3 < hc) & (cols3 < hc), other=0.0).to(tl.float32)
    logits = tl.where(mask3, mix * alpha_res + bias, _PAD_LOGIT)
    exps = tl.exp(logits - tl.max(logits, axis=2)[:, :, None])
    exps = tl.where(mask3, exps, 0.0)
    return exps / tl.maximum(tl.sum(exps, axis=2)[:, :, None], 1e-30, propagate_nan=tl.PropagateNan.ALL)


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
    n_tiles,
    hc,
    pre_eps,
    sinkhorn_eps,
    post_mult,
    TMAX: tl.constexpr,
    STORE_HIST: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_HC: tl.constexpr,
):
    for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        t0, m2, mask2, lanes, m3, rows3, cols3, mask3 = _token_tiles(
            tile, tl.program_id(0), n_tokens, hc, BLOCK_T, BLOCK_HC
        )
        n_mix = hc * hc + 2 * hc
        alpha_pre = tl.load(ALPHAS)
        alpha_post = tl.load(ALPHAS + 1)
        alpha_res = tl.load(ALPHAS + 2)
        # The two sigmoid maps (columns [0, HC) and [HC, 2 HC) of mix).
        mix_pre = tl.load(MIX + t0 * n_mix + m2 * n_mix + lanes[None, :], mask=mask2, care_padding=False)
        mix_post = tl.load(MIX + t0 * n_mix + m2 * n_mix + hc + lanes[None, :], mask=mask2, care_padding=False)
        b_pre = tl.load(BIAS + lanes, mask=lanes < hc, other=0.0).to(tl.float32)
        b_post = tl.load(BIAS + hc + lanes, mask=lanes < hc, other=0.0).to(tl.float32)
        tl.store(
            H_PRE + t0 * hc + m2 * hc + lanes[None, :],
            tl.sigmoid(mix_pre * alpha_pre + b_pre[None, :]) + pre_eps,
            mask=mask2,
        )
        h_post = tl.sigmoid(mix_post * alpha_post + b_post[None, :]) * post_mult
        tl.store(H_POST + t0 * hc + m2 * hc + lanes[None, :], h_post, mask=mask2)
        # Sinkhorn: the softmax step with its column normalisation, then TMAX - 1 row/column pairs.
        mat = tl.where(
            mask3, _res_softmax(MIX, BIAS, alpha_res, t0, m3, rows3, cols3, mask3, hc, n_mix) + sinkhorn_eps, 0.0
        )
        mat = mat / (tl.sum(mat, axis=1)[:, None, :] + sinkhorn_eps)
        square = hc * hc
        hist = HIST + t0 * ((TMAX - 1) * square) + m3 * ((TMAX - 1) * square) + rows3 * hc + cols3
        for step in range(1, TMAX):
            if STORE_HIST:
                tl.store(hist + (step - 1) * square, mat, mask=mask3)
            mat = mat / (tl.sum(mat, axis=2)[:, :, None] + sinkhorn_eps)
            mat = mat / (tl.sum(mat, axis=1)[:, None, :] + sinkhorn_eps)
        tl.store(H_RES + t0 * square + m3 * square + rows3 * hc + cols3, mat, mask=mask3)


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
    n_tiles,
    hc,
    sinkhorn_eps,
    post_mult,
    TMAX: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_HC: tl.constexpr,
):
    # D_LOGITS: (tokens, HC * HC + 2 * HC) float32, the gradient of each logit (before its alpha).
    for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        t0, m2, mask2, lanes, m3, rows3, cols3, mask3 = _token_tiles(
            tile, tl.program_id(0), n_tokens, hc, BLOCK_T, BLOCK_HC
        )
        n_mix = hc * hc + 2 * hc
        alpha_pre = tl.load(ALPHAS)
        alpha_post = tl.load(ALPHAS + 1)
        alpha_res = tl.load(ALPHAS + 2)
        mix_pre = tl.load(MIX + t0 * n_mix + m2 * n_mix + lanes[None, :], mask=mask2, care_padding=False)
        mix_post = tl.load(MIX + t0 * n_mix + m2 * n_mix + hc + lanes[None, :], mask=mask2, care_padding=False)
        b_pre = tl.load(BIAS + lanes, mask=lanes < hc, other=0.0).to(tl.float32)
        b_post = tl.load(BIAS + hc + lanes, mask=lanes < hc, other=0.0).to(tl.float32)
        s_pre = tl.sigmoid(mix_pre * alpha_pre + b_pre[None, :])
        s_post = tl.sigmoid(mix_post * alpha_post + b_post[None, :])
        d_pre = tl.load(D_PRE + t0 * hc + m2 * hc + lanes[None, :], mask=mask2, care_padding=False)
        d_post = tl.load(D_POST + t0 * hc + m2 * hc + lanes[None, :], mask=mask2, care_padding=False)
        tl.store(D_LOGITS + t0 * n_mix + m2 * n_mix + lanes[None, :], d_pre * s_pre * (1.0 - s_pre), mask=mask2)
        d_post_logits = d_post * post_mult * s_post * (1.0 - s_post)
        tl.store(D_LOGITS + t0 * n_mix + m2 * n_mix + hc + lanes[None, :], d_post_logits, mask=mask2)
        # Sinkhorn in reverse: the iterations TMAX - 1 .. 1, each from the matrix that entered it.
        square = hc * hc
        grad = tl.load(D_RES + t0 * square + m3 * square + rows3 * hc + cols3, mask=mask3, other=0.0)
        hist = HIST + t0 * ((TMAX - 1) * square) + m3 * ((TMAX - 1) * square) + rows3 * hc + cols3
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
        probs = _res_softmax(MIX, BIAS, alpha_res, t0, m3, rows3, cols3, mask3, hc, n_mix)
        shifted = tl.where(mask3, probs + sinkhorn_eps, 0.0)
        col_sum = tl.sum(shifted, axis=1)[:, None, :] + sinkhorn_eps
        d_shifted = (grad - tl.sum(grad * (shifted / col_sum), axis=1)[:, None, :]) / col_sum
        d_logits = probs * (d_shifted - tl.sum(d_shifted * probs, axis=2)[:, :, None])
        tl.store(D_LOGITS + t0 * n_mix + m3 * n_mix + 2 * hc + rows3 * hc + cols3, d_logits, mask=mask3)


def _tiles(direction: str, block_t: int, block_hc: int) -> tuple[Tile, ...]:
    # The fp32 tiles live at once: the (BLOCK_T, HC^2) matrices (loaded logits and bias, the
    # softmax, the running matrix and, backward, the gradient and the history row being read:
    # DMA-filled ones double-buffered), and the (BLOCK_T, HC) pre/post tiles.
    square, lanes = block_hc * block_hc, block_hc
    matrices = 5 if direction == "forward" else 8
    return (
        Tile("mix_res", block_t, square, 4, buffers=2),
        Tile("bias_res", 1, square, 4, buffers=2),
        Tile("sinkhorn", block_t * matrices, square, 4),
        Tile("pre_post", 6, block_t * lanes, 4, buffers=2),
    )


def plan_mhc(direction: str, hc: int, n_tokens: int, hw: hardware.Hardware) -> tuple[KernelPlan, int, int]:
    """(plan, BLOCK_T, BLOCK_HC): the most tokens per tile (a power of two, at most
    MHC_TILE_ELEMENTS lanes) whose tiles fit the UB budget; one program per vector core."""
    block_hc = triton.next_power_of_2(hc)
    block_t = max(1, hardware.MHC_TILE_ELEMENTS // (block_hc * block_hc))
    block_t = min(block_t, triton.next_power_of_2(max(n_tokens, 1)))
    while block_t > 1 and sum(t.nbytes for t in _tiles(direction, block_t, block_hc)) > hw.ub_budget:
        block_t //= 2
    n_tiles = triton.cdiv(max(n_tokens, 1), block_t)
    programs = max(1, min(hw.vector_cores, n_tiles))
    plan = KernelPlan(f"_mhc_coeffs_{direction}_kernel", (programs,), _tiles(direction, block_t, block_hc))
    return plan, block_t, block_hc


def sinkhorn_forward(mix, b, alphas, hc, tmax, pre_eps, sinkhorn_eps, post_mult, store_hist):
    """h_pre, h_post, h_res (float32) and the Sinkhorn history (None unless ``store_hist``)."""
    n_tokens = mix.shape[0]
    h_pre = torch.empty((n_tokens, hc), dtype=torch.float32, device=mix.device)
    h_post = torch.empty_like(h_pre)
    h_res = torch.empty((n_tokens, hc, hc), dtype=torch.float32, device=mix.device)
    store_hist = store_hist and tmax > 1
    hist = torch.empty((n_tokens, tmax - 1, hc, hc) if store_hist else (1,), dtype=torch.float32, device=mix.device)
    if n_tokens:
        hw = hardware.current(mix.device)
        plan, block_t, block_hc = plan_mhc("forward", hc, n_tokens, hw)
        launch(
            _mhc_coeffs_forward_kernel,
            plan,
            hw,
            mix,
            b,
            alphas,
            h_pre,
            h_post,
            h_res,
            hist,
            n_tokens,
            triton.cdiv(n_tokens, block_t),
            hc,
            pre_eps,
            sinkhorn_eps,
            post_mult,
            TMAX=tmax,
            STORE_HIST=store_hist,
            BLOCK_T=block_t,
            BLOCK_HC=block_hc,
        )
    return h_pre, h_post, h_res, (hist if store_hist else None)


def sinkhorn_backward(mix, b, alphas, hist, d_pre, d_post, d_res, hc, tmax, sinkhorn_eps, post_mult):
    """The gradient of every logit (tokens, HC * HC + 2 * HC), float32."""
    n_tokens = mix.shape[0]
    d_logits = torch.empty_like(mix)
    if n_tokens:
        hw = hardware.current(mix.device)
        plan, block_t, block_hc = plan_mhc("backward", hc, n_tokens, hw)
        launch(
            _mhc_coeffs_backward_kernel,
            plan,
            hw,
            mix,
            b,
            alphas,
            hist if hist is not None else mix,
            d_pre,
            d_post,
            d_res,
            d_logits,
            n_tokens,
            triton.cdiv(n_tokens, block_t),
            hc,
            sinkhorn_eps,
            post_mult,
            TMAX=tmax,
            BLOCK_T=block_t,
            BLOCK_HC=block_hc,
        )
    return d_logits


def projection_forward(v, phi, rms_eps):
    """(mix (tokens, M), rstd (tokens,)) float32 from v (tokens, K) and phi (K, M), by the cube
    cores: the projection in float32 (no rounding of the logits)."""
    v = v.float()
    rstd = torch.rsqrt(v.square().mean(-1) + rms_eps)
    return (v @ phi.float()).mul_(rstd[:, None]).contiguous(), rstd


def projection_backward(v, phi, d_proj, coef):
    """(grad_v in v's dtype, grad_phi float32): ``d_proj @ phi^T - v * coef``, ``v^T @ d_proj``."""
    v32 = v.float()
    d_v = d_proj @ phi.float().T
    d_v -= v32 * coef[:, None]
    return d_v.to(v.dtype), v32.T @ d_proj


# -- the pre-mix and the post + residual mix -----------------------------------------------------


@triton.jit
def _mix_tokens(tile, pid, n_tokens, hc, BLOCK_T: tl.constexpr, BLOCK_HC: tl.constexpr):
    """``(t0, m2, token_mask, streams, map_mask)``: the tile's first token (an int64 scalar base),
    its token indices (a (BLOCK_T, 1) column, int32), their mask, the stream lanes and the
    (BLOCK_T, BLOCK_HC) mask of the per-token maps. The masks only mask loads and stores (no
    ``tl.where``): integer compares against int32 bounds, which the compiler turns into DMA
    lengths (see ``_token_tiles``). ``pid * 0 + tile``: the interpreter's loop variable is a
    Python int."""
    t0 = (pid * 0 + tile).to(tl.int64) * BLOCK_T
    tokens = tl.arange(0, BLOCK_T)
    streams = tl.arange(0, BLOCK_HC)
    token_mask = (tokens < tl.minimum(n_tokens - t0, BLOCK_T).to(tl.int32))[:, None]
    return t0, tokens[:, None], token_mask, streams, token_mask & (streams < hc)[None, :]


@triton.jit
def _mhc_pre_forward_kernel(
    X,
    H_PRE,
    OUT,
    n_tokens,
    n_tiles,
    hc,
    n_channels,
    pitch,
    BLOCK_T: tl.constexpr,
    BLOCK_HC: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    # X: (tokens, HC, pitch), H_PRE: (tokens, HC), OUT: (tokens, pitch) in x's dtype; the first
    # n_channels of each row are the channels.
    for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        t0, m2, token_mask, streams, map_mask = _mix_tokens(tile, tl.program_id(0), n_tokens, hc, BLOCK_T, BLOCK_HC)
        maps = H_PRE + t0 * hc + m2 * hc + streams[None, :]
        h_pre = tl.load(maps, mask=map_mask, other=0.0).to(tl.float32)
        x_rows = X + t0 * (hc * pitch) + ((m2 * hc + streams[None, :]) * pitch)[:, :, None]
        out_rows = OUT + t0 * pitch + m2 * pitch
        for c0 in range(0, n_channels, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            col_mask = cols < n_channels
            x_mask = map_mask[:, :, None] & col_mask[None, None, :]
            x = tl.load(x_rows + cols[None, None, :], mask=x_mask, other=0.0).to(tl.float32)
            x_in = tl.sum(x * h_pre[:, :, None], axis=1)
            tl.store(out_rows + cols[None, :], x_in.to(OUT.dtype.element_ty), mask=token_mask & col_mask[None, :])


@triton.jit
def _mhc_pre_backward_kernel(
    X,
    H_PRE,
    D_OUT,
    D_X,
    D_H_PRE,
    n_tokens,
    n_tiles,
    hc,
    n_channels,
    pitch,
    BLOCK_T: tl.constexpr,
    BLOCK_HC: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    # D_X: (tokens, HC, pitch) in x's dtype; D_H_PRE: (tokens, HC) float32, the sums over the channels.
    for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        t0, m2, token_mask, streams, map_mask = _mix_tokens(tile, tl.program_id(0), n_tokens, hc, BLOCK_T, BLOCK_HC)
        maps = t0 * hc + m2 * hc + streams[None, :]
        h_pre = tl.load(H_PRE + maps, mask=map_mask, care_padding=False).to(tl.float32)
        stream_rows = t0 * (hc * pitch) + ((m2 * hc + streams[None, :]) * pitch)[:, :, None]
        out_rows = D_OUT + t0 * pitch + m2 * pitch
        d_h_pre = tl.zeros((BLOCK_T, BLOCK_HC), dtype=tl.float32)
        for c0 in range(0, n_channels, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            col_mask = cols < n_channels
            x_mask = map_mask[:, :, None] & col_mask[None, None, :]
            d_out = tl.load(out_rows + cols[None, :], mask=token_mask & col_mask[None, :], other=0.0)
            d_out = d_out.to(tl.float32)[:, None, :]
            x = tl.load(X + stream_rows + cols[None, None, :], mask=x_mask, other=0.0).to(tl.float32)
            d_x = d_out * h_pre[:, :, None]
            tl.store(D_X + stream_rows + cols[None, None, :], d_x.to(D_X.dtype.element_ty), mask=x_mask)
            d_h_pre += tl.sum(d_out * x, axis=2)
        tl.store(D_H_PRE + maps, d_h_pre, mask=map_mask)


@triton.jit
def _mhc_post_res_forward_kernel(
    X,
    F_OUT,
    H_POST,
    H_RES,
    OUT,
    n_tokens,
    n_tiles,
    hc,
    n_channels,
    pitch,
    BLOCK_T: tl.constexpr,
    BLOCK_HC: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    # X, OUT: (tokens, HC, pitch), OUT in x's dtype; F_OUT: (tokens, pitch); H_POST: (tokens, HC);
    # H_RES: (tokens, HC, HC), rows the output stream. The mix is a (tokens, out stream, in
    # stream, channels) tile summed over the in streams.
    for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        t0, m2, token_mask, streams, map_mask = _mix_tokens(tile, tl.program_id(0), n_tokens, hc, BLOCK_T, BLOCK_HC)
        h_post = tl.load(H_POST + t0 * hc + m2 * hc + streams[None, :], mask=map_mask, care_padding=False).to(
            tl.float32
        )
        res_mask = map_mask[:, :, None] & (streams < hc)[None, None, :]
        res = t0 * (hc * hc) + ((m2 * hc + streams[None, :]) * hc)[:, :, None] + streams[None, None, :]
        h_res = tl.load(H_RES + res, mask=res_mask, other=0.0).to(tl.float32)
        stream_rows = t0 * (hc * pitch) + ((m2 * hc + streams[None, :]) * pitch)[:, :, None]
        f_rows = F_OUT + t0 * pitch + m2 * pitch
        for c0 in range(0, n_channels, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            col_mask = cols < n_channels
            x_mask = map_mask[:, :, None] & col_mask[None, None, :]
            x = tl.load(X + stream_rows + cols[None, None, :], mask=x_mask, other=0.0).to(tl.float32)
            f_out = tl.load(f_rows + cols[None, :], mask=token_mask & col_mask[None, :], care_padding=False)
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
    n_tiles,
    hc,
    n_channels,
    pitch,
    BLOCK_T: tl.constexpr,
    BLOCK_HC: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    # D_X, D_F_OUT in their inputs' dtypes; D_H_POST, D_H_RES float32, the sums over the channels.
    for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        t0, m2, token_mask, streams, map_mask = _mix_tokens(tile, tl.program_id(0), n_tokens, hc, BLOCK_T, BLOCK_HC)
        maps = t0 * hc + m2 * hc + streams[None, :]
        h_post = tl.load(H_POST + maps, mask=map_mask, other=0.0).to(tl.float32)
        res_mask = map_mask[:, :, None] & (streams < hc)[None, None, :]
        res = t0 * (hc * hc) + ((m2 * hc + streams[None, :]) * hc)[:, :, None] + streams[None, None, :]
        h_res = tl.load(H_RES + res, mask=res_mask, other=0.0).to(tl.float32)
        stream_rows = t0 * (hc * pitch) + ((m2 * hc + streams[None, :]) * pitch)[:, :, None]
        f_rows = t0 * pitch + m2 * pitch
        d_h_post = tl.zeros((BLOCK_T, BLOCK_HC), dtype=tl.float32)
        d_h_res = tl.zeros((BLOCK_T, BLOCK_HC, BLOCK_HC), dtype=tl.float32)
        for c0 in range(0, n_channels, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            col_mask = cols < n_channels
            x_mask = map_mask[:, :, None] & col_mask[None, None, :]
            row_mask = token_mask & col_mask[None, :]
            d_out = tl.load(D_OUT + stream_rows + cols[None, None, :], mask=x_mask, other=0.0).to(tl.float32)
            x = tl.load(X + stream_rows + cols[None, None, :], mask=x_mask, other=0.0).to(tl.float32)
            f_out = tl.load(F_OUT + f_rows + cols[None, :], mask=row_mask, other=0.0).to(tl.float32)
            d_f_out = tl.sum(d_out * h_post[:, :, None], axis=1)
            tl.store(D_F_OUT + f_rows + cols[None, :], d_f_out.to(D_F_OUT.dtype.element_ty), mask=row_mask)
            d_h_post += tl.sum(d_out * f_out[:, None, :], axis=2)
            # (tokens, out stream, in stream, channels): grad_x sums the out streams, grad_h_res the channels.
            d_x = tl.sum(h_res[:, :, :, None] * d_out[:, :, None, :], axis=1)
            tl.store(D_X + stream_rows + cols[None, None, :], d_x.to(D_X.dtype.element_ty), mask=x_mask)
            d_h_res += tl.sum(d_out[:, :, None, :] * x[:, None, :, :], axis=3)
        tl.store(D_H_POST + maps, d_h_post, mask=map_mask)
        tl.store(D_H_RES + res, d_h_res, mask=res_mask)


def _mix_tiles(name: str, direction: str, block_t: int, block_hc: int, block_c: int) -> tuple[Tile, ...]:
    # The fp32 tiles live at once (DMA-filled or drained ones double-buffered): the stream tiles
    # (BLOCK_T * BLOCK_HC rows of BLOCK_C: x and, backward, the upstream gradient and grad_x, plus
    # the products), the single-stream rows (the pre-mix's output or upstream gradient, f_out and
    # grad_f_out), the post-mix's (tokens, HC, HC, channels) products, and the per-token maps with
    # their gradient accumulators.
    streams, rows = block_t * block_hc, block_t
    square = block_t * block_hc * block_hc
    if name == "pre":
        stream_tiles, row_tiles, square_tiles = (3, 3, 0) if direction == "forward" else (5, 2, 0)
    else:
        stream_tiles, row_tiles, square_tiles = (5, 2, 1) if direction == "forward" else (8, 4, 2)
    tiles = [
        Tile("streams", streams * stream_tiles, block_c, 4, buffers=2),
        Tile("rows", rows * row_tiles, block_c, 4, buffers=2),
        Tile("maps", 4, square, 4),
    ]
    if square_tiles:
        tiles.append(Tile("stream_products", square * square_tiles, block_c, 4))
    return tuple(tiles)


def plan_mix(
    name: str, direction: str, hc: int, n_tokens: int, n_channels: int, pitch_bytes: int, hw: hardware.Hardware
) -> tuple[KernelPlan, int, int, int]:
    """(plan, BLOCK_T, BLOCK_HC, BLOCK_C) of mix ``name`` ("pre" or "post_res"): the largest tile
    within MHC_MIX_TILE_ELEMENTS (times HC again for the post-mix's matrix), channels first, then
    tokens halved, then channels, until the live tiles fit the UB budget; one program per vector
    core at most. ``pitch_bytes``: the smallest row pitch of the channel tensors (32-byte aligned)."""
    block_hc = triton.next_power_of_2(hc)
    lanes = block_hc * block_hc if name == "post_res" else block_hc
    block_c = min(
        triton.next_power_of_2(max(n_channels, 1)),
        hardware.MHC_MIX_BLOCK_C,
        max(1, hardware.MHC_MIX_TILE_ELEMENTS // lanes),
    )
    block_t = max(1, hardware.MHC_MIX_TILE_ELEMENTS // (lanes * block_c))
    block_t = min(block_t, triton.next_power_of_2(max(n_tokens, 1)))
    while sum(t.nbytes for t in _mix_tiles(name, direction, block_t, block_hc, block_c)) > hw.ub_budget:
        if block_t > 1:
            block_t //= 2
        elif block_c > 1:
            block_c //= 2
        else:
            break
    n_tiles = triton.cdiv(max(n_tokens, 1), block_t)
    programs = max(1, min(hw.vector_cores, n_tiles))
    plan = KernelPlan(
        f"_mhc_{name}_{direction}_kernel",
        (programs,),
        _mix_tiles(name, direction, block_t, block_hc, block_c),
        block_rows=block_t * hc,
        row_pitches=(pitch_bytes,),
        # In-tile offsets: token index x HC x pitch, HC x HC for the post-mix's matrices.
        int32_extent=block_t * hc * max(pitch_bytes, 1),
    )
    return plan, block_t, block_hc, block_c


def _launch_mix(kernel, name, direction, x, tensors, pitch, channel_tensors):
    # channel_tensors: those whose rows are ``pitch`` elements apart (x's, f_out's and their gradients).
    n_tokens, hc, n_channels = x.shape[0], x.shape[1], x.shape[2]
    hw = hardware.current(x.device)
    pitch_bytes = pitch * min(t.element_size() for t in channel_tensors)
    plan, block_t, block_hc, block_c = plan_mix(name, direction, hc, n_tokens, n_channels, pitch_bytes, hw)
    launch(
        kernel, plan, hw, *tensors, n_tokens, triton.cdiv(n_tokens, block_t), hc, n_channels, pitch,
        BLOCK_T=block_t, BLOCK_HC=block_hc, BLOCK_C=block_c,
    )  # fmt: skip


def _pitched(t: torch.Tensor, pitch: int) -> torch.Tensor:
    """``t`` (..., C) as a view of rows ``pitch`` elements apart (a padded copy where they are not)."""
    if t.shape[-1] == pitch and t.is_contiguous():
        return t
    padded = torch.empty((*t.shape[:-1], pitch), dtype=t.dtype, device=t.device)
    padded[..., : t.shape[-1]] = t
    return padded


def _pitch(n_channels: int, *dtypes: torch.dtype) -> int:
    # Rows of channels start 32 bytes apart at least: C itself where every dtype aligns it, else C
    # padded to a multiple of 32 bytes of the narrowest dtype.
    step = max(hardware.ALIGN_BYTES // torch.empty((), dtype=dt).element_size() for dt in dtypes)
    return n_channels if n_channels % step == 0 else triton.cdiv(n_channels, step) * step


def pre_forward(x, h_pre, pitch):
    """x_in (tokens, pitch) in x's dtype from x (tokens, HC, pitch), h_pre (tokens, HC)."""
    n_tokens, n_channels = x.shape[0], x.shape[2]
    out = torch.empty((n_tokens, pitch), dtype=x.dtype, device=x.device)
    if n_tokens and n_channels:
        _launch_mix(_mhc_pre_forward_kernel, "pre", "forward", x, (x, h_pre, out), pitch, (x,))
    return out


def pre_backward(x, h_pre, d_out, pitch):
    """(grad_x (tokens, HC, pitch) in x's dtype, grad_h_pre float32)."""
    n_tokens, hc, n_channels = x.shape[0], x.shape[1], x.shape[2]
    d_x = torch.empty((n_tokens, hc, pitch), dtype=x.dtype, device=x.device)
    d_h_pre = torch.zeros((n_tokens, hc), dtype=torch.float32, device=x.device)
    if n_tokens and n_channels:
        tensors = (x, h_pre, d_out, d_x, d_h_pre)
        _launch_mix(_mhc_pre_backward_kernel, "pre", "backward", x, tensors, pitch, (x,))
    return d_x, d_h_pre


def post_res_forward(x, f_out, h_post, h_res, pitch):
    """x_out (tokens, HC, pitch) in x's dtype."""
    n_tokens, hc, n_channels = x.shape[0], x.shape[1], x.shape[2]
    out = torch.empty((n_tokens, hc, pitch), dtype=x.dtype, device=x.device)
    if n_tokens and n_channels:
        tensors = (x, f_out, h_post, h_res, out)
        _launch_mix(_mhc_post_res_forward_kernel, "post_res", "forward", x, tensors, pitch, (x, f_out))
    return out


def post_res_backward(x, f_out, h_post, h_res, d_out, pitch):
    """(grad_x, grad_f_out) pitched, in their inputs' dtypes; (grad_h_post, grad_h_res) float32."""
    n_tokens, hc, n_channels = x.shape[0], x.shape[1], x.shape[2]
    d_x = torch.empty((n_tokens, hc, pitch), dtype=x.dtype, device=x.device)
    d_f_out = torch.empty((n_tokens, pitch), dtype=f_out.dtype, device=x.device)
    d_h_post = torch.zeros((n_tokens, hc), dtype=torch.float32, device=x.device)
    d_h_res = torch.zeros((n_tokens, hc, hc), dtype=torch.float32, device=x.device)
    if n_tokens and n_channels:
        tensors = (x, f_out, h_post, h_res, d_out, d_x, d_f_out, d_h_post, d_h_res)
        _launch_mix(_mhc_post_res_backward_kernel, "post_res", "backward", x, tensors, pitch, (x, f_out))
    return d_x, d_f_out, d_h_post, d_h_res


def _channels(t: torch.Tensor, n_channels: int) -> torch.Tensor:
    # A pitched result back to its n_channels (a copy only where the rows were padded).
    return t if t.shape[-1] == n_channels else t[..., :n_channels].contiguous()


class MHCKernels:
    """`liger_core.drivers.mhc.MHCKernels` on this module's kernels: the mixes take their stream
    tensors with rows `_pitch` elements apart, a padded copy (kept for backward) where needed."""

    protocol = mhc_driver.PROTOCOL
    projection_forward = staticmethod(projection_forward)
    projection_backward = staticmethod(projection_backward)
    sinkhorn_forward = staticmethod(sinkhorn_forward)
    sinkhorn_backward = staticmethod(sinkhorn_backward)

    @staticmethod
    def pre_forward(x, h_pre):
        n_channels = x.shape[-1]
        pitch = _pitch(n_channels, x.dtype)
        x_pitched = _pitched(x, pitch)
        out = pre_forward(x_pitched[..., :n_channels], h_pre, pitch)
        return _channels(out, n_channels), x_pitched

    @staticmethod
    def pre_backward(x_pitched, h_pre, d_out):
        n_channels, pitch = d_out.shape[-1], x_pitched.shape[-1]
        d_out = _pitched(d_out.to(x_pitched.dtype), pitch)
        d_x, d_h_pre = pre_backward(x_pitched[..., :n_channels], h_pre, d_out, pitch)
        return _channels(d_x, n_channels), d_h_pre

    @staticmethod
    def post_res_forward(x, f_out, h_post, h_res):
        n_channels = x.shape[-1]
        pitch = _pitch(n_channels, x.dtype, f_out.dtype)
        x_pitched, f_pitched = _pitched(x, pitch), _pitched(f_out, pitch)
        out = post_res_forward(x_pitched[..., :n_channels], f_pitched, h_post, h_res, pitch)
        return _channels(out, n_channels), x_pitched, f_pitched

    @staticmethod
    def post_res_backward(x_pitched, f_pitched, h_post, h_res, d_out):
        n_channels, pitch = d_out.shape[-1], x_pitched.shape[-1]
        d_out = _pitched(d_out.to(x_pitched.dtype), pitch)
        d_x, d_f_out, d_h_post, d_h_res = post_res_backward(
            x_pitched[..., :n_channels], f_pitched, h_post, h_res, d_out, pitch
        )
        return _channels(d_x, n_channels), _channels(d_f_out, n_channels), d_h_post, d_h_res


_functions = mhc_driver.autograd_functions(MHCKernels(), __name__)
LigerMHCCoeffsFunction = implements("mhc_coeffs")(_functions["mhc_coeffs"])
LigerMHCPreFunction = implements("mhc_pre")(_functions["mhc_pre"])
LigerMHCPostResFunction = implements("mhc_post_res")(_functions["mhc_post_res"])
