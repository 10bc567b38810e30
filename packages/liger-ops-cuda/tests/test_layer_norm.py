"""layer_norm.py's own paths: chunked wide rows with shifted sums, multi-row tiles, partials
from one program, parameters without gradients."""

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import plan_tiles


@pytest.fixture
def chunked(monkeypatch):
    """Rows of more than 64 columns take the chunked plan, in 64-wide chunks."""
    monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 64)
    assert plan_tiles(150).chunked and plan_tiles(150, backward=True).chunked


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_chunked_rows(backend, device, chunked, dtype):
    # 150 columns: two full chunks and a ragged one; a mean of 51.5: shifted sums keep it exact.
    check(backend, "layer_norm", make_args("layer_norm", device, shape=(7, 150), dtype=dtype, mean=51.5))


def test_chunked_outlying_first_chunk(backend, device, chunked):
    args = make_args("layer_norm", device, shape=(3, 150))
    args["x"] = args["x"].clone()
    args["x"][:, :64] += 40.0
    check(backend, "layer_norm", args)


def test_multi_row_tiles_and_several_programs(backend, device):
    assert plan_tiles(24).block_m > 1 and plan_tiles(24, backward=True).block_m > 1
    args = make_args("layer_norm", device, shape=(45, 24), dtype=torch.bfloat16, param_dtype=torch.float32)
    check(backend, "layer_norm", args)


def test_partials_from_one_program(backend, device, monkeypatch):
    monkeypatch.setattr(hardware, "sm_count", lambda device_index=None: 1)
    check(backend, "layer_norm", make_args("layer_norm", device, shape=(9, 40)))


def test_parameters_without_grad_skip_partials(backend, device):
    # weight and bias need no gradient: the backward writes no partial rows.
    check(backend, "layer_norm", make_args("layer_norm", device, shape=(6, 32)), frozen=("weight", "bias"))
