"""Ascend mhc code paths the shared suite may not reach, forced and checked against the float64
oracle: programs looping over several token tiles (grid-stride), the last one masked; the mixes'
channel walk on a small UB; and the UB plans at every stream count liger-kernel recommends, on
the smallest and largest UB."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check, make_args
from liger_core.ops import mhc_coeffs as mhc_op

from liger_ops_ascend import hardware, mhc
from liger_ops_ascend.launch import check as check_plan


def test_programs_walk_several_tiles(monkeypatch, few_cores, backend, device, current_hw):
    # 64-lane tiles: 4 tokens per tile at HC = 4, so 37 tokens make 10 tiles over the few cores.
    monkeypatch.setattr(hardware, "MHC_TILE_ELEMENTS", 64)
    plan, block_t, _ = mhc.plan_mhc("backward", 4, 37, current_hw())
    assert block_t == 4 and plan.programs < 10
    check(backend, "mhc_coeffs", mhc_op.args(device, shape=(37, 4, 8), tmax=4))
    check(backend, "mhc_coeffs", mhc_op.args(device, shape=(9, 3, 5), dtype=torch.bfloat16, tmax=3))


@pytest.mark.parametrize("soc", ["Ascend910B4", "Ascend950"])
def test_plans_fit_grid_and_ub(soc):
    hw = hardware.for_soc(soc)
    for hc in range(1, 17):
        for tokens in (1, 37, 1 << 20):
            for direction in ("forward", "backward"):
                plan, block_t, block_hc = mhc.plan_mhc(direction, hc, tokens, hw)
                check_plan(plan, hw)
                assert block_t * block_hc * block_hc <= max(hardware.MHC_TILE_ELEMENTS, block_hc * block_hc)


def test_mixes_walk_token_tiles_and_channel_blocks(monkeypatch, few_cores, backend, device, current_hw):
    # 64-element tiles, 8 channels a block: 2 tokens a tile for the pre-mix at HC = 4, 1 for the
    # post-mix (its 4 x 4 matrix), over 3 programs; 21 channels (a padded pitch) make 3 blocks.
    monkeypatch.setattr(hardware, "MHC_MIX_TILE_ELEMENTS", 64)
    monkeypatch.setattr(hardware, "MHC_MIX_BLOCK_C", 8)
    plan, block_t, _, block_c = mhc.plan_mix("pre", "backward", 4, 10, 21, 64, current_hw())
    assert (block_t, block_c) == (2, 8) and plan.programs == 3
    for op in ("mhc_pre", "mhc_post_res"):
        check(backend, op, make_args(op, device, shape=(2, 5, 4, 21)))
        check(backend, op, make_args(op, device, shape=(7, 3, 24), dtype=torch.bfloat16))


def test_mixes_on_a_small_ub(small_ub, backend, device, current_hw):
    # An 8 KiB UB: the plans shrink the tiles (tokens, then channels) until they fit.
    plan, _, _, block_c = mhc.plan_mix("post_res", "backward", 4, 37, 300, 1200, current_hw())
    assert block_c < 256 and plan.ub_bytes <= current_hw().ub_budget
    for op in ("mhc_pre", "mhc_post_res"):
        check(backend, op, make_args(op, device, shape=(37, 4, 300)))


@pytest.mark.parametrize("soc", ["Ascend910B4", "Ascend950"])
def test_mix_plans_fit_grid_and_ub(soc):
    hw = hardware.for_soc(soc)
    for hc in range(1, 17):
        for tokens, channels in ((1, 7), (37, 300), (1 << 20, 4096), (1 << 16, 8192)):
            for name in ("pre", "post_res"):
                for direction in ("forward", "backward"):
                    pitch_bytes = 2 * mhc._pitch(channels, torch.bfloat16)
                    plan, *_ = mhc.plan_mix(name, direction, hc, tokens, channels, pitch_bytes, hw)
                    check_plan(plan, hw)
