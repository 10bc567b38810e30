"""XPU-specific RMSNorm paths the shared suite may not reach: multi-row tiles walked by few
programs, chunked wide rows (one and several rows per tile), in_place, empty rows."""

import pytest
import torch
from liger_core.conformance.rms_norm import check_rms_norm, make_inputs

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu.rms_norm import backward_grid, plan_tiles

DEVICE = "xpu" if hardware.xpu_available() else "cpu"

pytestmark = pytest.mark.filterwarnings("error:Conversion of an array with ndim > 0:DeprecationWarning")


def rms_norm(x, w, in_place=False):
    return BACKEND.ops["rms_norm"](x, w, 1e-6, 0.0, "llama", in_place)


# --- the plan -----------------------------------------------------------------------------
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


@pytest.mark.parametrize("n_rows", [1, 7, 100, 1000, 123457])
@pytest.mark.parametrize("eus", ["1", "8", "448"])
def test_backward_grid_is_bounded_by_the_eu_count_and_the_work(monkeypatch, n_rows, eus):
    monkeypatch.setenv(hardware.EU_COUNT_ENV, eus)
    plan = plan_tiles(256)
    programs, tiles_per_program = backward_grid(n_rows, plan, torch.device(DEVICE))
    n_tiles = -(-n_rows // plan.block_m)
    assert 1 <= programs <= min(hardware.persistent_programs(plan.num_warps), n_tiles)
    # Every tile is covered and every program has at least one tile.
    assert programs * tiles_per_program >= n_tiles > (programs - 1) * tiles_per_program


# --- forced paths against the float64 oracle ------------------------------------------------
@pytest.mark.parametrize("casting_mode", ["llama", "gemma", "none"])
@pytest.mark.parametrize("has_weight", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_multi_row_tiles_walked_by_few_programs(monkeypatch, casting_mode, has_weight, dtype):
    # 4-row tiles of 48 (padded to 64) columns; 2 EUs -> 2 programs walking 5 tiles each, the
    # last one ragged (37 rows).
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 256)
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "2")
    plan = plan_tiles(48)
    assert (plan.block_m, plan.block_n, plan.n_chunks) == (4, 64, 1)
    assert backward_grid(37, plan, torch.device(DEVICE)) == (2, 5)
    x, w, dy = make_inputs((37, 48), dtype, DEVICE, has_weight=has_weight)
    check_rms_norm(BACKEND, x, w, dy, casting_mode=casting_mode, offset=1.0)


@pytest.mark.parametrize("rows_per_tile", [1, 4])
@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
@pytest.mark.parametrize("has_weight", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_chunked_wide_rows(monkeypatch, rows_per_tile, casting_mode, has_weight, dtype):
    # 300 columns in five 64-wide chunks (the last one ragged); 11 rows walked by 2 programs.
    monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 64)
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 64 * rows_per_tile)
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "2")
    plan = plan_tiles(300)
    assert plan.chunked and (plan.block_m, plan.block_n, plan.n_chunks) == (rows_per_tile, 64, 5)
    x, w, dy = make_inputs((11, 300), dtype, DEVICE, has_weight=has_weight)
    check_rms_norm(BACKEND, x, w, dy, casting_mode=casting_mode, offset=0.5)


def test_chunked_rows_with_a_float32_weight_and_bf16_input(monkeypatch):
    monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 32)
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 32)
    x, w, dy = make_inputs((6, 70), torch.bfloat16, DEVICE, weight_dtype=torch.float32)
    check_rms_norm(BACKEND, x, w, dy, casting_mode="llama", offset=1.0)


@pytest.mark.parametrize("chunked", [False, True], ids=["whole-rows", "chunked"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_in_place(monkeypatch, chunked, dtype):
    if chunked:
        monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
        monkeypatch.setattr(hardware, "CHUNK_BLOCK", 32)
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "1")
    x, w, dy = make_inputs((5, 100), dtype, DEVICE)
    assert plan_tiles(100).chunked == chunked
    check_rms_norm(BACKEND, x, w, dy, in_place=True)


def test_in_place_writes_grad_x_into_the_incoming_gradient():
    x, w, dy = make_inputs((9, 40), torch.float32, DEVICE)
    x = x.requires_grad_()
    buffer = dy.clone()
    rms_norm(x, w, in_place=True).backward(buffer)
    assert torch.equal(buffer, x.grad)


def test_in_place_leaves_a_broadcast_gradient_alone():
    # An expanded gradient has one row of memory for every row: grad_x must get its own buffer.
    x, w, _ = make_inputs((6, 32), torch.float32, DEVICE)
    row = torch.randn(32, generator=torch.Generator().manual_seed(3)).to(DEVICE)
    grads = []
    for in_place in (False, True):
        x_in = x.clone().requires_grad_()
        rms_norm(x_in, w, in_place=in_place).backward(row.expand(6, 32))
        grads.append(x_in.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)
    assert not torch.equal(grads[1][0], grads[1][1])


@pytest.mark.parametrize("shape", [(3, 0), (0, 5000)])
def test_empty_inputs(shape):
    x, w, dy = make_inputs(shape, torch.float32, DEVICE)
    check_rms_norm(BACKEND, x, w, dy)
