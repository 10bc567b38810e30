"""XPU-specific fused linear cross-entropy paths: several token chunks (the last one ragged) and
several vocabulary blocks, scalar and per-row incoming gradients. Caps are lowered so shapes
stay small; checked against the declaration's float64 oracle."""

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import fused_linear_cross_entropy

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu._tiling import plan_chunks


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_flce_several_chunks(monkeypatch, device, reduction):
    monkeypatch.setattr(hardware, "LOSS_VOCAB_BLOCK", 16)
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 4 * 50 * 2)
    assert plan_chunks(23, 50, bytes_per_logit=2) == 4  # 6 chunks of bf16 logits, the last one ragged
    args = fused_linear_cross_entropy.args(
        device, shape=(23, 16, 50), dtype=torch.bfloat16, seed=2, bias=True, weighted=True
    )
    check(
        BACKEND, "fused_linear_cross_entropy", args, lse_square_scale=1e-3, label_smoothing=0.1, reduction=reduction,
        accum_dtype=torch.float32, grad_scalar=0.5,
    )  # fmt: skip
