"""modulated_rms_norm.py's own paths the shared suite may not reach: the backward's units (chunks
of one modulation row summed after the kernel, several whole modulation rows per unit), wide
rows in chunks, in place. Caps are lowered so shapes stay small; every case is checked against
the op's declaration (float64 oracle) by liger_core.conformance.check."""

import pytest
import torch
from liger_core.conformance.check import check, make_args
from liger_core.ops import modulated_rms_norm as contract

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu import modulated_rms_norm as mod


@pytest.fixture
def four_units(monkeypatch):
    """Four resident backward units (4 EUs x 4 threads / 4 sub-groups), so the unit plans below hold."""
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "4")
    monkeypatch.setattr(hardware, "THREADS_PER_EU_LARGE_GRF", 4)


def _units(m, per, n_cols, device):
    plan = mod.plan_backward_tiles(n_cols, per, torch.device(device))
    return plan, mod.plan_backward_units(m, per, plan, torch.device(device))


def test_plan_units(four_units, monkeypatch):
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 128)
    plan, units = _units(1, 64, 32, "cpu")
    assert plan.block_m == 4 and plan.num_warps == 4
    # Few modulation rows: each split into chunks of whole tiles, about one unit per resident program.
    assert units == mod.BackwardUnits(1, 4, 16, 4)
    # Many (one per token): several whole modulation rows per unit, one row per tile.
    plan, units = _units(10, 1, 32, "cpu")
    assert plan.block_m == 1 and units == mod.BackwardUnits(3, 1, 1, 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_modulation_row_in_chunks(device, four_units, monkeypatch, dtype):
    # 4-row tiles: 64 rows of each modulation row in chunks, partial rows summed after the kernel.
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 128)
    assert _units(2, 64, 32, device)[1].n_chunks == 2
    args = make_args("modulated_rms_norm", device, shape=(2, 64, 32), scale_shape=(2, 32), dtype=dtype)
    check(BACKEND, "modulated_rms_norm", args, offset=1.0, casting_mode="gemma")


@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
@pytest.mark.parametrize("has_weight", [True, False])
def test_chunked_rows(device, four_units, monkeypatch, casting_mode, has_weight):
    # 150 columns in 64-wide chunks (a ragged last one), 2-row tiles; 2 modulation rows of 6 rows,
    # 2 chunks each.
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 128)
    monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 64)
    plan, units = _units(2, 6, 150, device)
    assert plan.chunked and plan.block_m == 2 and units.n_chunks == 2
    args = make_args("modulated_rms_norm", device, shape=(12, 150), modulation_rows=2, weight=has_weight)
    check(BACKEND, "modulated_rms_norm", args, casting_mode=casting_mode, offset=0.5)


def test_chunked_rows_per_token_in_place(device, four_units, monkeypatch):
    monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 64)
    args = make_args("modulated_rms_norm", device, shape=(7, 100), modulation_rows=7, dtype=torch.float16)
    check(BACKEND, "modulated_rms_norm", args, in_place=True)


def test_gradient_broadcast_over_rows_in_place(device):
    # A gradient broadcast over rows (row stride 0) must not be written in place: rows would alias.
    args = make_args("modulated_rms_norm", device, shape=(6, 40), modulation_rows=2)
    dy = torch.randn(40, generator=torch.Generator().manual_seed(3)).to(device).expand(6, 40)
    leaves = {}
    for name, fn in (("kernel", BACKEND.op("modulated_rms_norm")), ("reference", contract.math)):
        x, scale = args["x"].clone().requires_grad_(), args["scale"].clone().requires_grad_()
        fn(x, args["weight"], scale, args["shift"], 1e-6, 0.0, "llama", name == "kernel").backward(dy)
        leaves[name] = (x.grad, scale.grad)
    for got, want in zip(leaves["kernel"], leaves["reference"]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
