"""modulated_rms_norm.py's own paths the shared suite may not reach: the backward's units (chunks
of one modulation row summed after the kernel, several whole modulation rows per unit), wide
rows in chunks, in place."""

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware
from liger_ops_cuda import modulated_rms_norm as mod


@pytest.fixture
def four_sms(monkeypatch):
    """Four backward units' worth of SMs (on a GPU too), so that the unit plans below hold."""
    monkeypatch.setattr(hardware, "sm_count", lambda device_index=None: 4)


@pytest.fixture
def chunked(monkeypatch):
    """Rows of more than 64 columns take the chunked plan, in 64-wide chunks."""
    monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 64)


def test_plan_units(four_sms):
    cpu = torch.device("cpu")
    # Few modulation rows: each split into chunks of whole tiles, about one unit per SM.
    assert mod.plan_backward_units(1, 64, 4, cpu) == mod.BackwardUnits(1, 4, 16, 4)
    assert mod.plan_backward_units(3, 10, 4, cpu) == mod.BackwardUnits(1, 2, 8, 6)
    # Many (one per token): several whole modulation rows per unit.
    assert mod.plan_backward_units(10, 1, 1, cpu) == mod.BackwardUnits(3, 1, 1, 4)
    # No rows: one empty chunk.
    assert mod.plan_backward_units(2, 0, 1, cpu).n_chunks == 1
    # A tile never spans two modulation rows.
    assert mod.plan_backward_tiles(32, 3).block_m == 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_modulation_row_in_chunks(backend, device, four_sms, monkeypatch, dtype):
    # 4-row tiles: 64 rows of one modulation row in 4 chunks, partial rows summed after the kernel.
    monkeypatch.setattr(hardware, "MODULATED_RMS_NORM_BACKWARD_TILE_ELEMENTS", 128)
    assert mod.plan_backward_tiles(32, 64).block_m == 4
    args = make_args("modulated_rms_norm", device, shape=(2, 64, 32), scale_shape=(2, 32), dtype=dtype)
    check(backend, "modulated_rms_norm", args, offset=1.0, casting_mode="gemma")


@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
@pytest.mark.parametrize("has_weight", [True, False])
def test_chunked_rows(backend, device, four_sms, chunked, casting_mode, has_weight):
    # 150 columns in 64-wide chunks (a ragged last one); 2 modulation rows of 6 rows, 2 chunks each.
    assert mod.plan_backward_tiles(150, 6).chunked
    assert mod.plan_backward_units(2, 6, 1, torch.device(device)).n_chunks == 2
    args = make_args("modulated_rms_norm", device, shape=(12, 150), modulation_rows=2, weight=has_weight)
    check(backend, "modulated_rms_norm", args, casting_mode=casting_mode, offset=0.5)


def test_chunked_rows_per_token_in_place(backend, device, four_sms, chunked):
    args = make_args("modulated_rms_norm", device, shape=(7, 100), modulation_rows=7, dtype=torch.float16)
    check(backend, "modulated_rms_norm", args, in_place=True)


def test_gradient_broadcast_over_rows_in_place(backend, device):
    # A gradient broadcast over rows (row stride 0) must not be written in place: rows would alias.
    args = make_args("modulated_rms_norm", device, shape=(6, 40), modulation_rows=2)
    dy = torch.randn(40, generator=torch.Generator().manual_seed(3)).to(device).expand(6, 40)
    from liger_core.ops import modulated_rms_norm as contract

    leaves = {}
    for name, fn in (("kernel", backend.op("modulated_rms_norm")), ("reference", contract.math)):
        x, scale = args["x"].clone().requires_grad_(), args["scale"].clone().requires_grad_()
        fn(x, args["weight"], scale, args["shift"], 1e-6, 0.0, "llama", name == "kernel").backward(dy)
        leaves[name] = (x.grad, scale.grad)
    for got, want in zip(leaves["kernel"], leaves["reference"]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
