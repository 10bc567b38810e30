"""Ascend fused_linear_cross_entropy over several token chunks (each chunk's vocabulary rows
chunked too, a small UB), every option on, checked against the float64 oracle."""

from __future__ import annotations

import pytest
from liger_core.conformance.check import check
from liger_core.ops import fused_linear_cross_entropy as fused_linear_cross_entropy_op

from liger_ops_ascend._tiling import chunk_tokens


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_flce_several_token_chunks(small_ub, backend, device, reduction):
    assert chunk_tokens(19, 8, 300) < 19  # the token loop runs several times
    args = fused_linear_cross_entropy_op.args(
        device, shape=(19, 8, 300), bias=True, weighted=True, lse_square_scale=1e-3, label_smoothing=0.1,
        reduction=reduction, softcap=15.0,
    )  # fmt: skip
    check(backend, "fused_linear_cross_entropy", args, grad_scalar=2.0)
