"""_jit.py's helpers, run through small kernels of their own."""

import torch
import triton
import triton.language as tl

from liger_ops_cuda._jit import row_offset, tanh


@triton.jit
def _offsets_kernel(ROWS, OUT, row_stride):
    i = tl.program_id(0)
    tl.store(OUT + i, row_offset(tl.load(ROWS + i), row_stride))


def test_row_offsets_are_int64_beyond_2_31(device):
    """The row offset every loss kernel uses, at rows x stride far past 2**31 (4096 x 128256 fp32
    logits pass it at row 16744; 65536 tokens reach 8.4e9), computed by the kernels' own helper
    without allocating the tensor it would address."""
    rows = torch.tensor([0, 1, 16744, 65535, 2**31 // 128256 + 1], dtype=torch.int32, device=device)
    out = torch.zeros(rows.numel(), dtype=torch.int64, device=device)
    _offsets_kernel[(rows.numel(),)](rows, out, 128256)
    assert out.tolist() == [r * 128256 for r in rows.tolist()]
    assert max(out.tolist()) > 2**31


@triton.jit
def _tanh_kernel(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(Y + offs, tanh(tl.load(X + offs, mask=mask, other=0.0)), mask=mask)


def test_tanh_saturates_without_overflow(device):
    """The one tanh of the package (DyT, GEGLU, softcapped logits): exact sign, +-1 far out, no
    NaN where exp(2|z|) would overflow."""
    x = torch.tensor([-1e30, -100.0, -3.0, -0.5, -1e-4, 0.0, 1e-4, 0.5, 3.0, 100.0, 1e30], device=device)
    y = torch.empty_like(x)
    _tanh_kernel[(1,)](x, y, x.numel(), BLOCK=16)
    torch.testing.assert_close(y, torch.tanh(x), rtol=1e-6, atol=1e-7)
