"""Fused linear scaled cross-entropy for Intel GPUs: per-token NLL and entropy of
``softmax(input @ W^T / temperature)``, logits a chunk of tokens at a time; the kernels, chunk
loop and the kernel adapter of `liger_core.drivers.fused_linear_scaled_cross_entropy`.

Tokens are processed in chunks whose logits (input dtype) take at most the fused linear memory budget
(fused_linear_cross_entropy's `_tiling.plan_chunks`). Per chunk: the logits in the input dtype
(XMX matmul through torch/oneDNN), then the row kernels with the cross-entropy's vocabulary plan
(one program per row, N_CHUNKS blocks of BLOCK_N): the forward walks the row once with per-lane
running max, sum of ``exp(z - max)`` and of ``exp(z - max) z`` (``z = logits / T``), combined
at the end into ``lse``, ``nll = lse - z_y`` and ``entropy = lse - sum p z``.

Both outputs are per token, so each row's upstream gradients must weight its logits' gradient
before the sum into grad_W: forward keeps the per-row lse and entropy (fp32), and backward
recomputes each chunk's logits and overwrites them (a buffer this module owns; each block is
read before the same program writes it) with
``(grad_nll (p - [v == y]) - grad_entropy p (z - lse + entropy)) / T``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import fused_linear_scaled_cross_entropy as flsce_driver
from liger_core.ops._losses import label_stats
from liger_core.ops.fused_linear_scaled_cross_entropy import OP_NAME

from liger_ops_xpu._cross_entropy import plan_vocab
from liger_ops_xpu._jit import zero_row
from liger_ops_xpu._tiling import plan_chunks


@triton.jit
def _fused_linear_scaled_cross_entropy_forward_kernel(
    X, Y, NLL, ENTROPY, LSE, x_row_stride, n_cols, inv_temperature, ignore_index,
    BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    y = tl.load(Y + row).to(tl.int64)
    if y == ignore_index:
        tl.store(NLL + row, 0.0)
        tl.store(ENTROPY + row, 0.0)
        tl.store(LSE + row, 0.0)
        return
    x_row = X + row * x_row_stride
    cols = tl.arange(0, BLOCK_N)
    # Per lane: running max m, s = sum e^(z - m) and t = sum e^(z - m) z; combined after the loop.
    m = tl.full((BLOCK_N,), -float("inf"), tl.float32)
    s = tl.zeros((BLOCK_N,), dtype=tl.float32)
    t = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for chunk in range(N_CHUNKS):
        c = chunk * BLOCK_N + cols
        mask = c < n_cols
        z = tl.load(x_row + c, mask=mask, other=-float("inf")).to(tl.float32) * inv_temperature
        m_new = tl.maximum(m, z)
        # A lane with no column yet keeps m at -inf: shift by 0, not by -inf (NaN).
        safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        rescale = tl.exp(m - safe)
        e = tl.exp(z - safe)  # 0 on padding
        s = s * rescale + e
        # Padding weighs 0: 0 * -inf would be NaN.
        t = t * rescale + e * tl.where(mask, z, 0.0)
        m = m_new
    row_max = tl.max(m, axis=0)
    lane_scale = tl.exp(m - row_max)  # 0 on lanes that never held a column
    total = tl.sum(s * lane_scale, axis=0)
    lse = row_max + tl.log(total)
    # An out-of-range target (refused on the host before the launch) would read nothing.
    z_y = tl.load(x_row + y, mask=(y >= 0) & (y < n_cols), other=0.0).to(tl.float32) * inv_temperature
    tl.store(NLL + row, lse - z_y)
    tl.store(ENTROPY + row, lse - tl.sum(t * lane_scale, axis=0) / total)
    tl.store(LSE + row, lse)


@triton.jit
def _fused_linear_scaled_cross_entropy_backward_kernel(
    X, Y, LSE, ENTROPY, UP_NLL, UP_ENTROPY, x_row_stride, n_cols, inv_temperature, ignore_index,
    HAS_UP_NLL: tl.constexpr, HAS_UP_ENTROPY: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    y = tl.load(Y + row).to(tl.int64)
    x_row = X + row * x_row_stride
    cols = tl.arange(0, BLOCK_N)
    if y == ignore_index:
        zero_row(x_row, n_cols, BLOCK_N, N_CHUNKS)
        return
    lse = tl.load(LSE + row)
    entropy = tl.load(ENTROPY + row)
    up_nll = 0.0
    if HAS_UP_NLL:
        up_nll = tl.load(UP_NLL + row)
    up_entropy = 0.0
    if HAS_UP_ENTROPY:
        up_entropy = tl.load(UP_ENTROPY + row)
    for chunk in range(N_CHUNKS):
        c = chunk * BLOCK_N + cols
        mask = c < n_cols
        z = tl.load(x_row + c, mask=mask, other=0.0).to(tl.float32) * inv_temperature
        p = tl.exp(z - lse)
        g = tl.zeros((BLOCK_N,), tl.float32)
        if HAS_UP_NLL:
            g = up_nll * tl.where(c == y, p - 1.0, p)
        if HAS_UP_ENTROPY:
            g -= up_entropy * p * (z - lse + entropy)
        tl.store(x_row + c, (g * inv_temperature).to(X.dtype.element_ty), mask=mask)


def fused_linear_scaled_cross_entropy_forward(logits, target, inv_temperature, ignore_index, nll, entropy, lse):
    """Per row of a chunk's ``(rows, vocab)`` logits: nll, entropy and lse (fp32) into the given rows."""
    n_rows, n_cols = logits.shape
    plan_vocab(n_cols).launch(
        _fused_linear_scaled_cross_entropy_forward_kernel, n_rows, logits.device, logits, target, nll, entropy,
        lse, logits.stride(0), n_cols, inv_temperature, ignore_index,
    )  # fmt: skip


def fused_linear_scaled_cross_entropy_backward(
    logits, target, lse, entropy, up_nll, up_entropy, inv_temperature, ignore_index
):  # fmt: skip
    """Overwrite a chunk's logits with d(loss)/d(logits); ``up_nll`` / ``up_entropy`` the chunk
    rows' incoming gradients (None: that output feeds nothing)."""
    n_rows, n_cols = logits.shape
    plan_vocab(n_cols).launch(
        _fused_linear_scaled_cross_entropy_backward_kernel, n_rows, logits.device, logits, target, lse, entropy,
        up_nll if up_nll is not None else lse, up_entropy if up_entropy is not None else lse, logits.stride(0),
        n_cols, inv_temperature, ignore_index, HAS_UP_NLL=up_nll is not None, HAS_UP_ENTROPY=up_entropy is not None,
    )  # fmt: skip


def _chunks(x, w):
    """``(start, end, logits)`` per token chunk (`_tiling.plan_chunks`)."""
    n_rows = x.shape[0]
    step = plan_chunks(n_rows, w.shape[0], bytes_per_logit=x.element_size())
    for start in range(0, n_rows, step):
        end = min(start + step, n_rows)
        yield start, end, x[start:end] @ w.t()


class FusedLinearScaledCrossEntropyKernels:
    """`liger_core.drivers.fused_linear_scaled_cross_entropy.FusedLinearScaledCrossEntropyKernels`:
    this module's kernels over `_chunks`."""

    protocol = flsce_driver.PROTOCOL

    @staticmethod
    def forward(x, w, target, inv_t, ignore_index):
        label_stats(OP_NAME, target, ignore_index, w.shape[0])
        n_rows = x.shape[0]
        nll, entropy, lse = (torch.empty(n_rows, dtype=torch.float32, device=x.device) for _ in range(3))
        for start, end, logits in _chunks(x, w):
            fused_linear_scaled_cross_entropy_forward(
                logits, target[start:end], inv_t, ignore_index, nll[start:end], entropy[start:end], lse[start:end]
            )
        return nll, entropy, lse, target

    @staticmethod
    def backward(x, w, target, lse, entropy, up_nll, up_entropy, inv_t, ignore_index, need_x, need_w, w_dtype):
        dx = torch.empty_like(x) if need_x else None
        dw = torch.zeros(w.shape, dtype=w_dtype, device=x.device) if need_w else None
        for start, end, logits in _chunks(x, w):
            # The chunk's gradient overwrites its logits (our own buffer).
            fused_linear_scaled_cross_entropy_backward(
                logits, target[start:end], lse[start:end], entropy[start:end],
                None if up_nll is None else up_nll[start:end], None if up_entropy is None else up_entropy[start:end],
                inv_t, ignore_index,
            )  # fmt: skip
            if dx is not None:
                torch.mm(logits, w, out=dx[start:end])
            if dw is not None:
                dw += (logits.t() @ x[start:end]).to(dw.dtype)
        return dx, dw


LigerFusedLinearScaledCrossEntropyFunction = implements("fused_linear_scaled_cross_entropy")(
    flsce_driver.autograd_function(FusedLinearScaledCrossEntropyKernels(), __name__)
)
