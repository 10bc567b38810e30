"""Ascend attn_res code paths the shared suite may not reach, forced and checked against the
float64 oracle: several column chunks with several rows per tile, programs looping over row
blocks (each adding to its own partial row)."""

from __future__ import annotations

import torch
from liger_core.conformance.check import check
from liger_core.ops import attn_res as attn_res_op

from liger_ops_ascend import attn_res, hardware


def test_attn_res_chunked_multi_row(monkeypatch, few_cores, rows_per_tile, backend, device, current_hw):
    monkeypatch.setattr(hardware, "MAX_BLOCK_N", 32)
    p = attn_res.plan_tiles("backward", 45, 120, 5, torch.float32, torch.float32, torch.float32, current_hw())
    assert p.chunked and p.block_m > 1 and p.n_iters > 1
    check(backend, "attn_res", attn_res_op.args(device, shape=(5, 45, 120), dtype=torch.float32))
