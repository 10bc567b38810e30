"""Ascend DyT code paths the shared suite may not reach, forced and checked against the float64
oracle: column chunks outer with several rows per tile, programs looping over row blocks."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import dyt as dyt_op

from liger_ops_ascend import dyt, hardware


@pytest.mark.parametrize("has_beta", [True, False], ids=["beta", "nobeta"])
def test_dyt_chunked_multi_row(monkeypatch, few_cores, backend, device, current_hw, has_beta):
    monkeypatch.setattr(hardware, "MAX_BLOCK_N", 32)
    p = dyt.plan_tiles("backward", 45, 100, torch.float32, torch.float32, torch.float32, current_hw())
    assert p.chunked and p.block_m > 1 and p.n_iters > 1
    check(backend, "dyt", dyt_op.args(device, shape=(45, 100), dtype=torch.float32, beta=has_beta))
