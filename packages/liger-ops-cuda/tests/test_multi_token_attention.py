"""multi_token_attention.py's own paths: query rows wider than a fused softmax tile take the
chunked softmax and sparsemax kernels on the causally filled rows (the future of each row spans
whole chunks and part of one)."""

import pytest

from liger_core.conformance.check import check, make_args


@pytest.mark.parametrize("sparse", (False, True), ids=("softmax", "sparsemax"))
def test_chunked_rows(backend, device, softmax_chunks, sparse):
    softmax_chunks(70)
    check(
        backend,
        "multi_token_attention",
        make_args("multi_token_attention", device, shape=(1, 1, 70, 70), out_channels=2, padding=1, sparse=sparse),
    )
