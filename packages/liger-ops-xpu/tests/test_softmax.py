"""XPU-specific softmax paths: chunked rows with several rows per tile (the online max and
rescaled sum), a whole chunk masked. Caps are lowered so shapes stay small; checked against
the declaration's float64 oracle."""

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import softmax

from liger_ops_xpu import BACKEND
from liger_ops_xpu._tiling import plan_tiles


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_softmax_chunked_multi_row_tiles(small_chunks, device, dtype):
    plan = plan_tiles(300)
    assert plan.chunked and plan.block_m == 4
    args = softmax.args(device, shape=(7, 300), dtype=dtype)
    args["x"][:, 64:128] = float("-inf")  # a whole chunk masked: the online max stays finite
    check(BACKEND, "softmax", args)
