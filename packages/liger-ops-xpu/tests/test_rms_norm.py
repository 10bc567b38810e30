"""XPU-specific RMSNorm and fused add + RMSNorm paths the shared suite may not reach: multi-row
tiles walked by few programs, chunked wide rows (one and several rows per tile), in_place,
empty rows. Caps are lowered so shapes stay small; every case is checked against the op's
declaration (float64 oracle) by liger_core.conformance.check."""

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import fused_add_rms_norm, rms_norm

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu._tiling import backward_grid, plan_tiles


@pytest.mark.parametrize("casting_mode", ["llama", "gemma", "none"])
@pytest.mark.parametrize("has_weight", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_multi_row_tiles_walked_by_few_programs(monkeypatch, device, casting_mode, has_weight, dtype):
    # 4-row tiles of 48 (padded to 64) columns; 2 EUs -> 2 programs walking 5 tiles each, the
    # last one ragged (37 rows).
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 256)
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "2")
    plan = plan_tiles(48)
    assert (plan.block_m, plan.block_n, plan.n_chunks) == (4, 64, 1)
    assert backward_grid(37, plan, torch.device(device)) == (2, 5)
    args = rms_norm.args(device, shape=(37, 48), dtype=dtype, weight=has_weight)
    check(BACKEND, "rms_norm", args, casting_mode=casting_mode, offset=1.0)


@pytest.mark.parametrize("rows_per_tile", [1, 4])
@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
@pytest.mark.parametrize("has_weight", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_chunked_wide_rows(monkeypatch, device, rows_per_tile, casting_mode, has_weight, dtype):
    # 300 columns in five 64-wide chunks (the last one ragged); 11 rows walked by 2 programs.
    monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 64)
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 64 * rows_per_tile)
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "2")
    plan = plan_tiles(300)
    assert plan.chunked and (plan.block_m, plan.block_n, plan.n_chunks) == (rows_per_tile, 64, 5)
    args = rms_norm.args(device, shape=(11, 300), dtype=dtype, weight=has_weight)
    check(BACKEND, "rms_norm", args, casting_mode=casting_mode, offset=0.5)


def test_chunked_rows_with_a_float32_weight_and_bf16_input(monkeypatch, device):
    monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 32)
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 32)
    args = rms_norm.args(device, shape=(6, 70), dtype=torch.bfloat16, weight_dtype=torch.float32)
    check(BACKEND, "rms_norm", args, casting_mode="llama", offset=1.0)


@pytest.mark.parametrize("chunked", [False, True], ids=["whole-rows", "chunked"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_in_place(monkeypatch, device, chunked, dtype):
    if chunked:
        monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
        monkeypatch.setattr(hardware, "CHUNK_BLOCK", 32)
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "1")
    assert plan_tiles(100).chunked == chunked
    check(BACKEND, "rms_norm", rms_norm.args(device, shape=(5, 100), dtype=dtype), in_place=True)


def _rms_norm_llama(x, weight, in_place):
    return BACKEND.op("rms_norm")(x, weight, 1e-6, 0.0, "llama", in_place)


def test_in_place_writes_grad_x_into_the_incoming_gradient(device):
    args = rms_norm.args(device, shape=(9, 40))
    x = args["x"].requires_grad_()
    buffer = torch.randn(9, 40, generator=torch.Generator().manual_seed(1)).to(device)
    _rms_norm_llama(x, args["weight"], in_place=True).backward(buffer)
    assert torch.equal(buffer, x.grad)


def test_in_place_leaves_a_broadcast_gradient_alone(device):
    # An expanded gradient has one row of memory for every row: grad_x must get its own buffer.
    args = rms_norm.args(device, shape=(6, 32))
    row = torch.randn(32, generator=torch.Generator().manual_seed(3)).to(device)
    grads = []
    for in_place in (False, True):
        x_in = args["x"].clone().requires_grad_()
        _rms_norm_llama(x_in, args["weight"], in_place).backward(row.expand(6, 32))
        grads.append(x_in.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)
    assert not torch.equal(grads[1][0], grads[1][1])


@pytest.mark.parametrize("shape", [(3, 0), (0, 5000)])
def test_empty_inputs(device, shape):
    check(BACKEND, "rms_norm", rms_norm.args(device, shape=shape))


@pytest.mark.parametrize("in_place", [False, True])
def test_fused_add_rms_norm_chunked(small_chunks, device, in_place):
    args = fused_add_rms_norm.args(device, shape=(11, 300), dtype=torch.bfloat16, residual_dtype=torch.float32)
    check(BACKEND, "fused_add_rms_norm", args, offset=1.0, in_place=in_place)


@pytest.mark.parametrize("chunked", [False, True], ids=["whole-rows", "chunked"])
def test_fused_add_rms_norm_with_an_unused_new_residual(monkeypatch, device, chunked):
    # No gradient reaches new_residual: grad_x is RMSNorm's alone, copied to grad_residual.
    if chunked:
        monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
        monkeypatch.setattr(hardware, "CHUNK_BLOCK", 64)
    args = fused_add_rms_norm.args(device, shape=(9, 130), dtype=torch.bfloat16, residual_dtype=torch.float32)
    check(BACKEND, "fused_add_rms_norm", args, unused_outputs=("new_residual",))
