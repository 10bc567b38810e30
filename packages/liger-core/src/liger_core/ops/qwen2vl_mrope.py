"""The `qwen2vl_mrope` op: its contract, argument checks and PyTorch reference."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from liger_core.ops._rope import apply_rotation, raise_bad_rope_args, rope_shapes_ok


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
    raise NotImplementedError("contract only: call liger_core.functional.liger_qwen2vl_mrope")


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
            rope_shapes_ok(q, k, cos, sin, unsqueeze_dim, 4)
            and cos.shape[0] == 3
            and _section_ok(mrope_section, q.shape[3] // 2)
        ):
            return
    except (AttributeError, TypeError):
        pass
    raise_bad_rope_args("qwen2vl_mrope", q, k, cos, sin, unsqueeze_dim, 4)
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
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula, differentiable by autograd in q and k, for any floating dtype (float64 for the oracle)."""
    cos = merge_sections(cos, mrope_section).unsqueeze(unsqueeze_dim)
    sin = merge_sections(sin, mrope_section).unsqueeze(unsqueeze_dim)
    return apply_rotation(q, cos, sin), apply_rotation(k, cos, sin)


def reference(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mrope_section: Sequence[int],
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    check_args(q, k, cos, sin, mrope_section, unsqueeze_dim)
    return math(q, k, cos, sin, mrope_section, unsqueeze_dim)
