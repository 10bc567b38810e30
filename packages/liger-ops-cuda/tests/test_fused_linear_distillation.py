"""The distillation losses' own path: several token chunks, the last one ragged."""

import pytest

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import plan_chunks


@pytest.mark.parametrize("op", ["fused_linear_cosine_similarity", "fused_linear_jsd_loss"])
def test_several_chunks(backend, device, monkeypatch, op):
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 8 * 70 * 8)  # 8 rows of 8-byte logits
    monkeypatch.setattr(hardware, "FUSED_LINEAR_ROW_MULTIPLE", 4)
    assert plan_chunks(30, 70, bytes_per_logit=8) == 8  # 4 chunks, the last ragged
    args = make_args(op, device, shape=(30, 8, 12, 70), seed=32, bias=True)
    check(backend, op, args, grad_scalar=0.5, beta=0.3, temperature=1.5)
