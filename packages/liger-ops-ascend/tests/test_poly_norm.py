"""Ascend PolyNorm code paths the shared suite may not reach, forced and checked against the
float64 oracle: chunked wide rows (a small UB), several rows per tile over few programs."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import poly_norm as poly_norm_op

from liger_ops_ascend import poly_norm


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_poly_norm_chunked_and_multi_row(small_ub, few_cores, backend, device, current_hw, dtype):
    assert poly_norm.plan_tiles("backward", 5, 300, dtype, current_hw()).chunked
    check(backend, "poly_norm", poly_norm_op.args(device, shape=(5, 300), dtype=dtype))
    p = poly_norm.plan_tiles("backward", 40, 20, dtype, current_hw())
    assert p.block_m > 1 and p.n_iters > 1
    check(backend, "poly_norm", poly_norm_op.args(device, shape=(40, 20), dtype=dtype))
