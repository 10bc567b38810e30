"""The qwen2vl_mrope check against the float64 oracle, without pytest: used by the conformance
cases, by vendor tests that force their own code paths, and by ``liger check``."""

from __future__ import annotations

import torch

from liger_core.conformance._rope_check import check_rotary, make_qk, tables
from liger_core.ops import qwen2vl_mrope as contract


def default_section(dim: int) -> list[int]:
    """Qwen2-VL's split (16, 24, 24 of 64) scaled to ``dim // 2``: three unequal sections."""
    half = dim // 2
    t = half // 4
    h = (half - t) // 2
    return [t, h, half - t - h]


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
    cos_batch=None,
    cos_dtype=None,
    table="llama",
    seed=0,
):
    """``(q, k, cos, sin, dq, dk)``; cos/sin ``(3, cos_batch, seq, dim)``, one table per axis."""
    q, k, dq, dk = make_qk(
        batch, q_heads, k_heads, seq, dim, dtype, device, unsqueeze_dim, transposed_storage, None, seed
    )
    gen = torch.Generator().manual_seed(seed + 1)
    cos, sin = tables((3, batch if cos_batch is None else cos_batch), seq, dim, cos_dtype or dtype, table, gen)
    return q, k, cos.to(device), sin.to(device), dq, dk


def check_qwen2vl_mrope(backend, q, k, cos, sin, dq, dk, mrope_section, unsqueeze_dim=1) -> None:
    """Run ``backend``'s qwen2vl_mrope forward and backward; check both outputs and both gradients."""
    check_rotary(
        "qwen2vl_mrope",
        backend.ops["qwen2vl_mrope"],
        lambda q, k, c, s: contract.math(q, k, c, s, mrope_section, unsqueeze_dim),
        q,
        k,
        cos,
        sin,
        dq,
        dk,
        (mrope_section, unsqueeze_dim),
    )
