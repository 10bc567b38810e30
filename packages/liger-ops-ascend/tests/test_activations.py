"""Code paths of the 1.2 kernels the shared suite may not reach, forced and checked against
the float64 oracle: elementwise blocks walked by few programs (ragged last block), chunked
softmax/sparsemax rows (a small UB), several rows per tile, rope head blocks."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance._glu_check import check_glu, make_glu_inputs
from liger_core.conformance.qwen2vl_mrope_check import check_qwen2vl_mrope
from liger_core.conformance.qwen2vl_mrope_check import make_inputs as mrope_inputs
from liger_core.conformance.rope_check import check_rope
from liger_core.conformance.rope_check import make_inputs as rope_inputs
from liger_core.conformance.softmax_check import check_softmax
from liger_core.conformance.softmax_check import make_inputs as softmax_inputs
from liger_core.conformance.sparsemax_check import check_sparsemax
from liger_core.conformance.sparsemax_check import make_inputs as sparsemax_inputs
from liger_core.device import npu_available
from liger_core.ops import geglu as geglu_contract
from liger_core.ops import swiglu as swiglu_contract

from liger_ops_ascend import BACKEND, _gated, hardware, rope, softmax, sparsemax

DEVICE = "npu" if npu_available() else "cpu"


def _hw():
    return hardware.current(torch.device(DEVICE))


@pytest.fixture
def few_cores(monkeypatch):
    monkeypatch.setenv("LIGER_ASCEND_VECTOR_CORES", "3")


@pytest.fixture
def small_ub(monkeypatch):
    # A 16 KiB UB (8 KiB budget): a few hundred columns no longer fit one tile.
    monkeypatch.setenv("LIGER_ASCEND_UB_BYTES", str(16 * 1024))


@pytest.mark.parametrize("op,act,math", [("swiglu", _gated.SILU, swiglu_contract.math),
                                         ("geglu", _gated.GELU_TANH, geglu_contract.math)], ids=["swiglu", "geglu"])  # fmt: skip
@pytest.mark.parametrize("in_place", [False, True], ids=["copy", "inplace"])
def test_glu_sub_blocks_over_few_programs(small_ub, few_cores, op, act, math, in_place):
    p = _gated.plan(act, "backward", 7 * 301, torch.bfloat16, _hw())
    assert p.programs == 3 and p.n_iters > 1 and (7 * 301) % p.block
    a, b, dy = make_glu_inputs((7, 301), torch.bfloat16, DEVICE)
    check_glu(BACKEND, op, math, a, b, dy, in_place)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_softmax_chunked_and_multi_row(small_ub, few_cores, dtype):
    assert softmax.plan("forward", 5, 700, dtype, _hw()).chunked
    x, dy = softmax_inputs((5, 700), dtype, DEVICE)
    check_softmax(BACKEND, x * 4, dy)
    p = softmax.plan("backward", 40, 20, dtype, _hw())
    assert p.block_m > 1 and p.n_iters > 1
    x, dy = softmax_inputs((40, 20), dtype, DEVICE)
    check_softmax(BACKEND, x, dy)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_sparsemax_chunked_and_multi_row(small_ub, few_cores, dtype):
    assert sparsemax.plan("forward", 5, 700, dtype, _hw()).chunked
    x, dy = sparsemax_inputs((5, 700), dtype, DEVICE)
    check_sparsemax(BACKEND, x, dy)
    x, dy = sparsemax_inputs((6, 40, 3), dtype, DEVICE)
    assert sparsemax.plan("backward", 18, 40, dtype, _hw()).block_m > 1
    check_sparsemax(BACKEND, x, dy, dim=1)


@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_rope_head_blocks(small_ub, few_cores, unsqueeze_dim):
    # 128-dim heads in a small UB: a few heads per block, q and k heads not multiples of it.
    p = rope.plan("rope_forward", 2 * 5, 13, 128, (torch.float32,), torch.float32, _hw())
    assert 1 < p.block_h < 13 and 13 % p.block_h
    q, k, cos, sin, dq, dk = rope_inputs(2, 13, 5, 5, 128, torch.float32, DEVICE, unsqueeze_dim, True, cos_batch=2)
    check_rope(BACKEND, q, k, cos, sin, dq, dk, unsqueeze_dim=unsqueeze_dim)


def test_mrope_head_blocks(small_ub, few_cores):
    q, k, cos, sin, dq, dk = mrope_inputs(2, 13, 5, 5, 128, torch.bfloat16, DEVICE)
    check_qwen2vl_mrope(BACKEND, q, k, cos, sin, dq, dk, (16, 24, 24))
