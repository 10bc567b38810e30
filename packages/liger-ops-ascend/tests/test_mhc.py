"""Ascend mhc_coeffs code paths the shared suite may not reach, forced and checked against the
float64 oracle: programs looping over several token tiles (grid-stride), the last one masked;
and the UB plan at every stream count liger-kernel recommends, on the smallest and largest UB."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check
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
