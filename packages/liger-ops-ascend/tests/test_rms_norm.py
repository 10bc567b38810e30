"""Ascend RMSNorm and fused_add_rms_norm code paths the shared suite may not reach, each forced
and checked against the float64 oracle: several rows per tile, chunked wide rows (one and
several rows per tile), programs that loop over several row blocks, and that every launch
goes through the guard."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import fused_add_rms_norm as fused_add_rms_norm_op
from liger_core.ops import rms_norm as rms_norm_op

from liger_ops_ascend import hardware, launch, rms_norm


def _plans(shape, dtype, w_dtype, hw, casting_mode="llama"):
    n_rows = 1
    for s in shape[:-1]:
        n_rows *= s
    return (
        rms_norm.plan_tiles("forward", n_rows, shape[-1], dtype, w_dtype, casting_mode, hw),
        rms_norm.plan_tiles("backward", n_rows, shape[-1], dtype, w_dtype, casting_mode, hw),
    )


@pytest.mark.parametrize("casting_mode", ["llama", "gemma", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_multi_row_tiles(few_cores, backend, device, current_hw, casting_mode, dtype):
    fwd, bwd = _plans((45, 48), dtype, dtype, current_hw())
    assert not fwd.chunked and fwd.block_m > 1 and bwd.block_m > 1
    assert fwd.n_iters > 1 and fwd.programs == 3
    args = rms_norm_op.args(device, shape=(45, 48), dtype=dtype)
    check(backend, "rms_norm", args, casting_mode=casting_mode, offset=0.5)


def test_multi_row_tiles_no_weight_in_place(few_cores, backend, device, current_hw):
    assert _plans((3, 15, 20), torch.float16, None, current_hw())[1].block_m > 1
    args = rms_norm_op.args(device, shape=(3, 15, 20), dtype=torch.float16, weight=False)
    check(backend, "rms_norm", args, in_place=True)


@pytest.mark.parametrize("casting_mode", ["llama", "gemma", "none"])
@pytest.mark.parametrize("has_weight", [True, False], ids=["w", "now"])
def test_chunked_wide_rows(small_ub, backend, device, current_hw, casting_mode, has_weight):
    shape = (7, 300)
    fwd, bwd = _plans(shape, torch.bfloat16, torch.bfloat16 if has_weight else None, current_hw(), casting_mode)
    assert fwd.chunked and bwd.chunked and fwd.block_m == 1 and bwd.block_m == 1
    assert 300 % bwd.block_n != 0  # a ragged last chunk
    args = rms_norm_op.args(device, shape=shape, dtype=torch.bfloat16, weight=has_weight)
    check(backend, "rms_norm", args, casting_mode=casting_mode, offset=1.0)


@pytest.mark.parametrize("in_place", [False, True], ids=["copy", "inplace"])
def test_chunked_wide_rows_fp32_weight_with_fp16_input(small_ub, backend, device, current_hw, in_place):
    assert _plans((5, 200), torch.float16, torch.float32, current_hw())[1].chunked
    args = rms_norm_op.args(device, shape=(5, 200), dtype=torch.float16, weight_dtype=torch.float32)
    check(backend, "rms_norm", args, in_place=in_place, offset=0.25)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_chunked_multi_row_tiles(monkeypatch, few_cores, backend, device, current_hw, dtype):
    # Chunks capped at 32 columns while the UB has room: tiles of several rows x 32 columns.
    monkeypatch.setattr(hardware, "MAX_BLOCK_N", 32)
    fwd, bwd = _plans((40, 100), dtype, dtype, current_hw())
    assert fwd.chunked and bwd.chunked and fwd.block_m > 1 and bwd.block_m > 1 and fwd.n_iters > 1
    check(backend, "rms_norm", rms_norm_op.args(device, shape=(40, 100), dtype=dtype), casting_mode="gemma", offset=1.0)


@pytest.mark.parametrize("n_cols", [40, 300], ids=["single", "chunked"])
def test_in_place_with_row_broadcast_grad(small_ub, backend, device, n_cols):
    # A gradient broadcast over rows (stride 0, unit column stride) must not receive grad_x
    # in place: its rows alias one another. (check() draws dense gradients: called by hand.)
    args = rms_norm_op.args(device, shape=(6, n_cols))
    x, w = args["x"], args["weight"]
    g = torch.randn(n_cols, generator=torch.Generator().manual_seed(3)).to(device)
    dy = g.expand(6, n_cols)
    x_in = x.clone().requires_grad_()
    backend.op("rms_norm")(x_in, w, 1e-6, 0.0, "llama", True).backward(dy)
    x64 = x.cpu().double().requires_grad_()
    rms_norm_op.math(x64, w.cpu().double(), 1e-6, 0.0, "llama", True).backward(dy.cpu().double())
    torch.testing.assert_close(x_in.grad.cpu().double(), x64.grad, rtol=1e-4, atol=1e-5)
    assert torch.equal(g, dy[0]) and torch.equal(dy[0], dy[5])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fused_add_rms_norm_chunked(small_ub, backend, device, current_hw, dtype):
    p = rms_norm.plan_tiles("backward", 5, 300, dtype, torch.float32, "llama", current_hw(), torch.float32)
    assert p.chunked and p.kernels[1].kernel == "fused_add_rms_norm_backward_chunked"
    args = fused_add_rms_norm_op.args(
        device, shape=(5, 300), dtype=dtype, weight_dtype=torch.float32, residual_dtype=torch.float32
    )
    check(backend, "fused_add_rms_norm", args, offset=1.0)
    # new_residual feeds nothing: grad_x is the RMSNorm part alone, written in place.
    check(backend, "fused_add_rms_norm", args, unused_outputs=("new_residual",), in_place=True)


def test_fused_add_rms_norm_multi_row(few_cores, backend, device, current_hw):
    p = rms_norm.plan_tiles("forward", 45, 48, torch.float16, torch.float16, "gemma", current_hw(), torch.float16)
    assert p.block_m > 1 and p.n_iters > 1
    args = fused_add_rms_norm_op.args(device, shape=(45, 48), dtype=torch.float16)
    check(backend, "fused_add_rms_norm", args, casting_mode="gemma")


@pytest.mark.parametrize("shape", [(4, 40), (4, 300)], ids=["single", "chunked"])
def test_every_launch_goes_through_the_guard(monkeypatch, small_ub, backend, device, shape):
    seen = []
    real_check = launch.check
    monkeypatch.setattr(launch, "check", lambda plan, hw: (seen.append(plan.kernel), real_check(plan, hw)))
    check(backend, "rms_norm", rms_norm_op.args(device, shape=shape))
    if shape[1] == 40:
        assert seen == ["rms_norm_forward", "rms_norm_backward"]
    else:
        assert seen == ["rms_norm_forward_chunked", "rms_norm_backward_coef", "rms_norm_backward_chunked"]


def test_guard_refuses_an_over_budget_plan_before_launching():
    # The planner never makes such a plan; force one by shrinking the budget after planning.
    calls = []

    class FakeKernel:
        def __getitem__(self, grid):
            return lambda *a, **k: calls.append(grid)

    hw = hardware.for_soc("Ascend910B2")
    p = rms_norm.plan_tiles("backward", 1000, 4096, torch.bfloat16, torch.bfloat16, "llama", hw)
    tiny = hardware.Hardware("Ascend910B2", 32 * 1024, hw.vector_cores, hw.ai_cores)
    with pytest.raises(launch.AscendLaunchError, match=r"rms_norm_backward_coef: its tiles need \d+ bytes"):
        launch.launch(FakeKernel(), p.kernels[0], tiny)
    assert calls == []
    launch.launch(FakeKernel(), p.kernels[0], hw)
    assert calls == [(48,)]
