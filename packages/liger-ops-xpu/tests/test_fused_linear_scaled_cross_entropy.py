"""XPU fused_linear_scaled_cross_entropy paths: several token chunks (the last one ragged), rows
over several vocabulary blocks (per-lane running statistics combined at the end), bf16 with an
fp32 lm_head, and each output's gradient alone. Caps are lowered so shapes stay small; checked
against the declaration's float64 oracle."""

import pytest
import torch
from liger_core.conformance.check import check, make_args

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu._tiling import plan_chunks

OP = "fused_linear_scaled_cross_entropy"


@pytest.fixture
def small_tiles(monkeypatch):
    monkeypatch.setattr(hardware, "LOSS_VOCAB_BLOCK", 16)
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 4 * 50 * 2)


@pytest.mark.parametrize("unused", [(), ("entropy",), ("nll",)], ids=["both", "nll-only", "entropy-only"])
def test_several_chunks_and_vocab_blocks(device, small_tiles, unused):
    assert plan_chunks(23, 50, bytes_per_logit=2) == 4  # 6 chunks of bf16 logits, the last one ragged
    args = make_args(OP, device, shape=(23, 16, 50), seed=51)
    check(BACKEND, OP, args, grad_scalar=0.5, temperature=0.8, unused_outputs=unused)


def test_bf16_with_fp32_weight_several_chunks(device, small_tiles):
    args = make_args(OP, device, shape=(23, 16, 50), dtype=torch.bfloat16, weight_dtype=torch.float32, seed=52)
    check(BACKEND, OP, args, temperature=1.6)
