"""XPU multi_token_attention paths the shared suite may not reach: query rows in chunks (caps
lowered: rows wider than 64 columns), several rows per tile, for both activations, the future of
each row spanning whole chunks, checked against the declaration's float64 oracle; the guard on int32
lane positions."""

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import multi_token_attention

from liger_ops_xpu import BACKEND
from liger_ops_xpu._tiling import plan_tiles
from liger_ops_xpu.multi_token_attention import causal_fill


@pytest.mark.parametrize("sparse", [False, True], ids=["softmax", "sparsemax"])
def test_chunked_rows(small_chunks, device, sparse):
    plan = plan_tiles(70)
    assert plan.chunked and plan.block_m == 4
    args = multi_token_attention.args(device, shape=(1, 1, 70, 70), out_channels=2, padding=1, sparse=sparse)
    check(BACKEND, "multi_token_attention", args)


def test_plane_past_int32_positions_is_refused():
    huge = torch.empty((1, 1, 46341, 46341), dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match=r"plane plus a block of \d+ must hold fewer than 2\*\*31 elements"):
        causal_fill(huge, 0.0)
