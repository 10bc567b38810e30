"""XPU-specific fused linear JSD paths: several token chunks, and for 16-bit inputs the
fp32-output GEMM of _matmul.py with tiles of 16 (several in every direction). Caps are lowered
so shapes stay small; checked against the declaration's float64 oracle."""

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import fused_linear_jsd

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu._matmul import plan_matmul


@pytest.mark.parametrize("beta,dtype", [(0.0, torch.float32), (0.3, torch.bfloat16), (1.0, torch.float16)])
def test_fused_linear_jsd_several_chunks(monkeypatch, device, beta, dtype):
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 3 * 40 * 8)
    for name in ("MATMUL_BLOCK_M", "MATMUL_BLOCK_N", "MATMUL_BLOCK_K"):
        monkeypatch.setattr(hardware, name, 16)
    assert plan_matmul(3, 40, 24) == (16, 16, 16)
    args = fused_linear_jsd.args(device, shape=(11, 24, 36, 40), dtype=dtype, seed=5)
    check(BACKEND, "fused_linear_jsd", args, jsd_beta=beta, temperature=2.0, grad_scalar=2.0)
