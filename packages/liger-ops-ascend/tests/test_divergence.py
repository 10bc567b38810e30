"""Ascend kl_div/jsd/tvd code paths the shared suite may not reach (the one divergence kernel),
forced and checked against the float64 oracle: vocabulary rows chunked (a small UB), several
short rows per tile with programs walking several row blocks."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import jsd as jsd_op
from liger_core.ops import kl_div as kl_div_op
from liger_core.ops import tvd as tvd_op

from liger_ops_ascend import divergence


def test_jsd_chunked(small_ub, few_cores, backend, device, current_hw):
    assert divergence.plan_tiles(divergence.JSD, 5, 700, torch.float32, torch.float32, current_hw()).chunked
    check(backend, "jsd", jsd_op.args(device, shape=(5, 700), beta=0.3))


@pytest.mark.parametrize("reduction", ["batchmean", "none"])
def test_tvd_multi_row(small_ub, few_cores, backend, device, current_hw, reduction):
    p = divergence.plan_tiles(divergence.TVD, 45, 24, torch.float32, torch.float32, current_hw())
    assert p.block_m > 1 and p.n_iters > 1
    check(backend, "tvd", tvd_op.args(device, shape=(45, 24), reduction=reduction))


def test_kl_div_chunked_log_target(small_ub, few_cores, backend, device, current_hw):
    dtype = torch.bfloat16
    assert divergence.plan_tiles(divergence.KL_DIV, 5, 700, dtype, dtype, current_hw()).chunked
    args = kl_div_op.args(device, shape=(5, 700), dtype=dtype, reduction="mean", log_target=True)
    check(backend, "kl_div", args)
