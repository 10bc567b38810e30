"""fused_linear_scaled_cross_entropy's own paths: several token chunks (the last one ragged), rows
over several vocabulary blocks in the row forward and several tiles in the in-place backward,
bf16 activations with an fp32 lm_head, and each output's gradient alone."""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import plan_chunks

OP = "fused_linear_scaled_cross_entropy"


@pytest.fixture
def small_tiles(monkeypatch):
    """Token chunks of 8 logits rows of 70, and vocabulary blocks of 32 in both kernels."""
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 8 * 70 * 4)  # 8 rows of fp32 logits
    monkeypatch.setattr(hardware, "FUSED_LINEAR_ROW_MULTIPLE", 4)
    monkeypatch.setattr(hardware, "CE_ROW_BLOCK", 32)
    monkeypatch.setattr(hardware, "DIV_BLOCK", 32)


@pytest.mark.parametrize("unused", [(), ("entropy",), ("nll",)], ids=["both", "nll-only", "entropy-only"])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_several_chunks_and_vocab_blocks(backend, device, small_tiles, temperature, unused):
    assert plan_chunks(37, 70, bytes_per_logit=4) == 8
    args = make_args(OP, device, shape=(37, 16, 70), seed=31)
    check(backend, OP, args, grad_scalar=0.75, temperature=temperature, unused_outputs=unused)


def test_bf16_with_fp32_weight_several_chunks(backend, device, small_tiles):
    args = make_args(OP, device, shape=(30, 16, 70), dtype=torch.bfloat16, weight_dtype=torch.float32, seed=32)
    check(backend, OP, args, temperature=1.7)


def test_frozen_input_several_chunks(backend, device, small_tiles):
    args = make_args(OP, device, shape=(20, 8, 70), seed=33)
    check(backend, OP, args, frozen=("input",), temperature=0.9)
