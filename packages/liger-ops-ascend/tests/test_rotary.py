"""Ascend rope/qwen2vl_mrope code paths the shared suite may not reach, forced and checked
against the float64 oracle: 128-dim heads in a small UB, so a few heads per block and head
counts that are not multiples of it, walked by few programs."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import qwen2vl_mrope as qwen2vl_mrope_op
from liger_core.ops import rope as rope_op

from liger_ops_ascend import rotary


@pytest.fixture
def ub_16k(monkeypatch):
    """A 16 KiB UB: a few 128-dim heads per block, not all 13."""
    monkeypatch.setenv("LIGER_ASCEND_UB_BYTES", str(16 * 1024))


@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_rope_head_blocks(ub_16k, few_cores, backend, device, current_hw, unsqueeze_dim):
    p = rotary.plan_rotary("rope_forward", 2 * 5, 13, 128, (torch.float32,), torch.float32, current_hw())
    assert 1 < p.block_h < 13 and 13 % p.block_h
    # (batch, q heads, k heads, seq, head_dim), LLaMA's transposed views, a cos/sin per batch.
    args = rope_op.args(
        device, shape=(2, 13, 5, 5, 128), dtype=torch.float32, unsqueeze_dim=unsqueeze_dim, transposed=True, cos_batch=2
    )
    check(backend, "rope", args)


def test_mrope_head_blocks(ub_16k, few_cores, backend, device):
    args = qwen2vl_mrope_op.args(device, shape=(2, 13, 5, 5, 128), dtype=torch.bfloat16, section=[16, 24, 24])
    check(backend, "qwen2vl_mrope", args)
