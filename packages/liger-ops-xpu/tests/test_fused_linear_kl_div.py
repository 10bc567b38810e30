"""fused_linear_kl_div's own path: several token chunks, the last one ragged, and for 16-bit
inputs the fp32-output GEMM of _matmul.py."""

import pytest
import torch
from liger_core.conformance.check import check, make_args

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu._tiling import plan_chunks


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_several_chunks(device, monkeypatch, dtype):
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 8 * 70 * 8)
    assert plan_chunks(30, 70, bytes_per_logit=8) == 8  # 4 chunks, the last ragged
    args = make_args("fused_linear_kl_div", device, shape=(30, 8, 70), dtype=dtype, seed=32)
    check(BACKEND, "fused_linear_kl_div", args, grad_scalar=0.5, temperature=0.8)
