"""The launch guard's refusals: grids of 65536 programs or more, tiles over the UB budget, tiles
of several rows over unaligned rows, in-tile int32 offsets that would wrap."""

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


@pytest.mark.parametrize("soc,budget", [("Ascend910B4", 176928), ("Ascend950", 235904)])
def test_guard_refuses_tiles_over_the_ub_budget(soc, budget):
    tiles = (Tile("x", 16, 4096, 2, buffers=2), Tile("x_f32", 16, 4096, 4), Tile("weight", 1, 4096, 2))
    need = 16 * 4096 * 2 * 2 + 16 * 4096 * 4 + 4096 * 2
    plan = KernelPlan("rms_norm_forward", (40,), tiles)
    with pytest.raises(AscendLaunchError) as err:
        check(plan, hardware.for_soc(soc))
    msg = str(err.value)
    assert f"kernel rms_norm_forward: its tiles need {need} bytes of Unified Buffer" in msg
    assert "x 16x4096x2Bx2=262144, x_f32 16x4096x4B=262144, weight 1x4096x2B=8192" in msg  # biggest first
    assert f"over the budget by {need - budget} bytes: {soc}'s budget is {budget} bytes" in msg
    assert "90% of it for the planned tiles" in msg and "multi-buffering" in msg


def test_guard_accepts_exactly_the_budget():
    budget = hardware.for_soc("Ascend910B2").ub_budget
    check(KernelPlan("k", (1,), (Tile("x", 1, budget, 1),)), hardware.for_soc("Ascend910B2"))
    with pytest.raises(AscendLaunchError, match="over the budget by 32 bytes"):
        check(KernelPlan("k", (1,), (Tile("x", 1, budget + 1, 1),)), hardware.for_soc("Ascend910B2"))


@pytest.mark.parametrize("pitch", [200, 100514, 254])
def test_guard_refuses_several_rows_over_unaligned_rows(pitch):
    hw = hardware.for_soc("Ascend910B2")
    tiles = (Tile("x", 8, 64, 2, buffers=2),)
    with pytest.raises(AscendLaunchError, match=rf"tiles of 8 rows over rows {pitch} bytes apart.*multiples of 32"):
        check(KernelPlan("rms_norm_forward", (48,), tiles, 8, (256, pitch)), hw)
    check(KernelPlan("rms_norm_forward", (48,), tiles, 1, (256, pitch)), hw)  # one row per tile: fine
    check(KernelPlan("rms_norm_forward", (48,), tiles, 8, (256, 8192)), hw)


def test_guard_refuses_in_tile_offsets_past_int32():
    hw = hardware.for_soc("Ascend910B2")
    check(KernelPlan("rope_forward", (48,), (), 4, (), 2**31 - 1), hw)
    with pytest.raises(AscendLaunchError, match=r"rope_forward: offsets inside a tile reach 2147483648, past int32"):
        check(KernelPlan("rope_forward", (48,), (), 4, (), 2**31), hw)
