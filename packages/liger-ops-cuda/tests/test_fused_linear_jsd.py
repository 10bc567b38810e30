"""fused_linear_jsd's own paths: several token chunks, rows over several vocabulary tiles."""

import pytest

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import plan_chunks


@pytest.mark.parametrize("beta,temperature", [(0.5, 1.0), (0.0, 2.0), (1.0, 0.5)])
def test_several_chunks(backend, device, monkeypatch, beta, temperature):
    monkeypatch.setattr(hardware, "DIV_BLOCK", 32)
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 8 * 70 * 10)  # 8 rows of 10-byte logits
    monkeypatch.setattr(hardware, "FUSED_LINEAR_ROW_MULTIPLE", 4)
    assert plan_chunks(30, 70, bytes_per_logit=10) == 8  # 4 chunks, the last ragged
    args = make_args("fused_linear_jsd", device, shape=(30, 8, 12, 70), seed=32)
    check(backend, "fused_linear_jsd", args, grad_scalar=0.5, jsd_beta=beta, temperature=temperature)
