"""The `qwen2vl_mrope` op: Qwen2-VL's multimodal rotary embedding, declared once."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from liger_core.bench import spec as B
from liger_core.op import Op, bad, sample
from liger_core.ops import _rope
from liger_core.ops import _samples as S


def qwen2vl_mrope(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mrope_section: Sequence[int],
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multimodal rotary embedding of Qwen2-VL (transformers' ``apply_multimodal_rotary_pos_emb``).

    cos and sin hold one table per position axis (temporal, height, width). The head's
    columns are cut into sections ``mrope_section * 2`` (the list repeated: once per half
    of the head); section ``i`` takes its columns from table ``i % 3``. The merged
    ``(batch, seq, head_dim)`` tables then rotate q and k exactly as `rope` does:
    ``x * cos + rotate_half(x) * sin``.

    Args:
        q: queries, 4-D: ``(batch, q_heads, seq, head_dim)`` for ``unsqueeze_dim=1``,
            ``(batch, seq, q_heads, head_dim)`` for ``unsqueeze_dim=2``; head_dim even.
            float32, bfloat16 or float16; any strides.
        k: keys, laid out as ``q``; the same batch, seq and head_dim, any number of heads.
        cos, sin: ``(3, batch or 1, seq, head_dim)``, any float dtype; no gradient flows to them.
        mrope_section: three non-negative ints (temporal, height, width columns per half)
            summing to ``head_dim // 2``.
        unsqueeze_dim: 1 or 2, the axis of q/k that holds the heads.

    Returns:
        ``(q_out, k_out)``: the shapes and dtypes of ``q`` and ``k``, computed in float32.
        ``q`` and ``k`` are not modified. Backward gives ``grad_q`` and ``grad_k``.
    """
    check_args(q, k, cos, sin, mrope_section, unsqueeze_dim)
    return math(q, k, cos, sin, mrope_section, unsqueeze_dim)


def _section_ok(mrope_section, half: int) -> bool:
    return (
        isinstance(mrope_section, (list, tuple))
        and len(mrope_section) == 3
        and all(isinstance(m, int) and not isinstance(m, bool) and m >= 0 for m in mrope_section)
        and sum(mrope_section) == half
    )


def check_args(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mrope_section: Sequence[int],
    unsqueeze_dim: int,
) -> None:
    """Raise a clear error for arguments outside the contract. Backends call this first."""
    try:
        if (
            _rope.rope_shapes_ok(q, k, cos, sin, unsqueeze_dim, 4)
            and cos.shape[0] == 3
            and _section_ok(mrope_section, q.shape[3] // 2)
        ):
            return
    except (AttributeError, TypeError):
        pass
    _rope.raise_bad_rope_args("qwen2vl_mrope", q, k, cos, sin, unsqueeze_dim, 4)
    if not _section_ok(mrope_section, q.shape[3] // 2):
        raise ValueError(
            f"qwen2vl_mrope: mrope_section must be a list of 3 non-negative ints summing to "
            f"head_dim // 2 = {q.shape[3] // 2}; got {mrope_section!r}"
        )


def merge_sections(cos: torch.Tensor, mrope_section: Sequence[int]) -> torch.Tensor:
    """``(3, b, seq, d)`` -> ``(b, seq, d)``: each column from its section's table."""
    chunks = cos.split(list(mrope_section) * 2, dim=-1)
    return torch.cat([m[i % 3] for i, m in enumerate(chunks)], dim=-1)


def math(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mrope_section: Sequence[int],
    unsqueeze_dim: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula, differentiable by autograd in q and k, for any floating dtype (float64 for the oracle)."""
    cos, sin = merge_sections(cos, mrope_section), merge_sections(sin, mrope_section)
    return _rope.rotate_qk(q, k, cos, sin, unsqueeze_dim)


def default_section(dim: int) -> list[int]:
    """Qwen2-VL's split (16, 24, 24 of 64) scaled to ``dim // 2``: three unequal sections."""
    half = dim // 2
    t = max(1, half // 4)
    h = (half - t) // 2
    return [t, h, half - t - h]


# -- declaration ---------------------------------------------------------------------------------


def args(
    device,
    shape=(2, 4, 2, 6, 16),
    dtype=torch.float32,
    unsqueeze_dim=1,
    transposed=False,
    cos_batch=None,
    cos_dtype=None,
    table="llama",
    section=None,
):
    """q and k of ``shape`` = (batch, q_heads, k_heads, seq, head_dim), one cos/sin table per
    position axis ``(3, cos_batch, seq, dim)``, ``section`` (default: Qwen2-VL's split scaled)."""
    batch, qh, kh, seq, dim = shape
    q, k = _rope.qk(batch, qh, kh, seq, dim, dtype, device, unsqueeze_dim, transposed, None, S.gen(0))
    lead = (3, batch if cos_batch is None else cos_batch)
    cos, sin = _rope.tables(lead, seq, dim, cos_dtype or dtype, device, table, S.gen(1))
    mrope_section = default_section(dim) if section is None else section
    return dict(q=q, k=k, cos=cos, sin=sin, mrope_section=mrope_section, unsqueeze_dim=unsqueeze_dim)


def samples():
    # Qwen2-VL-7B's heads (28 / 4) at head_dim 128, grouped-query at small sizes, odd heads and a
    # half head_dim that is not a power of two; LLaMA's transposed views.
    shapes = ((1, 1, 1, 1, 8), (2, 4, 2, 7, 16), (1, 28, 4, 3, 128), (2, 3, 3, 9, 24))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes), transposed=True)
    yield from _rope.layout_samples(args, section=[4, 6, 6])
    # Every section boundary, empty sections included; random tables so each axis differs.
    sections = ([8, 0, 0], [0, 8, 0], [0, 0, 8], [0, 3, 5], [5, 3, 0], [2, 2, 4])
    yield from S.grid(args, dict(section=sections), shape=(2, 4, 2, 5, 16), table="random")
    yield sample(args, shape=(1, 4, 2, 6, 32), dtype=torch.bfloat16, cos_dtype=torch.float32, section=(4, 6, 6))


OP = Op(
    qwen2vl_mrope,
    since=(1, 2),
    math=math,
    grads=("q", "k"),
    outputs=("q_out", "k_out"),
    samples=samples,
    smoke=_rope.smoke(args),
    error_sample=sample(args, section=[2, 3, 3]),
    errors=(
        *_rope.bad_inputs("qwen2vl_mrope", 4),
        bad(
            "section_sum",
            ValueError,
            r"mrope_section must be a list of 3 .* summing to head_dim // 2 = 8; got \[2, 2, 2\]",
            mrope_section=[2, 2, 2],
        ),
        bad("section_len", ValueError, r"mrope_section must be .*; got \[4, 4\]", mrope_section=[4, 4]),
        bad("section_negative", ValueError, r"mrope_section must be .*; got \[10, -2, 0\]", mrope_section=[10, -2, 0]),
        bad("cos_axes", ValueError, r"sin must have shape .*got sin.shape=\(2, 2, 6, 16\)", sin=lambda s: s[:2]),
    ),
    checks=_rope.CHECKS,
    bench=_rope.bench_spec(
        lambda s: (3, s.batch),
        lambda q, k, cos, sin, mrope_section, unsqueeze_dim=1: _rope.torch_rotation(
            q, k, merge_sections(cos, mrope_section), merge_sections(sin, mrope_section), unsqueeze_dim
        ),
        {
            B.LIGER_KERNEL: B.liger_kernel(
                "liger_qwen2vl_mrope", "q", "k", "cos", "sin", "mrope_section", "unsqueeze_dim"
            )
        },
        mrope_section=lambda s: default_section(s.head_dim),
    ),
)
