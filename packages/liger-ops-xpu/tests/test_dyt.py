"""XPU-specific DyT paths: several column blocks and several row programs per block in the
persistent backward, a saturated tanh. Caps are lowered so shapes stay small; checked against
the declaration's float64 oracle."""

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import dyt

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu._tiling import backward_grid, plan_blocks
from liger_ops_xpu.dyt import DyTKernels


@pytest.mark.parametrize("has_beta", [True, False])
def test_dyt_column_blocks_and_row_programs(monkeypatch, device, has_beta):
    # 100 columns in 32-wide blocks (4 blocks), 2-row tiles, 19 rows over 2 programs per block.
    monkeypatch.setattr(hardware, "ELEMENTWISE_COL_BLOCK", 32)
    monkeypatch.setattr(hardware, "ELEMENTWISE_BLOCK", 64)
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "2")
    plan = plan_blocks(100)
    assert (plan.block_m, plan.block_n) == (2, 32)
    assert backward_grid(19, plan, torch.device(device), n_col_blocks=4) == (2, 5)
    check(BACKEND, "dyt", dyt.args(device, shape=(19, 100), dtype=torch.bfloat16, beta=has_beta))


def test_dyt_saturated_tanh(device):
    # |alpha * x| large: tanh from exp must give +-1, not NaN.
    args = dyt.args(device, shape=(4, 33))
    check(BACKEND, "dyt", {**args, "x": args["x"] * 200.0})


def test_dyt_frozen_parameters(device):
    # No parameter wants a gradient: grad_x alone, the parameters' partial sums skipped.
    args = dyt.args(device, shape=(9, 40))
    assert set(check(BACKEND, "dyt", args, frozen=("alpha", "gamma", "beta"))[1]) == {"x"}
    x, params = args["x"], (args["alpha"], args["gamma"], args["beta"])
    _, plan = DyTKernels.forward(x, *params)
    assert DyTKernels.backward(x, x, *params, False, plan)[1:] == (None, None, None)
