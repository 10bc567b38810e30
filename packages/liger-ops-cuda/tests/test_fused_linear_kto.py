"""fused_linear_kto's own paths here: several chunks of whole sequences (one sequence, and a
ragged last chunk) through liger-core's unpaired orchestration, an fp32 lm_head with bf16 hidden
states, a frozen policy lm_head (input gradient only)."""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_core.ops import _preference as P
from liger_ops_cuda import hardware

OPTIONS = {"bias": True, "ref_bias": True, "desirable_weight": 1.3, "undesirable_weight": 0.7}


def kto_args(device, batch, seq, hidden, vocab, **params):
    return make_args("fused_linear_kto", device, shape=(batch, seq, hidden, vocab), **params)


@pytest.mark.parametrize("sequences_per_chunk", [1, 2])
@pytest.mark.parametrize("average_log_prob", [False, True])
def test_several_chunks(backend, device, monkeypatch, sequences_per_chunk, average_log_prob):
    seq, vocab = 6, 70
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 4 * (sequences_per_chunk * seq * vocab))  # fp32 logits
    assert P.sequences_per_chunk(5, seq, vocab, hardware.FUSED_LINEAR_MEMORY_BUDGET // 4) == sequences_per_chunk
    args = kto_args(device, 5, seq, 16, vocab, seed=41, average_log_prob=average_log_prob, **OPTIONS)
    check(backend, "fused_linear_kto", args, grad_scalar=0.75)


def test_fp32_weight_bf16_input(backend, device):
    args = kto_args(device, 3, 6, 16, 50, dtype=torch.bfloat16, seed=42, **OPTIONS)
    args["weight"] = args["weight"].float()
    _, grads = check(backend, "fused_linear_kto", args)
    assert grads["weight"].dtype == torch.float32


def test_frozen_lm_head(backend, device, monkeypatch):
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 4 * (2 * 5 * 30))  # fp32 logits
    args = kto_args(device, 3, 5, 8, 30, seed=44, kl=None, **OPTIONS)
    _, grads = check(backend, "fused_linear_kto", args, frozen=("weight", "bias"))
    assert set(grads) == {"input"}


def test_row_programs(backend, device, row_programs, monkeypatch):
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 4 * (1))  # fp32 logits
    check(backend, "fused_linear_kto", kto_args(device, 3, 7, 16, 90, seed=43, **OPTIONS))
