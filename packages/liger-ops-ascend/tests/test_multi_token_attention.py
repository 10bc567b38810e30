"""Ascend multi_token_attention paths the shared suite may not reach, forced and checked against
the float64 oracle: query rows in chunks (a small UB) for both activations, the future of each
row spanning whole chunks; the causal fill walked by fewer programs than blocks; the guard on
int32 lane positions."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import multi_token_attention as mta_op

from liger_ops_ascend import multi_token_attention, softmax, sparsemax


@pytest.mark.parametrize("sparse", [False, True], ids=["softmax", "sparsemax"])
def test_chunked_rows(monkeypatch, few_cores, backend, device, current_hw, sparse):
    monkeypatch.setenv("LIGER_ASCEND_UB_BYTES", str(3 * 1024))  # 70 columns no longer fit a tile
    hw = current_hw()
    for mod in (softmax, sparsemax):
        assert mod.plan_tiles("forward", 140, 70, torch.float32, hw).chunked
        assert mod.plan_tiles("backward", 140, 70, torch.float32, hw).chunked
    assert multi_token_attention.plan_tiles(2 * 70 * 70, torch.float32, hw).n_iters > 1
    check(
        backend,
        "multi_token_attention",
        mta_op.args(device, shape=(1, 2, 70, 70), out_channels=2, padding=1, sparse=sparse),
    )


def test_plane_past_int32_positions_is_refused(current_hw):
    huge = torch.empty((1, 1, 46341, 46341), dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match=r"plane plus a block of \d+ must hold fewer than 2\*\*31 elements"):
        multi_token_attention.causal_fill(huge, 0.0, current_hw())
