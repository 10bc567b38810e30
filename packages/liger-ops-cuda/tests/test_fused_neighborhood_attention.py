"""fused_neighborhood_attention.py's own paths: windows spanning several key blocks and query
blocks of the smallest tile (forced), with dilation and odd head_dim."""

import pytest
import torch
import triton
import triton.language as tl

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import fused_neighborhood_attention as nat
from liger_ops_cuda import hardware


@pytest.mark.parametrize(
    "options",
    [
        dict(shape=(1, 2, 70, 16), kernel_size=25, dtype=torch.float32),
        dict(shape=(2, 1, 53, 5), kernel_size=9, dilation=4, dtype=torch.bfloat16),
        dict(shape=(1, 1, 40, 24), kernel_size=3, dilation=7, dtype=torch.float16),
    ],
)
def test_windows_across_small_blocks(backend, device, monkeypatch, options):
    # 16-row blocks: a window spans up to four key blocks, each key block is reached by several
    # query blocks, and the last block of each is masked.
    monkeypatch.setattr(hardware, "NAT_BLOCK", 16)
    check(backend, "fused_neighborhood_attention", make_args("fused_neighborhood_attention", device, **options))


@triton.jit
def _index_kernel(
    KEEP, BOUNDS, rows_start, cols_start, seq_len, reach, dilation, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    """The kernels' index arithmetic for a BLOCK_M x BLOCK_N tile at the given starts: the window
    mask (int8) and, for the query block at rows_start, its band [lo, hi), the key blocks the band
    walks and the query blocks of the sequence."""
    m_idx = tl.arange(0, BLOCK_M)
    n_idx = tl.arange(0, BLOCK_N)
    keep = nat._window(m_idx, n_idx, rows_start, cols_start, seq_len, reach, dilation, BLOCK_M + BLOCK_N)
    tl.store(KEEP + m_idx[:, None] * BLOCK_N + n_idx[None, :], keep.to(tl.int8))
    lo = tl.maximum(rows_start - reach, 0)
    hi = nat._band_end(rows_start, BLOCK_M, reach, seq_len)
    tl.store(BOUNDS + 0, lo.to(tl.int64))
    tl.store(BOUNDS + 1, hi.to(tl.int64))
    tl.store(BOUNDS + 2, nat._blocks(hi - lo, BLOCK_N).to(tl.int64))
    tl.store(BOUNDS + 3, nat._blocks(seq_len, BLOCK_M).to(tl.int64))


# (rows_start, cols_start, seq_len, reach, dilation): positions past 2**24 (odd starts, offsets
# that are multiples of the dilation or one off) and past 2**30, where start + BLOCK + reach
# passes int32; tiles that run past 2**31 - 1 (cut by the sequence's end); a dilation and a reach
# past 2**24.
INDEX_CASES = [
    (2**24 + 1, 2**24 + 9, 2**24 + 40, 6, 3),
    (2**24 + 7, 2**24 - 13, 2**25, 12, 2),
    (2**30 + 3, 2**30 - 5, 2**31 - 1, 2**31 - 1, 4),
    (2**31 - 40, 2**31 - 60, 2**31 - 30, 25, 5),
    (2**31 - 10, 2**31 - 40, 2**31 - 1, 25, 5),
    (2**31 - 33, 2**31 - 17, 2**31 - 1, 2**31 - 1, 1),
    (5, 2**24 + 1, 2**25, 2**24 + 3, 2**24 + 3),
    (2**24 + 11, 3, 2**25, 2**24 + 3, 2**24 + 3),
    (2**31 - 20, 7, 2**31 - 1, 2**31 - 1, 2**31 - 27),
]


@pytest.mark.parametrize("case", INDEX_CASES, ids=[f"rows{c[0]}-cols{c[1]}-dil{c[4]}" for c in INDEX_CASES])
def test_index_arithmetic_is_exact_at_any_int32_length(device, case):
    """The window test, the band's bounds and the block counts at positions where int32 sums
    (start + BLOCK + reach, cdiv's n + BLOCK - 1, a tile's last position) would pass 2**31 - 1:
    checked against int64 arithmetic, no tensor of that length needed."""
    rows_start, cols_start, seq_len, reach, dilation = case
    block_m, block_n = 16, 32
    keep = torch.empty((block_m, block_n), dtype=torch.int8, device=device)
    bounds = torch.empty(4, dtype=torch.int64, device=device)
    _index_kernel[(1,)](
        keep, bounds, rows_start, cols_start, seq_len, reach, dilation, BLOCK_M=block_m, BLOCK_N=block_n
    )
    keep, bounds = keep.cpu(), bounds.cpu()
    rows = rows_start + torch.arange(block_m, dtype=torch.int64)
    cols = cols_start + torch.arange(block_n, dtype=torch.int64)
    offset = cols[None, :] - rows[:, None]
    expected = (offset.abs() <= reach) & (offset.remainder(dilation) == 0)
    expected &= (rows < seq_len)[:, None] & (cols < seq_len)[None, :]
    assert expected.any(), "a case whose tile holds no window position checks nothing"
    assert torch.equal(keep.bool(), expected), (keep.bool() ^ expected).nonzero().tolist()
    lo, hi = max(rows_start - reach, 0), min(rows_start + block_m + reach, seq_len)
    assert bounds.tolist() == [lo, hi, -(-(hi - lo) // block_n), -(-seq_len // block_m)]
