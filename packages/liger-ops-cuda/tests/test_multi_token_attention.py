"""multi_token_attention.py's own paths: query rows wider than a fused softmax tile take the
chunked softmax and sparsemax kernels on the causally filled rows (the future of each row spans
whole chunks and part of one); the guard on int32 lane positions."""

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda.multi_token_attention import causal_fill


@pytest.mark.parametrize("sparse", (False, True), ids=("softmax", "sparsemax"))
def test_chunked_rows(backend, device, softmax_chunks, sparse):
    softmax_chunks(70)
    check(
        backend,
        "multi_token_attention",
        make_args("multi_token_attention", device, shape=(1, 1, 70, 70), out_channels=2, padding=1, sparse=sparse),
    )


def test_plane_past_int32_positions_is_refused():
    huge = torch.empty((1, 1, 46341, 46341), dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match=r"plane plus a block of \d+ must hold fewer than 2\*\*31 elements"):
        causal_fill(huge, 0.0)
