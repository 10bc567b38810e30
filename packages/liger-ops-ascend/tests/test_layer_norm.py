"""Ascend LayerNorm code paths the shared suite may not reach, forced and checked against the
float64 oracle: chunked wide rows (a small UB) with a mean far from zero, several rows per
tile with programs looping over several row blocks, chunked rows several per tile."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import layer_norm as layer_norm_op

from liger_ops_ascend import hardware, layer_norm


@pytest.mark.parametrize("params", ["wb", "w", "none"])
def test_layer_norm_chunked(small_ub, backend, device, current_hw, params):
    fwd = layer_norm.plan_tiles("forward", 7, 300, torch.bfloat16, torch.bfloat16, torch.bfloat16, current_hw())
    assert fwd.chunked and 300 % fwd.block_n
    # A mean far from zero: the chunked pass's shifted sums.
    args = layer_norm_op.args(
        device, shape=(7, 300), dtype=torch.bfloat16, weight=params != "none", bias=params == "wb", mean=51.5
    )
    check(backend, "layer_norm", args)


def test_layer_norm_multi_row_and_chunked_multi_row(monkeypatch, few_cores, backend, device, current_hw):
    args = layer_norm_op.args(device, shape=(45, 100), dtype=torch.float32, param_dtype=torch.float32)
    p = layer_norm.plan_tiles("backward", 45, 100, torch.float32, torch.float32, torch.float32, current_hw())
    assert p.block_m > 1
    check(backend, "layer_norm", args)
    monkeypatch.setattr(hardware, "MAX_BLOCK_N", 32)
    p = layer_norm.plan_tiles("backward", 45, 100, torch.float32, torch.float32, torch.float32, current_hw())
    assert p.chunked and p.block_m > 1 and p.n_iters > 1
    check(backend, "layer_norm", args)
