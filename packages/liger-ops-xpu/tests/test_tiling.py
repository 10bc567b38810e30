"""The shared launch plans of _tiling.py: row tiles (whole, packed or chunked rows), sub-group
counts, and the persistent backward grid sized by the EU count."""

import pytest
import torch

from liger_ops_xpu import hardware
from liger_ops_xpu._tiling import backward_grid, num_warps_for, plan_blocks, plan_tiles


def test_plan_short_rows_pack_several_per_tile():
    plan = plan_tiles(64)
    assert not plan.chunked and plan.n_chunks == 1 and plan.block_n == 64
    assert plan.block_m == min(hardware.TARGET_TILE_ELEMENTS // 64, hardware.MAX_ROWS_PER_TILE) > 1


@pytest.mark.parametrize("n_cols", [1, 100, 4096, 5120, 16384])
def test_plan_rows_up_to_the_cap_stay_whole(n_cols):
    plan = plan_tiles(n_cols)
    assert not plan.chunked and plan.block_n >= n_cols
    assert plan.block_m * plan.block_n <= max(hardware.TARGET_TILE_ELEMENTS, plan.block_n)


@pytest.mark.parametrize("n_cols", [hardware.MAX_FUSED_BLOCK + 1, 20000, 65536])
def test_plan_wide_rows_are_chunked(n_cols):
    plan = plan_tiles(n_cols)
    assert plan.chunked and plan.block_m == 1 and plan.block_n == hardware.CHUNK_BLOCK
    assert plan.n_chunks == -(-n_cols // hardware.CHUNK_BLOCK)


@pytest.mark.parametrize("n_cols", [1, 64, 1000, 8192, 16384, 100000])
def test_plan_num_warps_is_a_power_of_two_within_the_large_grf_cap(n_cols):
    warps = plan_tiles(n_cols).num_warps
    assert warps & (warps - 1) == 0 and hardware.MIN_NUM_WARPS <= warps <= hardware.MAX_NUM_WARPS_LARGE_GRF


def test_num_warps_for():
    previous = 0
    for elements in [1, 100, 512, 1000, 4096, 8192, 16384, 1 << 20]:
        warps = num_warps_for(elements)
        assert warps & (warps - 1) == 0 and hardware.MIN_NUM_WARPS <= warps <= hardware.MAX_NUM_WARPS_LARGE_GRF
        assert warps >= previous
        previous = warps
    assert num_warps_for(1 << 20) == hardware.MAX_NUM_WARPS_LARGE_GRF
    assert num_warps_for(8192, sub_group=16) == 2 * num_warps_for(8192, sub_group=32)


@pytest.mark.parametrize("n_rows", [1, 7, 100, 1000, 123457])
@pytest.mark.parametrize("eus", ["1", "8", "448"])
def test_backward_grid_is_bounded_by_the_eu_count_and_the_work(monkeypatch, device, n_rows, eus):
    monkeypatch.setenv(hardware.EU_COUNT_ENV, eus)
    plan = plan_tiles(256)
    programs, tiles_per_program = backward_grid(n_rows, plan, torch.device(device))
    n_tiles = -(-n_rows // plan.block_m)
    assert 1 <= programs <= min(hardware.persistent_programs(plan.num_warps), n_tiles)
    # Every tile is covered and every program has at least one tile.
    assert programs * tiles_per_program >= n_tiles > (programs - 1) * tiles_per_program


@pytest.mark.parametrize("n_col_blocks", [1, 3, 64])
def test_backward_grid_shares_the_resident_programs_among_column_blocks(monkeypatch, device, n_col_blocks):
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "16")
    plan = plan_blocks(4096)
    programs, tiles_per_program = backward_grid(100000, plan, torch.device(device), n_col_blocks)
    assert programs == max(1, hardware.persistent_programs(plan.num_warps) // n_col_blocks)
    assert programs * tiles_per_program >= -(-100000 // plan.block_m)
