"""rms_norm.py's own paths the shared suite may not reach (rms_norm and fused_add_rms_norm):
chunked wide rows, multi-row tiles, the predicate-free forward, grad_weight partials from many
programs, in-place gradients broadcast over rows, an unused new residual."""

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_core.ops import rms_norm as rms_norm_contract
from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import plan_tiles


@pytest.mark.parametrize("backward", [False, True])
def test_plan_short_rows_pack_several_per_tile(backward):
    plan = plan_tiles(64, backward=backward)
    assert not plan.chunked and plan.block_n == 64 and plan.block_m > 1


def test_plan_wide_rows_are_chunked():
    plan = plan_tiles(hardware.MAX_FUSED_BLOCK + 1)
    assert plan.chunked and plan.block_m == 1 and plan.block_n == hardware.CHUNK_BLOCK


@pytest.fixture
def chunked(monkeypatch):
    """Rows of more than 64 columns take the chunked plan, in 64-wide chunks."""
    monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 64)
    assert plan_tiles(150).chunked and plan_tiles(150, backward=True).chunked


@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
@pytest.mark.parametrize("has_weight", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_chunked_path_matches_reference(backend, device, chunked, casting_mode, has_weight, dtype):
    # The chunked plan on a small row: 300 columns in 64-wide chunks (a ragged last one).
    assert plan_tiles(300).chunked and plan_tiles(300, backward=True).chunked
    args = make_args("rms_norm", device, shape=(11, 300), dtype=dtype, weight=has_weight)
    check(backend, "rms_norm", args, casting_mode=casting_mode, offset=0.5)


def test_chunked_path_in_place(backend, device, monkeypatch):
    monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 32)
    check(backend, "rms_norm", make_args("rms_norm", device, shape=(5, 100), dtype=torch.float16), in_place=True)


def test_in_place_with_gradient_broadcast_over_rows(backend, device):
    # A gradient broadcast over rows (row stride 0) must not be written in place: rows would alias.
    args = make_args("rms_norm", device, shape=(6, 40))
    x, w = args["x"], args["weight"]
    dy = torch.randn(40, generator=torch.Generator().manual_seed(3)).to(device).expand(6, 40)
    xk, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    backend.op("rms_norm")(xk, w, 1e-6, 0.0, "llama", True).backward(dy)
    rms_norm_contract.math(xr, w, 1e-6, 0.0, "llama", False).backward(dy)
    torch.testing.assert_close(xk.grad, xr.grad, rtol=1e-4, atol=1e-5)


def test_zero_hidden_size(backend, device):
    x = torch.randn(3, 0, device=device, requires_grad=True)
    w = torch.randn(0, device=device, requires_grad=True)
    y = backend.op("rms_norm")(x, w, 1e-6, 0.0, "llama", False)
    y.sum().backward()
    assert y.shape == (3, 0) and x.grad.shape == (3, 0) and w.grad.shape == (0,)


@pytest.mark.parametrize("casting_mode", ["llama", "gemma", "none"])
def test_unmasked_forward_tiles(backend, device, casting_mode):
    # Rows a multiple of the tile and hidden a power of two take the predicate-free forward path.
    plan = plan_tiles(64)
    args = make_args("rms_norm", device, shape=(plan.block_m * 3, 64), dtype=torch.bfloat16)
    check(backend, "rms_norm", args, casting_mode=casting_mode, offset=1.0)


def test_grad_weight_sums_more_partials_than_one_reduce_tile(backend, device, monkeypatch):
    # More backward programs than REDUCE_ROWS: the partial-row reduction loops, with a ragged end.
    monkeypatch.setattr(hardware, "BACKWARD_PROGRAMS_PER_SM", 1)
    monkeypatch.setattr(hardware, "sm_count", lambda index=None: hardware.REDUCE_ROWS + 5)
    plan = plan_tiles(24, backward=True)
    check(backend, "rms_norm", make_args("rms_norm", device, shape=((hardware.REDUCE_ROWS + 5) * plan.block_m, 24)))


# -- fused_add_rms_norm (HAS_RESIDUAL) ---------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fused_add_chunked_rows(backend, device, chunked, dtype):
    # 150 columns: two full chunks and a ragged one; 7 rows over several backward programs.
    args = make_args("fused_add_rms_norm", device, shape=(7, 150), dtype=dtype, residual_dtype=torch.float32)
    check(backend, "fused_add_rms_norm", args, casting_mode="gemma", offset=0.5)


def test_fused_add_chunked_in_place_only_y(backend, device, chunked):
    args = make_args("fused_add_rms_norm", device, shape=(5, 100), dtype=torch.float16)
    check(backend, "fused_add_rms_norm", args, unused_outputs=("new_residual",), in_place=True)


def test_fused_add_multi_row_tiles_and_several_programs(backend, device):
    # Short rows pack several per tile (forward and backward) and the backward grid has
    # several programs (the interpreter stands in 4 SMs), each with its own partial row.
    assert plan_tiles(24).block_m > 1 and plan_tiles(24, backward=True).block_m > 1
    assert hardware.sm_count() > 1 or torch.cuda.is_available()
    check(backend, "fused_add_rms_norm", make_args("fused_add_rms_norm", device, shape=(45, 24)))


def test_fused_add_in_place_with_gradient_broadcast_over_rows(backend, device):
    args = make_args("fused_add_rms_norm", device, shape=(6, 40))
    x, r, w = args["x"], args["residual"], args["weight"]
    dy = torch.randn(40, generator=torch.Generator().manual_seed(3)).to(device).expand(6, 40)
    xk = x.clone().requires_grad_()
    y, _ = backend.op("fused_add_rms_norm")(xk, r, w, 1e-6, 0.0, "llama", True)
    y.backward(dy)
    xr = x.clone().requires_grad_()
    y_ref = torch.nn.functional.rms_norm(xr + r, (40,), w, 1e-6)
    y_ref.backward(dy)
    torch.testing.assert_close(xk.grad, xr.grad, rtol=1e-4, atol=1e-5)
