"""CUDA-specific RMSNorm paths the shared suite may not reach: chunked wide rows, multi-row tiles."""

import pytest
import torch

from liger_core.conformance.rms_norm import check_rms_norm, make_inputs
from liger_core.ops.rms_norm import math
from liger_ops_cuda import BACKEND, hardware
from liger_ops_cuda.rms_norm import plan_tiles

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("backward", [False, True])
def test_plan_short_rows_pack_several_per_tile(backward):
    plan = plan_tiles(64, backward=backward)
    assert not plan.chunked and plan.block_n == 64 and plan.block_m > 1


def test_plan_wide_rows_are_chunked():
    plan = plan_tiles(hardware.MAX_FUSED_BLOCK + 1)
    assert plan.chunked and plan.block_m == 1 and plan.block_n == hardware.CHUNK_BLOCK


@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
@pytest.mark.parametrize("has_weight", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_chunked_path_matches_reference(monkeypatch, casting_mode, has_weight, dtype):
    # Force the chunked plan on a small row: 300 columns in 64-wide chunks (a ragged last one).
    monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 64)
    assert plan_tiles(300).chunked and plan_tiles(300, backward=True).chunked
    x, w, dy = make_inputs((11, 300), dtype, DEVICE, has_weight=has_weight)
    check_rms_norm(BACKEND, x, w, dy, casting_mode=casting_mode, offset=0.5)


def test_chunked_path_in_place(monkeypatch):
    monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 32)
    x, w, dy = make_inputs((5, 100), torch.float16, DEVICE)
    check_rms_norm(BACKEND, x, w, dy, in_place=True)


def test_in_place_with_gradient_broadcast_over_rows():
    # A gradient broadcast over rows (row stride 0) must not be written in place: rows would alias.
    x, w, _ = make_inputs((6, 40), torch.float32, DEVICE)
    dy = torch.randn(40, generator=torch.Generator().manual_seed(3)).to(DEVICE).expand(6, 40)
    xk, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    BACKEND.ops["rms_norm"](xk, w, 1e-6, 0.0, "llama", True).backward(dy)
    math(xr, w, 1e-6, 0.0, "llama").backward(dy)
    torch.testing.assert_close(xk.grad, xr.grad, rtol=1e-4, atol=1e-5)


def test_zero_hidden_size():
    x = torch.randn(3, 0, device=DEVICE, requires_grad=True)
    w = torch.randn(0, device=DEVICE, requires_grad=True)
    y = BACKEND.ops["rms_norm"](x, w)
    y.sum().backward()
    assert y.shape == (3, 0) and x.grad.shape == (3, 0) and w.grad.shape == (0,)


@pytest.mark.parametrize("casting_mode", ["llama", "gemma", "none"])
def test_unmasked_forward_tiles(casting_mode):
    # Rows a multiple of the tile and hidden a power of two take the predicate-free forward path.
    plan = plan_tiles(64)
    x, w, dy = make_inputs((plan.block_m * 3, 64), torch.bfloat16, DEVICE)
    check_rms_norm(BACKEND, x, w, dy, casting_mode=casting_mode, offset=1.0)


def test_grad_weight_sums_more_partials_than_one_reduce_tile(monkeypatch):
    # More backward programs than REDUCE_ROWS: the partial-row reduction loops, with a ragged end.
    monkeypatch.setattr(hardware, "BACKWARD_PROGRAMS_PER_SM", 1)
    monkeypatch.setattr(hardware, "sm_count", lambda index=None: hardware.REDUCE_ROWS + 5)
    plan = plan_tiles(24, backward=True)
    x, w, dy = make_inputs(((hardware.REDUCE_ROWS + 5) * plan.block_m, 24), torch.float32, DEVICE)
    check_rms_norm(BACKEND, x, w, dy)
