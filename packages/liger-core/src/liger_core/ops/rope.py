"""The `rope` op: its contract, argument checks and PyTorch reference."""

from __future__ import annotations

import torch

from liger_core.ops._rope import apply_rotation, raise_bad_rope_args, rope_shapes_ok


def rope(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding, rotate-half form (transformers' LLaMA ``apply_rotary_pos_emb``).

    ``q_out = q * cos + rotate_half(q) * sin`` and the same for ``k``, with
    ``rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2])`` and cos/sin broadcast over heads
    (``cos.unsqueeze(unsqueeze_dim)``). The whole head is rotated; cos and sin are used as
    given (both halves, so tables whose halves differ rotate exactly as in transformers).

    Args:
        q: queries, 4-D: ``(batch, q_heads, seq, head_dim)`` for ``unsqueeze_dim=1``,
            ``(batch, seq, q_heads, head_dim)`` for ``unsqueeze_dim=2``; head_dim even.
            float32, bfloat16 or float16; any strides (LLaMA's transposed views included).
        k: keys, laid out as ``q``; the same batch, seq and head_dim, any number of heads
            (grouped-query attention has fewer). Its dtype may differ from ``q``'s.
        cos, sin: ``(batch or 1, seq, head_dim)`` tables, any float dtype; no gradient flows
            to them.
        position_ids: accepted and ignored, as in transformers (cos/sin are already per position).
        unsqueeze_dim: 1 or 2, the axis of q/k that holds the heads (see ``q``).

    Returns:
        ``(q_out, k_out)``: the shapes and dtypes of ``q`` and ``k``, computed in float32.
        ``q`` and ``k`` are not modified. Backward gives ``grad_q`` and ``grad_k``.
    """
    raise NotImplementedError("contract only: call liger_core.functional.liger_rope")


def check_args(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    position_ids: torch.Tensor | None,
    unsqueeze_dim: int,
) -> None:
    """Raise a clear error for arguments outside the contract. Backends call this first."""
    try:
        if rope_shapes_ok(q, k, cos, sin, unsqueeze_dim, 3) and (
            position_ids is None or isinstance(position_ids, torch.Tensor)
        ):
            return
    except (AttributeError, TypeError):
        pass
    raise_bad_rope_args("rope", q, k, cos, sin, unsqueeze_dim, 3)
    if position_ids is not None and not isinstance(position_ids, torch.Tensor):
        raise TypeError(f"rope: position_ids must be a torch.Tensor or None; got {type(position_ids).__name__}")


def math(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula, differentiable by autograd in q and k, for any floating dtype (float64 for the oracle)."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return apply_rotation(q, cos, sin), apply_rotation(k, cos, sin)


def reference(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    check_args(q, k, cos, sin, position_ids, unsqueeze_dim)
    return math(q, k, cos, sin, unsqueeze_dim)
