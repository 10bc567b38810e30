"""XPU-specific sparsemax paths: chunked rows with several rows per tile (every bisection and
Michelot step re-reads the chunks), a middle dim with a wide spread. Caps are lowered so
shapes stay small; checked against the declaration's float64 oracle."""

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import sparsemax

from liger_ops_xpu import BACKEND
from liger_ops_xpu._tiling import plan_tiles


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_sparsemax_chunked_multi_row_tiles(small_chunks, device, dtype):
    plan = plan_tiles(300)
    assert plan.chunked and plan.block_m == 4
    check(BACKEND, "sparsemax", sparsemax.args(device, shape=(7, 300), dtype=dtype))


def test_sparsemax_middle_dim_and_wide_spread(device):
    # Spread far beyond 1: the support is one or two entries; dim=1 of a 3-D tensor.
    args = sparsemax.args(device, shape=(3, 40, 5))
    check(BACKEND, "sparsemax", {**args, "x": args["x"] * 30.0}, dim=1)
