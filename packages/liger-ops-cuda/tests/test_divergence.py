"""_divergence.py's own paths (kl_div, jsd, tvd): rows over several vocabulary tiles, a scaled
incoming gradient (the in-place rescaling of the gradient computed in forward)."""

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware
from liger_ops_cuda._divergence import plan_divergence


@pytest.fixture
def small_tiles(monkeypatch):
    """Vocabulary tiles of 32: every row below spans several tiles with a ragged last one."""
    monkeypatch.setattr(hardware, "DIV_BLOCK", 32)
    assert plan_divergence(70)[:2] == (32, 3)


@pytest.mark.parametrize("reduction", ["batchmean", "sum", "mean", "none"])
def test_kl_div_and_tvd_over_several_tiles(backend, device, small_tiles, reduction):
    args = make_args("kl_div", device, shape=(7, 70), seed=28)
    check(backend, "kl_div", args, grad_scalar=0.5, reduction=reduction)
    args = make_args("kl_div", device, shape=(7, 70), dtype=torch.bfloat16, seed=29, log_target=True)
    check(backend, "kl_div", args, reduction=reduction)
    args = make_args("tvd", device, shape=(9, 70), seed=30)
    check(backend, "tvd", args, grad_scalar=3.0, reduction=reduction)
    check(backend, "tvd", dict(args, shift_labels=None), reduction=reduction)


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_jsd_over_several_tiles(backend, device, small_tiles, beta):
    check(backend, "jsd", make_args("jsd", device, shape=(9, 70), seed=31), grad_scalar=2.0, beta=beta)
