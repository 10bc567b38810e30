"""Ascend sparsemax code paths the shared suite may not reach, forced and checked against the
float64 oracle: chunked rows (a small UB: every step a pass over chunks), several rows per
tile, a dim other than the last."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import sparsemax as sparsemax_op

from liger_ops_ascend import sparsemax


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_sparsemax_chunked_and_multi_row(small_ub, few_cores, backend, device, current_hw, dtype):
    assert sparsemax.plan_tiles("forward", 5, 700, dtype, current_hw()).chunked
    check(backend, "sparsemax", sparsemax_op.args(device, shape=(5, 700), dtype=dtype))
    assert sparsemax.plan_tiles("backward", 18, 40, dtype, current_hw()).block_m > 1
    check(backend, "sparsemax", sparsemax_op.args(device, shape=(6, 40, 3), dtype=dtype), dim=1)
