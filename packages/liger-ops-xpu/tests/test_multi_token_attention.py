"""XPU multi_token_attention paths the shared suite may not reach: query rows in chunks (caps
lowered: rows wider than 64 columns), several rows per tile, for both activations, the future of
each row spanning whole chunks. Checked against the declaration's float64 oracle."""

import pytest
from liger_core.conformance.check import check
from liger_core.ops import multi_token_attention

from liger_ops_xpu import BACKEND
from liger_ops_xpu._tiling import plan_tiles


@pytest.mark.parametrize("sparse", [False, True], ids=["softmax", "sparsemax"])
def test_chunked_rows(small_chunks, device, sparse):
    plan = plan_tiles(70)
    assert plan.chunked and plan.block_m == 4
    args = multi_token_attention.args(device, shape=(1, 1, 70, 70), out_channels=2, padding=1, sparse=sparse)
    check(BACKEND, "multi_token_attention", args)
