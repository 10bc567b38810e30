"""Ascend fused_neighborhood_attention paths the shared suite may not reach, forced and checked
against the float64 oracle: windows spanning several 16-row blocks (and each key block reached by
several query blocks) walked by fewer programs than items; rows whose pitch is not 32-byte aligned
(odd head_dim, copied into padded rows); the plan's block from the UB budget."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import triton
import triton.language as tl
from liger_core.conformance.check import check
from liger_core.ops import fused_neighborhood_attention as nat_op

from liger_ops_ascend import fused_neighborhood_attention as nat
from liger_ops_ascend import hardware


@pytest.mark.parametrize(
    "options",
    [
        {"shape": (1, 2, 70, 16), "kernel_size": 25, "dtype": torch.float32},
        {"shape": (2, 1, 53, 5), "kernel_size": 9, "dilation": 4, "dtype": torch.bfloat16},
        {"shape": (1, 1, 40, 24), "kernel_size": 3, "dilation": 7, "dtype": torch.float16},
    ],
)
def test_windows_across_small_blocks(monkeypatch, backend, device, options):
    monkeypatch.setattr(hardware, "NAT_BLOCK", 16)
    # 3 AI cores: each program walks several (batch * head, block) items.
    real = hardware.current
    monkeypatch.setattr(hardware, "current", lambda device=None: dataclasses.replace(real(device), ai_cores=3))
    check(backend, "fused_neighborhood_attention", nat_op.args(device, **options))


def test_block_from_the_ub_budget(current_hw):
    hw = current_hw()
    wide = nat.plan_fused_neighborhood_attention(256, torch.bfloat16, hw)
    narrow = nat.plan_fused_neighborhood_attention(64, torch.bfloat16, hw)
    assert hardware.NAT_MIN_BLOCK <= wide.block <= narrow.block <= hardware.NAT_BLOCK
    for plan in (wide, narrow):
        for tiles in nat.UB_TILES.values():
            assert sum(t.nbytes for t in tiles(plan.block, plan.block_d, 2)) <= hw.ub_budget


def test_head_too_wide_for_the_ub_is_refused(current_hw):
    with pytest.raises(nat.AscendLaunchError, match=r"head_dim 65536 .*overflow the UB"):
        nat.plan_fused_neighborhood_attention(65536, torch.float32, current_hw())


@triton.jit
def _window_kernel(
    KEEP, rows_start, cols_start, seq_len, reach, dilation, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    """The kernels' window mask for a BLOCK_M x BLOCK_N tile at the given starts, stored as int8."""
    m_idx = tl.arange(0, BLOCK_M)
    n_idx = tl.arange(0, BLOCK_N)
    keep = nat._window(
        m_idx.to(tl.float32), n_idx.to(tl.float32), rows_start, cols_start, seq_len, reach, dilation, BLOCK_M + BLOCK_N
    )
    tl.store(KEEP + m_idx[:, None] * BLOCK_N + n_idx[None, :], keep.to(tl.int8))


# (rows_start, cols_start, seq_len, reach, dilation): positions past 2**24, where fp32 no longer
# holds every integer (odd starts, offsets that are multiples of the dilation or one off), up to
# the end of int32; a dilation and a reach past 2**24; tiles cut by the sequence's end.
WINDOW_CASES = [
    (2**24 + 1, 2**24 + 9, 2**24 + 40, 6, 3),
    (2**24 + 7, 2**24 - 13, 2**25, 12, 2),
    (2**31 - 40, 2**31 - 60, 2**31 - 30, 25, 5),
    (2**31 - 33, 2**31 - 17, 2**31 - 1, 2**31 - 1, 1),
    (5, 2**24 + 1, 2**25, 2**24 + 3, 2**24 + 3),
    (2**24 + 11, 3, 2**25, 2**24 + 3, 2**24 + 3),
    (3 * 2**24 + 1, 2**24 + 3, 2**26, 2**26, 7),
    (2**25 + 1, 2**25 - 2**24, 2**26, 2**24 + 5, 3),
]


@pytest.mark.parametrize("case", WINDOW_CASES, ids=[f"rows{c[0]}-cols{c[1]}-dil{c[4]}" for c in WINDOW_CASES])
def test_window_is_exact_past_fp32_integers(case):
    """The window test compares in fp32 (ASC001), yet decides every position of an int32 length
    exactly: checked against integer arithmetic on tiles past 2**24 positions."""
    rows_start, cols_start, seq_len, reach, dilation = case
    block_m, block_n = 16, 32
    keep = torch.empty((block_m, block_n), dtype=torch.int8)
    _window_kernel[(1,)](keep, rows_start, cols_start, seq_len, reach, dilation, BLOCK_M=block_m, BLOCK_N=block_n)
    rows = rows_start + torch.arange(block_m, dtype=torch.int64)
    cols = cols_start + torch.arange(block_n, dtype=torch.int64)
    offset = cols[None, :] - rows[:, None]
    expected = (offset.abs() <= reach) & (offset.remainder(dilation) == 0)
    expected &= (rows < seq_len)[:, None] & (cols < seq_len)[None, :]
    assert expected.any(), "a case whose tile holds no window position checks nothing"
    assert torch.equal(keep.bool(), expected), (keep.bool() ^ expected).nonzero().tolist()
