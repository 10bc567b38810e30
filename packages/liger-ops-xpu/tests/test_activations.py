"""XPU-specific paths of the 1.2 ops that the shared suite may not reach with the real caps:
multi-block flat grids, rope heads in several chunks, chunked softmax/sparsemax rows with
several rows per tile, an unused rope output. Caps are lowered so shapes stay small."""

import pytest
import torch
from liger_core.conformance import qwen2vl_mrope_check, rope_check, softmax_check, sparsemax_check, swiglu_check
from liger_core.conformance._glu_check import make_glu_inputs

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu._tiling import plan_flat, plan_tiles

DEVICE = "xpu" if hardware.xpu_available() else "cpu"

pytestmark = pytest.mark.filterwarnings("error:Conversion of an array with ndim > 0:DeprecationWarning")


@pytest.fixture
def small_chunks(monkeypatch):
    """Rows wider than 64 columns go in 64-wide chunks, 4 rows per tile."""
    monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 64)
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 256)


@pytest.mark.parametrize("in_place", [False, True])
def test_swiglu_several_blocks_with_a_ragged_tail(monkeypatch, in_place):
    monkeypatch.setattr(hardware, "ELEMENTWISE_BLOCK", 128)
    assert plan_flat(7 * 45).programs == 3
    a, b, dy = make_glu_inputs((7, 45), torch.bfloat16, DEVICE)
    swiglu_check.check_swiglu(BACKEND, a, b, dy, in_place=in_place)


@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_rope_heads_in_several_chunks(monkeypatch, unsqueeze_dim):
    # 8 columns per half, 16-element tiles: 2 heads per chunk, 5 q heads -> 3 chunks, 3 k heads -> 2.
    monkeypatch.setattr(hardware, "ROPE_TILE_ELEMENTS", 16)
    q, k, cos, sin, dq, dk = rope_check.make_inputs(2, 5, 3, 3, 16, torch.float32, DEVICE, unsqueeze_dim, cos_batch=2)
    rope_check.check_rope(BACKEND, q, k, cos, sin, dq, dk, unsqueeze_dim=unsqueeze_dim)


def test_mrope_heads_in_several_chunks(monkeypatch):
    monkeypatch.setattr(hardware, "ROPE_TILE_ELEMENTS", 16)
    q, k, cos, sin, dq, dk = qwen2vl_mrope_check.make_inputs(2, 4, 3, 3, 16, torch.bfloat16, DEVICE)
    qwen2vl_mrope_check.check_qwen2vl_mrope(BACKEND, q, k, cos, sin, dq, dk, [2, 3, 3])


def test_rope_gradient_through_q_only():
    q, k, cos, sin, dq, _ = rope_check.make_inputs(1, 2, 1, 3, 8, torch.float32, DEVICE)
    q_in, k_in = q.clone().requires_grad_(), k.clone().requires_grad_()
    q_out, _ = BACKEND.ops["rope"](q_in, k_in, cos, sin)
    q_out.backward(dq)
    assert k_in.grad is None or not k_in.grad.any()
    q64 = q.double().requires_grad_()
    rope_check.contract.math(q64, k.double(), cos.double(), sin.double())[0].backward(dq.double())
    torch.testing.assert_close(q_in.grad.double(), q64.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_softmax_chunked_multi_row_tiles(small_chunks, dtype):
    plan = plan_tiles(300)
    assert plan.chunked and plan.block_m == 4
    x, dy = softmax_check.make_inputs((7, 300), dtype, DEVICE)
    x[:, 64:128] = float("-inf")  # a whole chunk masked: the online max stays finite
    softmax_check.check_softmax(BACKEND, x, dy)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_sparsemax_chunked_multi_row_tiles(small_chunks, dtype):
    x, dy = sparsemax_check.make_inputs((7, 300), dtype, DEVICE)
    sparsemax_check.check_sparsemax(BACKEND, x, dy)


def test_sparsemax_middle_dim_and_wide_spread():
    # Spread far beyond 1: the support is one or two entries; dim=1 of a 3-D tensor.
    x, dy = sparsemax_check.make_inputs((3, 40, 5), torch.float32, DEVICE)
    sparsemax_check.check_sparsemax(BACKEND, x * 30.0, dy, dim=1)
