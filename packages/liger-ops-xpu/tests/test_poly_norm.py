"""XPU-specific PolyNorm paths: chunked rows (the heavy-norm cap) with several rows per tile,
multi-row tiles walked by few programs with a scalar bias. Caps are lowered so shapes stay
small; checked against the declaration's float64 oracle."""

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import poly_norm

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu._tiling import plan_tiles
from liger_ops_xpu.poly_norm import plan_poly_norm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_poly_norm_chunked_multi_row_tiles(small_chunks, device, dtype):
    assert plan_poly_norm(300).chunked
    check(BACKEND, "poly_norm", poly_norm.args(device, shape=(11, 300), dtype=dtype))


def test_poly_norm_heavy_rows_chunk_below_the_light_cap():
    # Three live powers of x: rows between the two caps are chunked here but whole in rms_norm.
    n_cols = hardware.MAX_FUSED_BLOCK_HEAVY + 1
    assert plan_poly_norm(n_cols).chunked and not plan_tiles(n_cols).chunked


def test_poly_norm_multi_row_tiles_few_programs(monkeypatch, device):
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 256)
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "2")
    check(BACKEND, "poly_norm", poly_norm.args(device, shape=(37, 48), bias_shape=()))
