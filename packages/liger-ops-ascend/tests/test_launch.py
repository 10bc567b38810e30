"""The launch guard's refusals: grids of 65536 programs or more, tiles over the UB budget."""

from __future__ import annotations

import pytest

from liger_ops_ascend import hardware
from liger_ops_ascend.launch import AscendLaunchError, KernelPlan, Tile, check


@pytest.mark.parametrize("grid", [(65536,), (256, 256), (2, 32768, 1)])
def test_guard_refuses_a_grid_of_65536_programs(grid):
    plan = KernelPlan("rms_norm_forward", grid, (Tile("x", 1, 64, 4),))
    with pytest.raises(
        AscendLaunchError,
        match=r"kernel rms_norm_forward: grid .* launches 65536 programs, but Ascend NPUs need fewer than 65536.*"
        r"Ascend910B2 has 48 vector cores",
    ):
        check(plan, hardware.for_soc("Ascend910B2"))


def test_guard_accepts_65535_programs():
    check(KernelPlan("k", (65535,), ()), hardware.for_soc("Ascend910B2"))


def test_guard_refuses_an_empty_grid():
    with pytest.raises(AscendLaunchError, match=r"kernel k: empty grid \(0,\)"):
        check(KernelPlan("k", (0,), ()), hardware.for_soc("Ascend910B2"))


@pytest.mark.parametrize("soc,budget", [("Ascend910B4", 98304), ("Ascend950", 131072)])
def test_guard_refuses_tiles_over_the_ub_budget(soc, budget):
    tiles = (Tile("x", 8, 4096, 2), Tile("x_f32", 8, 4096, 4), Tile("weight", 1, 4096, 2))
    need = 8 * 4096 * 6 + 4096 * 2
    plan = KernelPlan("rms_norm_forward", (40,), tiles)
    with pytest.raises(AscendLaunchError) as err:
        check(plan, hardware.for_soc(soc))
    msg = str(err.value)
    assert f"kernel rms_norm_forward: its tiles need {need} bytes of Unified Buffer" in msg
    assert "x_f32 8x4096x4B=131072" in msg  # the biggest tile first
    assert f"over the budget by {need - budget} bytes: {soc}'s budget is {budget} bytes" in msg
    assert "halved" not in msg and "double buffering" in msg


def test_guard_accepts_exactly_the_budget():
    check(KernelPlan("k", (1,), (Tile("x", 1, 98304, 1),)), hardware.for_soc("Ascend910B2"))
    with pytest.raises(AscendLaunchError, match="over the budget by 32 bytes"):
        check(KernelPlan("k", (1,), (Tile("x", 1, 98305, 1),)), hardware.for_soc("Ascend910B2"))
