"""Fused linear scaled cross-entropy for NVIDIA GPUs: per-token NLL and entropy of
``softmax(input @ W^T / temperature)``, token chunks, tensor-core GEMMs, in-place gradient; the kernels, chunk
loop and the kernel adapter of `liger_core.drivers.fused_linear_scaled_cross_entropy`.

Per chunk of tokens (fused_linear_cross_entropy's chunk plan, `_tiling.plan_chunks`):
``logits = x_c @ W^T`` (cuBLAS, input dtype, into one reused buffer), then one program per row
streams the row once with a running max, sum of exponentials and sum of ``exp(z - max) z``
(``z = logits / T``), giving ``lse``, ``nll = lse - z_y`` and ``entropy = lse - sum p z``.

Both outputs are per token, so each row's upstream gradients must weight its logits' gradient
before the sum into grad_W: forward keeps only the per-row lse and entropy (fp32), and backward
recomputes each chunk's logits, overwrites them with
``(grad_nll (p - [v == y]) - grad_entropy p (z - lse + entropy)) / T`` on (row, vocabulary
tile) programs, then ``grad_x_c = G @ W`` and ``grad_W += G^T @ x_c``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import fused_linear_scaled_cross_entropy as flsce_driver
from liger_core.ops.fused_linear_scaled_cross_entropy import OP_NAME
from liger_ops_cuda._cross_entropy import plan_vocab_rows, target_stats
from liger_ops_cuda._jit import row_offset, vocab_tile
from liger_ops_cuda._tiling import accumulate_weight_grad, plan_chunks
from liger_ops_cuda.divergence import plan_divergence


@triton.jit
def _fused_linear_scaled_cross_entropy_forward_kernel(
    X, x_row_stride, Y, NLL, ENTROPY, LSE, n_cols, inv_temperature, ignore_index, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # One program per row, one pass: running max m, s = sum e^(z - m) and t = sum e^(z - m) z.
    row = tl.program_id(0)
    y = tl.load(Y + row)
    if y == ignore_index:
        tl.store(NLL + row, 0.0)
        tl.store(ENTROPY + row, 0.0)
        tl.store(LSE + row, 0.0)
        return
    x_row = X + row_offset(row, x_row_stride)
    offs = tl.arange(0, BLOCK_N)
    m = float("-inf")
    s = 0.0
    t = 0.0
    for start in range(0, n_cols, BLOCK_N):
        cols = start + offs
        mask = cols < n_cols
        z = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32) * inv_temperature
        m_new = tl.maximum(m, tl.max(tl.where(mask, z, float("-inf")), axis=0))
        rescale = tl.exp(m - m_new)
        # Masked lanes weigh 0 (not e^(0 - m) times a made-up z).
        e = tl.where(mask, tl.exp(z - m_new), 0.0)
        s = s * rescale + tl.sum(e, axis=0)
        t = t * rescale + tl.sum(e * z, axis=0)
        m = m_new
    lse = m + tl.log(s)
    # An out-of-range target (reported by the caller after the launch) reads nothing.
    z_y = tl.load(x_row + y, mask=(y >= 0) & (y < n_cols), other=0.0).to(tl.float32) * inv_temperature
    tl.store(NLL + row, lse - z_y)
    tl.store(ENTROPY + row, lse - t / s)
    tl.store(LSE + row, lse)


@triton.jit
def _fused_linear_scaled_cross_entropy_backward_kernel(
    X, x_row_stride, Y, LSE, ENTROPY, UP_NLL, UP_ENTROPY, n_cols, inv_temperature, ignore_index,
    HAS_UP_NLL: tl.constexpr, HAS_UP_ENTROPY: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # The logits' gradient written over the logits: each program reads its tile before writing it.
    row, tile, cols, mask = vocab_tile(n_cols, BLOCK_N)
    x_row = X + row_offset(row, x_row_stride)
    y = tl.load(Y + row)
    if y == ignore_index:
        tl.store(x_row + cols, tl.zeros((BLOCK_N,), tl.float32).to(X.dtype.element_ty), mask=mask)
        return
    lse = tl.load(LSE + row)
    z = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32) * inv_temperature
    p = tl.exp(z - lse)
    grad = tl.zeros((BLOCK_N,), tl.float32)
    if HAS_UP_NLL:
        grad = tl.load(UP_NLL + row) * tl.where(cols == y, p - 1.0, p)
    if HAS_UP_ENTROPY:
        grad -= tl.load(UP_ENTROPY + row) * p * (z - lse + tl.load(ENTROPY + row))
    tl.store(x_row + cols, (grad * inv_temperature).to(X.dtype.element_ty), mask=mask)


def fused_linear_scaled_cross_entropy_forward(logits, target, inv_temperature, ignore_index, nll, entropy, lse):
    """Per row of a chunk's ``(rows, vocab)`` logits: nll, entropy and lse (fp32) into the given rows."""
    n_rows, n_cols = logits.shape
    block, warps = plan_vocab_rows(n_cols)
    _fused_linear_scaled_cross_entropy_forward_kernel[(n_rows,)](
        logits, logits.stride(0), target, nll, entropy, lse, n_cols, inv_temperature, ignore_index,
        BLOCK_N=block, num_warps=warps,
    )  # fmt: skip


def fused_linear_scaled_cross_entropy_backward(
    logits, target, lse, entropy, up_nll, up_entropy, inv_temperature, ignore_index
):  # fmt: skip
    """Overwrite a chunk's logits with d(loss)/d(logits); ``up_nll`` / ``up_entropy`` the chunk
    rows' incoming gradients (None: that output feeds nothing)."""
    n_rows, n_cols = logits.shape
    block, n_tiles, warps = plan_divergence(n_cols)
    _fused_linear_scaled_cross_entropy_backward_kernel[(n_rows, n_tiles)](
        logits, logits.stride(0), target, lse, entropy, up_nll if up_nll is not None else lse,
        up_entropy if up_entropy is not None else lse, n_cols, inv_temperature, ignore_index,
        HAS_UP_NLL=up_nll is not None, HAS_UP_ENTROPY=up_entropy is not None, BLOCK_N=block, num_warps=warps,
    )  # fmt: skip


def _chunks(x, w):
    """``(start, end, logits)`` per token chunk, the logits computed into one reused buffer."""
    n, vocab = x.shape[0], w.shape[0]
    c = plan_chunks(n, vocab, bytes_per_logit=x.element_size())  # one reused buffer, the input dtype
    buf = torch.empty((min(c, n), vocab), dtype=x.dtype, device=x.device) if n else None
    for s in range(0, n, c):
        e = min(s + c, n)
        logits = buf[: e - s]
        torch.mm(x[s:e], w.t(), out=logits)
        yield s, e, logits


class FusedLinearScaledCrossEntropyKernels:
    """`liger_core.drivers.fused_linear_scaled_cross_entropy.FusedLinearScaledCrossEntropyKernels`:
    this module's kernels over `_chunks`."""

    protocol = flsce_driver.PROTOCOL

    @staticmethod
    def forward(x, w, target, inv_t, ignore_index):
        _, _, check = target_stats(OP_NAME, target, ignore_index, w.shape[0], None, "sum")
        n = x.shape[0]
        nll, entropy, lse = (torch.empty(n, dtype=torch.float32, device=x.device) for _ in range(3))
        for s, e, logits in _chunks(x, w):
            fused_linear_scaled_cross_entropy_forward(
                logits, target[s:e], inv_t, ignore_index, nll[s:e], entropy[s:e], lse[s:e]
            )
        check.raise_if_bad()
        return nll, entropy, lse, target

    @staticmethod
    def backward(x, w, target, lse, entropy, up_nll, up_entropy, inv_t, ignore_index, need_x, need_w, w_dtype):
        gx = torch.empty_like(x) if need_x else None
        gw = torch.empty(w.shape, dtype=w_dtype, device=x.device) if need_w else None
        first = True
        for s, e, logits in _chunks(x, w):
            fused_linear_scaled_cross_entropy_backward(
                logits, target[s:e], lse[s:e], entropy[s:e], None if up_nll is None else up_nll[s:e],
                None if up_entropy is None else up_entropy[s:e], inv_t, ignore_index,
            )  # fmt: skip
            # `logits` now holds d(loss)/d(logits) for the chunk.
            if gx is not None:
                torch.mm(logits, w, out=gx[s:e])
            if gw is not None:
                accumulate_weight_grad(gw, logits, x[s:e], first)
            first = False
        if gw is not None and first:
            gw.zero_()  # no tokens at all
        return gx, gw


LigerFusedLinearScaledCrossEntropyFunction = implements("fused_linear_scaled_cross_entropy")(
    flsce_driver.autograd_function(FusedLinearScaledCrossEntropyKernels(), __name__)
)
