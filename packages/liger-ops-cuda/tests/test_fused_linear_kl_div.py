"""fused_linear_kl_div's own path: several token chunks, the last one ragged."""

import pytest

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import plan_chunks


@pytest.mark.parametrize("reduction", ["batchmean", "sum"])
def test_several_chunks(backend, device, monkeypatch, reduction):
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 8 * 70 * 10)  # 8 rows of 10-byte logits
    monkeypatch.setattr(hardware, "FUSED_LINEAR_ROW_MULTIPLE", 4)
    assert plan_chunks(30, 70, bytes_per_logit=10) == 8  # 4 chunks, the last ragged
    args = make_args("fused_linear_kl_div", device, shape=(30, 8, 70), seed=32)
    check(backend, "fused_linear_kl_div", args, grad_scalar=0.5, reduction=reduction, temperature=0.8)
