"""Code paths of the 1.1 norm kernels the shared suite may not reach, each forced and checked
against the float64 oracle: several rows per tile with programs looping over several row
blocks, chunked wide rows (a small UB), and groups split over channel and spatial chunks."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.dyt_check import check_dyt
from liger_core.conformance.dyt_check import make_inputs as dyt_inputs
from liger_core.conformance.fused_add_rms_norm_check import check_fused_add_rms_norm
from liger_core.conformance.fused_add_rms_norm_check import make_inputs as fused_inputs
from liger_core.conformance.group_norm_check import check_group_norm
from liger_core.conformance.group_norm_check import make_inputs as group_inputs
from liger_core.conformance.layer_norm_check import check_layer_norm
from liger_core.conformance.layer_norm_check import make_inputs as layer_inputs
from liger_core.conformance.poly_norm_check import check_poly_norm
from liger_core.conformance.poly_norm_check import make_inputs as poly_inputs
from liger_core.device import npu_available

from liger_ops_ascend import BACKEND, dyt, group_norm, hardware, layer_norm, poly_norm, rms_norm

DEVICE = "npu" if npu_available() else "cpu"


def _hw():
    return hardware.current(torch.device(DEVICE))


@pytest.fixture
def few_cores(monkeypatch):
    # 3 programs: each loops over several row blocks, the last iteration partly masked.
    monkeypatch.setenv("LIGER_ASCEND_VECTOR_CORES", "3")


@pytest.fixture
def small_ub(monkeypatch):
    # A 16 KiB UB (8 KiB budget) makes a few hundred columns too wide for one tile.
    monkeypatch.setenv("LIGER_ASCEND_UB_BYTES", str(16 * 1024))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fused_add_rms_norm_chunked(small_ub, dtype):
    p = rms_norm.plan("backward", 5, 300, dtype, torch.float32, "llama", _hw(), torch.float32)
    assert p.chunked and p.kernels[1].kernel == "fused_add_rms_norm_backward_chunked"
    x, r, w, dy, ds = fused_inputs((5, 300), dtype, DEVICE, weight_dtype=torch.float32, residual_dtype=torch.float32)
    check_fused_add_rms_norm(BACKEND, x, r, w, dy, ds, offset=1.0)
    check_fused_add_rms_norm(BACKEND, x, r, w, dy, None, in_place=True)


def test_fused_add_rms_norm_multi_row(few_cores):
    p = rms_norm.plan("forward", 45, 48, torch.float16, torch.float16, "gemma", _hw(), torch.float16)
    assert p.block_m > 1 and p.n_iters > 1
    x, r, w, dy, ds = fused_inputs((45, 48), torch.float16, DEVICE)
    check_fused_add_rms_norm(BACKEND, x, r, w, dy, ds, casting_mode="gemma")


@pytest.mark.parametrize("params", ["wb", "w", "none"])
def test_layer_norm_chunked(small_ub, params):
    fwd = layer_norm.plan("forward", 7, 300, torch.bfloat16, torch.bfloat16, torch.bfloat16, _hw())
    assert fwd.chunked and 300 % fwd.block_n
    x, w, b, dy = layer_inputs((7, 300), torch.bfloat16, DEVICE, has_weight=params != "none", has_bias=params == "wb")
    check_layer_norm(BACKEND, x + 50, w, b, dy)  # a mean far from zero: the shifted sums


def test_layer_norm_multi_row_and_chunked_multi_row(monkeypatch, few_cores):
    x, w, b, dy = layer_inputs((45, 100), torch.float32, DEVICE, param_dtype=torch.float32)
    assert layer_norm.plan("backward", 45, 100, torch.float32, torch.float32, torch.float32, _hw()).block_m > 1
    check_layer_norm(BACKEND, x, w, b, dy)
    monkeypatch.setattr(layer_norm, "MAX_BLOCK_N", 32)
    p = layer_norm.plan("backward", 45, 100, torch.float32, torch.float32, torch.float32, _hw())
    assert p.chunked and p.block_m > 1 and p.n_iters > 1
    check_layer_norm(BACKEND, x, w, b, dy)


@pytest.mark.parametrize("shape,groups", [((3, 12, 40, 5), 3), ((2, 6, 700), 2)], ids=["channels", "spatial"])
def test_group_norm_chunked(small_ub, few_cores, shape, groups):
    p = group_norm.plan(shape[0], shape[1], groups, shape[2] * (shape[3] if len(shape) > 3 else 1), torch.float32,
                        torch.float32, torch.float32, _hw())  # fmt: skip
    assert not p.single_tile and p.n_iters > 1
    x, w, b, dy = group_inputs(shape, torch.float32, DEVICE)
    check_group_norm(BACKEND, x, w, b, dy, groups)
    check_group_norm(BACKEND, x, None, None, dy, groups)


def test_group_norm_many_groups_single_tile(few_cores):
    x, w, b, dy = group_inputs((5, 16, 3), torch.bfloat16, DEVICE)
    assert group_norm.plan(5, 16, 8, 3, torch.bfloat16, torch.bfloat16, torch.bfloat16, _hw()).single_tile
    check_group_norm(BACKEND, x, w, b, dy, 8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_poly_norm_chunked_and_multi_row(monkeypatch, small_ub, few_cores, dtype):
    x, w, b, dy = poly_inputs((5, 300), dtype, DEVICE)
    assert poly_norm.plan("backward", 5, 300, dtype, _hw()).chunked
    check_poly_norm(BACKEND, x, w, b, dy)
    x, w, b, dy = poly_inputs((40, 20), dtype, DEVICE)
    p = poly_norm.plan("backward", 40, 20, dtype, _hw())
    assert p.block_m > 1 and p.n_iters > 1
    check_poly_norm(BACKEND, x, w, b, dy)


@pytest.mark.parametrize("has_beta", [True, False], ids=["beta", "nobeta"])
def test_dyt_chunked_multi_row(monkeypatch, few_cores, has_beta):
    monkeypatch.setattr(dyt, "MAX_BLOCK_N", 32)
    p = dyt.plan("backward", 45, 100, torch.float32, torch.float32, torch.float32, _hw())
    assert p.chunked and p.block_m > 1 and p.n_iters > 1
    x, alpha, gamma, beta, dy = dyt_inputs((45, 100), torch.float32, DEVICE, has_beta=has_beta)
    check_dyt(BACKEND, x, alpha, gamma, beta, dy)
