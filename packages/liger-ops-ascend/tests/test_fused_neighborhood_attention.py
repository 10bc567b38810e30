"""Ascend fused_neighborhood_attention paths the shared suite may not reach, forced and checked
against the float64 oracle: windows spanning several 16-row blocks (and each key block reached by
several query blocks) walked by fewer programs than items; rows whose pitch is not 32-byte aligned
(odd head_dim, copied into padded rows); the plan's block from the UB budget."""

from __future__ import annotations

import dataclasses

import pytest
import torch
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
