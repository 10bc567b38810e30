"""The `rope` op: rotate-half rotary position embedding (LLaMA, Mistral, Qwen...), declared once."""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Op, Sharding, bad, sample
from liger_core.ops import _rope
from liger_core.ops import _samples as S


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
            (grouped-query attention has fewer; none rotates ``q`` alone). Its dtype may differ
            from ``q``'s.
        cos, sin: ``(batch or 1, seq, head_dim)`` tables, any float dtype; no gradient flows
            to them.
        position_ids: accepted and ignored, as in transformers (cos/sin are already per position).
        unsqueeze_dim: 1 or 2, the axis of q/k that holds the heads (see ``q``).

    Returns:
        ``(q_out, k_out)``: the shapes and dtypes of ``q`` and ``k``, computed in float32.
        ``q`` and ``k`` are not modified. Backward gives ``grad_q`` and ``grad_k``.
    """
    check_args(q, k, cos, sin, position_ids, unsqueeze_dim)
    return math(q, k, cos, sin, position_ids, unsqueeze_dim)


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
        if _rope.rope_shapes_ok(q, k, cos, sin, unsqueeze_dim, 3) and (
            position_ids is None or isinstance(position_ids, torch.Tensor)
        ):
            return
    except (AttributeError, TypeError):
        pass
    _rope.raise_bad_rope_args("rope", q, k, cos, sin, unsqueeze_dim, 3)
    if position_ids is not None and not isinstance(position_ids, torch.Tensor):
        raise TypeError(f"rope: position_ids must be a torch.Tensor or None; got {type(position_ids).__name__}")


def math(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    position_ids: torch.Tensor | None,
    unsqueeze_dim: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula, differentiable by autograd in q and k, for any floating dtype (float64 for the oracle)."""
    return _rope.rotate_qk(q, k, cos, sin, unsqueeze_dim)


# -- declaration ---------------------------------------------------------------------------------


def args(
    device,
    shape=(2, 4, 2, 6, 16),
    dtype=torch.float32,
    unsqueeze_dim=1,
    transposed=False,
    cos_batch=1,
    cos_dtype=None,
    table="llama",
    k_dtype=None,
    position_ids=False,
):
    """q and k of ``shape`` = (batch, q_heads, k_heads, seq, head_dim) laid out for
    ``unsqueeze_dim`` (``transposed``: LLaMA's strided views), cos/sin ``(cos_batch, seq, dim)``."""
    batch, qh, kh, seq, dim = shape
    q, k = _rope.qk(batch, qh, kh, seq, dim, dtype, device, unsqueeze_dim, transposed, k_dtype, S.gen(0))
    cos, sin = _rope.tables((cos_batch,), seq, dim, cos_dtype or dtype, device, table, S.gen(1))
    ids = torch.arange(seq, device=device).flip(0).expand(batch, seq) if position_ids else None
    return dict(q=q, k=k, cos=cos, sin=sin, position_ids=ids, unsqueeze_dim=unsqueeze_dim)


def fused_qkv_args(device, unsqueeze_dim=1):
    """q and k as views of one fused qkv projection's output (batch 2, 4 q / 2 k heads, seq 5, dim 16)."""
    q, k = _rope.fused_qkv(2, 4, 2, 5, 16, device, unsqueeze_dim, S.gen(3))
    cos, sin = _rope.tables((2,), 5, 16, torch.float32, device, "llama", S.gen(1))
    return dict(q=q, k=k, cos=cos, sin=sin, unsqueeze_dim=unsqueeze_dim)


def samples():
    # A single pair, grouped-query (fewer k heads), LLaMA-3-8B's heads, heads and half head_dim
    # that are not powers of two, one k head (MQA), no k heads (one tensor rotated: Gemma 4's
    # apply_rotary_pos_emb), an empty sequence; LLaMA's transposed views.
    shapes = (
        (1, 1, 1, 1, 2),
        (2, 4, 2, 7, 16),
        (1, 32, 8, 3, 128),
        (2, 3, 3, 9, 24),
        (3, 6, 1, 17, 64),
        (2, 3, 0, 5, 8),
        (2, 4, 2, 0, 8),
    )
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes), transposed=True)
    yield from _rope.layout_samples(args)
    # transformers ignores position_ids: cos/sin are already per position.
    yield from S.grid(args, dict(unsqueeze_dim=(1, 2)), position_ids=True)
    # Both halves of cos/sin are used as given, not only the first.
    yield sample(args, shape=(2, 4, 2, 5, 16), table="random")
    yield from S.grid(
        args, dict(dtype=(torch.bfloat16, torch.float16)), shape=(1, 4, 4, 7, 32), cos_dtype=torch.float32
    )
    yield sample(args, shape=(1, 4, 2, 7, 32), k_dtype=torch.bfloat16)
    yield from S.grid(fused_qkv_args, dict(unsqueeze_dim=(1, 2)))


def _across_heads(a: dict) -> tuple[int, ...]:
    # Each head rotates alone with the cos/sin it shares with the others: q and k may be
    # sharded on the heads dim (where cos/sin are unsqueezed; a colwise q/k projection), on no other.
    nd = a["q"].ndim
    heads = a["unsqueeze_dim"] % nd
    return tuple(d for d in range(nd) if d != heads)


OP = Op(
    rope,
    since=(1, 2),
    math=math,
    grads=("q", "k"),
    outputs=("q_out", "k_out"),
    sharding=Sharding(
        inputs=("q", "k"), across=_across_heads, outputs=("q", "k"), replicated=("cos", "sin", "position_ids")
    ),
    samples=samples,
    smoke=_rope.smoke(args),
    error_sample=sample(args),
    errors=(
        *_rope.bad_inputs("rope", 3),
        bad(
            "sin_batch",
            ValueError,
            r"sin must have shape .*got sin.shape=\(3, 6, 16\)",
            sin=lambda s: s.expand(3, 6, 16),
        ),
        bad(
            "position_ids", TypeError, r"position_ids must be a torch.Tensor or None; got list", position_ids=[0, 1, 2]
        ),
    ),
    checks=_rope.CHECKS,
    bench=_rope.bench_spec(
        lambda s: (1,),
        lambda q, k, cos, sin, position_ids=None, unsqueeze_dim=1: _rope.torch_rotation(q, k, cos, sin, unsqueeze_dim),
        {
            B.LIGER_KERNEL: B.liger_kernel("liger_rope", "q", "k", "cos", "sin", "position_ids", "unsqueeze_dim"),
            B.TORCH_NPU: B.torch_npu(
                lambda m, q, k, cos, sin, unsqueeze_dim, **_: (
                    m.npu_rotary_mul(q, cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)),
                    m.npu_rotary_mul(k, cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)),
                )
            ),
        },
    ),
)
