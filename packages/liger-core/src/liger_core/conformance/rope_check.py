"""The rope check against the float64 oracle, without pytest: used by the conformance cases,
by vendor tests that force their own code paths, and by ``liger check``."""

from __future__ import annotations

import torch

from liger_core.conformance._rope_check import check_rotary, make_qk, tables
from liger_core.ops import rope as contract


def make_inputs(
    batch,
    q_heads,
    k_heads,
    seq,
    dim,
    dtype,
    device,
    unsqueeze_dim=1,
    transposed_storage=False,
    cos_batch=1,
    cos_dtype=None,
    table="llama",
    k_dtype=None,
    seed=0,
):
    """``(q, k, cos, sin, dq, dk)``; cos/sin ``(cos_batch, seq, dim)``."""
    q, k, dq, dk = make_qk(
        batch, q_heads, k_heads, seq, dim, dtype, device, unsqueeze_dim, transposed_storage, k_dtype, seed
    )
    gen = torch.Generator().manual_seed(seed + 1)
    cos, sin = tables((cos_batch,), seq, dim, cos_dtype or dtype, table, gen)
    return q, k, cos.to(device), sin.to(device), dq, dk


def check_rope(backend, q, k, cos, sin, dq, dk, position_ids=None, unsqueeze_dim=1) -> None:
    """Run ``backend``'s rope forward and backward; check both outputs and both gradients."""
    check_rotary(
        "rope",
        backend.ops["rope"],
        lambda q, k, c, s: contract.math(q, k, c, s, unsqueeze_dim),
        q,
        k,
        cos,
        sin,
        dq,
        dk,
        (position_ids, unsqueeze_dim),
    )
