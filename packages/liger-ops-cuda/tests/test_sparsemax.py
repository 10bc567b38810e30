"""sparsemax.py's own paths: chunked rows (each bisection step streams the row), a chunked
leading dimension, exactness from the refinement steps."""

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import plan_softmax_rows


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16), ids=("fp32", "fp16"))
def test_chunked_rows(backend, device, softmax_chunks, dtype):
    softmax_chunks()
    assert plan_softmax_rows(100).chunked
    check(backend, "sparsemax", make_args("sparsemax", device, shape=(3, 100), dtype=dtype))


def test_chunked_along_a_leading_dim(backend, device, softmax_chunks):
    softmax_chunks(fused=16, chunk=16)
    assert plan_softmax_rows(40).chunked
    check(backend, "sparsemax", make_args("sparsemax", device, shape=(40, 3)), dim=0)


def test_exact_after_few_bisection_steps(backend, device, monkeypatch):
    # The refinement steps, not the bisection, make tau exact: with only 8 bisection steps
    # (bracket 1/256 wide) the result still matches the oracle.
    monkeypatch.setattr(hardware, "SPARSEMAX_BISECTION_STEPS", 8)
    monkeypatch.setattr(hardware, "SPARSEMAX_REFINE_STEPS", 3)
    check(backend, "sparsemax", make_args("sparsemax", device, shape=(64, 40)))
