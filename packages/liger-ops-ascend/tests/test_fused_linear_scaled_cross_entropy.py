"""Ascend fused_linear_scaled_cross_entropy over several token chunks, each chunk's vocabulary rows
chunked too (a small UB), several rows per tile, and each output's gradient alone; checked
against the float64 oracle."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check, make_args

from liger_ops_ascend import hardware
from liger_ops_ascend._tiling import chunk_tokens
from liger_ops_ascend.fused_linear_scaled_cross_entropy import plan_fused_linear_scaled_cross_entropy

OP = "fused_linear_scaled_cross_entropy"


@pytest.mark.parametrize("unused", [(), ("entropy",), ("nll",)], ids=["both", "nll-only", "entropy-only"])
def test_several_token_and_vocab_chunks(small_ub, backend, device, unused):
    assert chunk_tokens(19, 8, 300) < 19  # the token loop runs several times
    hw = hardware.current(torch.device(device))
    for direction in ("forward", "backward"):
        assert plan_fused_linear_scaled_cross_entropy(direction, 4, 300, torch.float32, hw).chunked
    args = make_args(OP, device, shape=(19, 8, 300), seed=41)
    check(backend, OP, args, grad_scalar=1.5, temperature=0.7, unused_outputs=unused)


def test_several_rows_per_tile(backend, device):
    # Short aligned rows share a tile: rows past the end of the last block are masked off.
    hw = hardware.current(torch.device(device))
    assert plan_fused_linear_scaled_cross_entropy("forward", 21, 16, torch.float32, hw).block_m > 1
    args = make_args(OP, device, shape=(21, 8, 16), seed=42)
    check(backend, OP, args, temperature=1.3)


def test_bf16_with_fp32_weight(small_ub, backend, device):
    args = make_args(OP, device, shape=(13, 8, 200), dtype=torch.bfloat16, weight_dtype=torch.float32, seed=43)
    check(backend, OP, args, temperature=2.0)
