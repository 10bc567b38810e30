"""Ascend fused_linear_jsd over several token chunks (each chunk's vocabulary rows chunked too,
a small UB), checked against the float64 oracle."""

from __future__ import annotations

from liger_core.conformance.check import check
from liger_core.ops import fused_linear_jsd as fused_linear_jsd_op

from liger_ops_ascend._tiling import chunk_tokens


def test_fused_linear_jsd_several_token_chunks(small_ub, backend, device):
    assert chunk_tokens(19, 12, 300) < 19  # the token loop runs several times
    args = fused_linear_jsd_op.args(device, shape=(19, 8, 12, 300), jsd_beta=0.7, temperature=2.0)
    check(backend, "fused_linear_jsd", args)
