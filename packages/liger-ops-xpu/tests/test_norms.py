"""XPU-specific paths of the 1.1 norms that the shared suite may not reach with the real caps:
chunked rows with several rows per tile walked by few programs, channel-chunked groups,
several column blocks and row programs in DyT. Caps are lowered so shapes stay small."""

import pytest
import torch
from liger_core.conformance import (
    dyt_check,
    fused_add_rms_norm_check,
    group_norm_check,
    layer_norm_check,
    poly_norm_check,
)

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu._tiling import plan_tiles
from liger_ops_xpu.dyt import dyt_backward_grid, plan_dyt
from liger_ops_xpu.group_norm import plan_group

DEVICE = "xpu" if hardware.xpu_available() else "cpu"

pytestmark = pytest.mark.filterwarnings("error:Conversion of an array with ndim > 0:DeprecationWarning")


@pytest.fixture
def small_chunks(monkeypatch):
    """Rows wider than 64 columns go in 64-wide chunks, 4 rows per tile, 2 backward programs."""
    for name in ("MAX_FUSED_BLOCK", "MAX_FUSED_BLOCK_HEAVY", "CHUNK_BLOCK"):
        monkeypatch.setattr(hardware, name, 64)
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 256)
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "2")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_layer_norm_chunked_multi_row_tiles(small_chunks, dtype):
    plan = plan_tiles(300)
    assert plan.chunked and (plan.block_m, plan.n_chunks) == (4, 5)
    x, w, b, dy = layer_norm_check.make_inputs((11, 300), dtype, DEVICE)
    layer_norm_check.check_layer_norm(BACKEND, x + 50.0, w, b, dy)  # large mean: the shifted sums


@pytest.mark.parametrize("has_weight,has_bias", [(True, False), (False, True)])
def test_layer_norm_multi_row_tiles_few_programs(monkeypatch, has_weight, has_bias):
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 256)
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "2")
    x, w, b, dy = layer_norm_check.make_inputs((37, 48), torch.float32, DEVICE, has_weight, has_bias)
    layer_norm_check.check_layer_norm(BACKEND, x, w, b, dy)


@pytest.mark.parametrize("in_place", [False, True])
def test_fused_add_rms_norm_chunked(small_chunks, in_place):
    x, r, w, dy, ds = fused_add_rms_norm_check.make_inputs(
        (11, 300), torch.bfloat16, DEVICE, residual_dtype=torch.float32
    )
    fused_add_rms_norm_check.check_fused_add_rms_norm(BACKEND, x, r, w, dy, ds, offset=1.0, in_place=in_place)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_poly_norm_chunked_multi_row_tiles(small_chunks, dtype):
    assert plan_tiles(300, max_fused_block=hardware.MAX_FUSED_BLOCK_HEAVY).chunked
    x, w, b, dy = poly_norm_check.make_inputs((11, 300), dtype, DEVICE)
    poly_norm_check.check_poly_norm(BACKEND, x, w, b, dy)


def test_poly_norm_multi_row_tiles_few_programs(monkeypatch):
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 256)
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "2")
    x, w, b, dy = poly_norm_check.make_inputs((37, 48), torch.float32, DEVICE, bias_shape=())
    poly_norm_check.check_poly_norm(BACKEND, x, w, b, dy)


@pytest.mark.parametrize("has_weight,has_bias", [(True, True), (False, True), (True, False)])
def test_group_norm_channel_and_spatial_chunks(monkeypatch, has_weight, has_bias):
    # 6 channels per group in 2-channel chunks, 37 positions in 16-wide chunks.
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 16)
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 32)
    plan = plan_group(6, 37)
    assert (plan.block_c, plan.block_s, plan.n_c_chunks, plan.n_s_chunks) == (2, 16, 3, 3)
    x, w, b, dy = group_norm_check.make_inputs((2, 12, 37), torch.float32, DEVICE, has_weight, has_bias)
    group_norm_check.check_group_norm(BACKEND, x + 100.0, w, b, dy, 2)


@pytest.mark.parametrize("has_beta", [True, False])
def test_dyt_column_blocks_and_row_programs(monkeypatch, has_beta):
    # 100 columns in 32-wide blocks (4 blocks), 2-row tiles, 19 rows over 2 programs per block.
    monkeypatch.setattr(hardware, "ELEMENTWISE_COL_BLOCK", 32)
    monkeypatch.setattr(hardware, "ELEMENTWISE_BLOCK", 64)
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "2")
    plan = plan_dyt(100)
    assert (plan.block_m, plan.block_n) == (2, 32)
    assert dyt_backward_grid(19, 4, plan, torch.device(DEVICE)) == (2, 5)
    x, alpha, gamma, beta, dy = dyt_check.make_inputs((19, 100), torch.bfloat16, DEVICE, has_beta=has_beta)
    dyt_check.check_dyt(BACKEND, x, alpha, gamma, beta, dy)


def test_dyt_saturated_tanh():
    # |alpha * x| large: tanh from exp must give +-1, not NaN.
    x, alpha, gamma, beta, dy = dyt_check.make_inputs((4, 33), torch.float32, DEVICE)
    dyt_check.check_dyt(BACKEND, x * 200.0, alpha, gamma, beta, dy)
