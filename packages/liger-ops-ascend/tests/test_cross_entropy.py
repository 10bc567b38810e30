"""Ascend cross_entropy code paths the shared suite may not reach, forced and checked against
the float64 oracle: vocabulary rows chunked (a small UB) with every option on, and several
short rows per tile with programs walking several row blocks."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import cross_entropy as cross_entropy_op

from liger_ops_ascend import _cross_entropy


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_chunked_vocab_all_options(small_ub, few_cores, backend, device, current_hw, reduction):
    p = _cross_entropy.plan_tiles("backward", 7, 300, torch.bfloat16, torch.bfloat16, current_hw())
    assert p.chunked and 300 % p.block_n and p.n_iters > 1
    args = cross_entropy_op.args(
        device, shape=(7, 300), dtype=torch.bfloat16, weighted=True, lse_square_scale=1e-3, label_smoothing=0.1,
        reduction=reduction, softcap=20.0, return_z_loss=True,
    )  # fmt: skip
    check(backend, "cross_entropy", args, grad_scalar=0.5)


def test_cross_entropy_multi_row_tiles(few_cores, backend, device, current_hw):
    p = _cross_entropy.plan_tiles("forward", 45, 20, torch.float32, None, current_hw())
    assert p.block_m > 1 and p.n_iters > 1
    args = cross_entropy_op.args(device, shape=(45, 20), label_smoothing=0.2, reduction="sum")
    check(backend, "cross_entropy", args)
