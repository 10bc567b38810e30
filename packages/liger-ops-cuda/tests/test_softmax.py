"""softmax.py's own paths: the row plans, chunked rows (online max and sum), a chunked row whose
first chunks are all -inf."""

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import plan_softmax_rows


def test_row_plans():
    assert not plan_softmax_rows(64).chunked and plan_softmax_rows(64).block_m > 1
    wide = plan_softmax_rows(hardware.SOFTMAX_MAX_FUSED_BLOCK + 1)
    assert wide.chunked and wide.block_m == 1 and wide.block_n == hardware.SOFTMAX_CHUNK_BLOCK


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("fp32", "bf16"))
def test_chunked_rows(backend, device, softmax_chunks, dtype):
    softmax_chunks()
    assert plan_softmax_rows(300).chunked
    check(backend, "softmax", make_args("softmax", device, shape=(5, 300), dtype=dtype))


def test_chunked_row_starting_with_a_masked_chunk(backend, device, softmax_chunks):
    # The running max starts at -inf for a whole chunk; the rescaling must not produce NaN.
    softmax_chunks()
    args = make_args("softmax", device, shape=(3, 100))
    x = args["x"].clone()
    x[:, :40] = float("-inf")
    x[1, 70:] = 500.0
    check(backend, "softmax", dict(x=x))
