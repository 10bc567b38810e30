"""The distillation losses' own path: several token chunks, the last one ragged, and for 16-bit
inputs the fp32-output GEMM of _matmul.py."""

import pytest
import torch
from liger_core.conformance.check import check, make_args

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu._tiling import plan_chunks


@pytest.mark.parametrize("op", ["fused_linear_cosine_similarity", "fused_linear_jsd_loss"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_several_chunks(device, monkeypatch, op, dtype):
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 8 * 70 * 8)
    assert plan_chunks(30, 70, bytes_per_logit=8) == 8  # 4 chunks, the last ragged
    args = make_args(op, device, shape=(30, 8, 12, 70), dtype=dtype, seed=32, bias=True)
    check(BACKEND, op, args, grad_scalar=0.5, beta=0.3, temperature=1.5)
