"""Ascend DyT code paths the shared suite may not reach, forced and checked against the float64
oracle: column chunks outer with several rows per tile, programs looping over row blocks."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import dyt as dyt_op

from liger_ops_ascend import dyt, hardware


@pytest.mark.parametrize("has_beta", [True, False], ids=["beta", "nobeta"])
def test_dyt_chunked_multi_row(monkeypatch, few_cores, rows_per_tile, backend, device, current_hw, has_beta):
    monkeypatch.setattr(hardware, "MAX_BLOCK_N", 32)
    p = dyt.plan_tiles("backward", 45, 120, torch.float32, torch.float32, torch.float32, current_hw())
    assert p.chunked and p.block_m > 1 and p.n_iters > 1
    check(backend, "dyt", dyt_op.args(device, shape=(45, 120), dtype=torch.float32, beta=has_beta))


def test_dyt_frozen_parameters(backend, device):
    # No parameter wants a gradient: grad_x alone, the parameters' partial sums neither computed
    # nor allocated.
    args = dyt_op.args(device, shape=(9, 40), beta=False)
    assert set(check(backend, "dyt", args, frozen=("alpha", "gamma"))[1]) == {"x"}
    x, alpha, gamma = args["x"], args["alpha"], args["gamma"]
    _, hw = dyt.DyTKernels.forward(x, alpha, gamma, None)
    assert dyt.DyTKernels.backward(x, x, alpha, gamma, None, False, hw)[1:] == (None, None, None)
