"""Ascend softmax code paths the shared suite may not reach, forced and checked against the
float64 oracle: chunked rows (a small UB, the online max/sum pass), several rows per tile."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import softmax as softmax_op

from liger_ops_ascend import softmax


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_softmax_chunked_and_multi_row(small_ub, few_cores, backend, device, current_hw, dtype):
    assert softmax.plan_tiles("forward", 5, 700, dtype, current_hw()).chunked
    check(backend, "softmax", softmax_op.args(device, shape=(5, 700), dtype=dtype, scale=12.0))
    p = softmax.plan_tiles("backward", 40, 20, dtype, current_hw())
    assert p.block_m > 1 and p.n_iters > 1
    check(backend, "softmax", softmax_op.args(device, shape=(40, 20), dtype=dtype))
