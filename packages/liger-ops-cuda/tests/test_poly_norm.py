"""poly_norm.py's own paths: chunked wide rows (its smaller backward chunks), multi-row tiles."""

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware
from liger_ops_cuda.poly_norm import plan_backward, plan_forward


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_chunked_rows(backend, device, monkeypatch, dtype):
    # 150 columns in 64-wide chunks: two full chunks and a ragged one, forward and backward.
    monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 64)
    assert plan_forward(150).chunked and plan_backward(150).chunked
    check(backend, "poly_norm", make_args("poly_norm", device, shape=(7, 150), dtype=dtype))


def test_multi_row_tiles_and_several_programs(backend, device):
    assert plan_forward(24).block_m > 1 and plan_backward(24).block_m > 1
    assert hardware.sm_count() > 1 or torch.cuda.is_available()
    check(backend, "poly_norm", make_args("poly_norm", device, shape=(45, 24)))
