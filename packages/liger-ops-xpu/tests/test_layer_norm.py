"""XPU-specific LayerNorm paths: chunked rows with several rows per tile walked by few programs
(with a large mean: the shifted sums), multi-row tiles with one parameter. Caps are lowered so
shapes stay small; checked against the declaration's float64 oracle."""

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import layer_norm

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu._tiling import plan_tiles


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_layer_norm_chunked_multi_row_tiles(small_chunks, device, dtype):
    plan = plan_tiles(300)
    assert plan.chunked and (plan.block_m, plan.n_chunks) == (4, 5)
    # A mean of 51.5 against a spread of 2: the shifted sums must not cancel.
    check(BACKEND, "layer_norm", layer_norm.args(device, shape=(11, 300), dtype=dtype, mean=51.5))


@pytest.mark.parametrize("has_weight,has_bias", [(True, False), (False, True)])
def test_layer_norm_multi_row_tiles_few_programs(monkeypatch, device, has_weight, has_bias):
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 256)
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "2")
    check(BACKEND, "layer_norm", layer_norm.args(device, shape=(37, 48), weight=has_weight, bias=has_bias))
