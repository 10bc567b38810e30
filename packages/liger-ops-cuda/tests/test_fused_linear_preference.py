"""The preference losses' own paths here: several chunks of pairs (one pair, and a ragged last
chunk), the row-program cross-entropy forward, an fp32 lm_head with bf16 hidden states."""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_core.ops import _preference as P
from liger_ops_cuda import hardware

OPTIONS = {"bias": True, "ref_bias": True, "compute_nll_loss": True, "alpha": 0.5, "beta": 0.5}


def dpo_args(device, pairs, seq, hidden, vocab, **params):
    return make_args("fused_linear_dpo", device, shape=(pairs, seq, hidden, vocab), **params)


@pytest.mark.parametrize("pairs_per_chunk", [1, 2])
@pytest.mark.parametrize("average_log_prob", [False, True])
def test_several_chunks(backend, device, monkeypatch, pairs_per_chunk, average_log_prob):
    seq, vocab = 6, 70
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 4 * (pairs_per_chunk * 2 * seq * vocab))  # fp32 logits
    assert P.pairs_per_chunk(5, seq, vocab, hardware.FUSED_LINEAR_MEMORY_BUDGET // 4) == pairs_per_chunk
    args = dpo_args(device, 5, seq, 16, vocab, seed=31, average_log_prob=average_log_prob, **OPTIONS)
    check(backend, "fused_linear_dpo", args, grad_scalar=0.75, loss_type="apo_down")


def test_row_programs(backend, device, row_programs, monkeypatch):
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 4 * (1))  # fp32 logits
    args = dpo_args(device, 3, 7, 16, 90, seed=32, **OPTIONS)
    check(backend, "fused_linear_dpo", args)


def test_fp32_weight_bf16_input(backend, device):
    args = dpo_args(device, 2, 6, 16, 50, dtype=torch.bfloat16, seed=33, **OPTIONS)
    args["weight"] = args["weight"].float()
    _, grads = check(backend, "fused_linear_dpo", args)
    assert grads["weight"].dtype == torch.float32


def test_orpo_several_chunks(backend, device, monkeypatch):
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 4 * (2 * 2 * 6 * 70))  # fp32 logits
    args = make_args("fused_linear_orpo", device, shape=(5, 6, 16, 70), seed=34, bias=True, beta=0.5)
    check(backend, "fused_linear_orpo", args, grad_scalar=0.75)


@pytest.mark.parametrize("op", ["fused_linear_cpo", "fused_linear_simpo"])
def test_cpo_simpo_several_chunks(backend, device, monkeypatch, op):
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 4 * (2 * 2 * 6 * 70))  # fp32 logits
    args = make_args(op, device, shape=(5, 6, 16, 70), seed=35, bias=True, beta=0.5, label_smoothing=0.1)
    check(backend, op, args, grad_scalar=0.75, compute_nll_loss=True)
