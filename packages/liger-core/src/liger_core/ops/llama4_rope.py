"""The `llama4_rope` op: Llama 4's rotary embedding in complex form (interleaved pairs times
``freqs_cis``), declared once."""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, on_other_device, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device

_LAYOUT = "(batch, seq, heads, head_dim)"
FREQS_DTYPES = frozenset((torch.complex64,))


def llama4_rope(q: torch.Tensor, k: torch.Tensor, freqs_cis: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Llama 4's rotary embedding (transformers' Llama4 ``apply_rotary_emb``): each head is read
    as ``head_dim / 2`` complex numbers ``x[..., 2j] + i x[..., 2j + 1]`` (interleaved pairs, not
    rotate-half's halves), multiplied by ``freqs_cis[b, s, j]`` and written back as pairs.

    With ``freqs_cis = c + i s``: ``out[2j] = x[2j] c - x[2j+1] s``,
    ``out[2j+1] = x[2j+1] c + x[2j] s``; the same table rotates every q and k head.

    Args:
        q: queries ``(batch, seq, q_heads, head_dim)`` (the layout Llama 4's attention passes,
            before its transpose), head_dim even; float32, bfloat16 or float16; any strides.
        k: keys ``(batch, seq, k_heads, head_dim)``: q's batch, seq and head_dim, any number of
            heads (grouped-query attention has fewer). Its dtype may differ from q's.
        freqs_cis: complex64 ``(batch or 1, seq, head_dim / 2)``, the output of transformers'
            ``Llama4TextRotaryEmbedding`` (one table broadcast over the batch when its first
            size is 1). No gradient flows to it.

    Returns:
        ``(q_out, k_out)``: the shapes and dtypes of q and k, computed in float32 (transformers
        computes in complex64 and casts back with ``type_as``). q and k are not modified.
        Backward multiplies the incoming gradients by ``conj(freqs_cis)`` (the rotation's
        transpose), giving ``grad_q`` and ``grad_k`` in q's and k's dtypes.
    """
    check_args(q, k, freqs_cis)
    return math(q, k, freqs_cis)


def takes(q, k, freqs_cis) -> bool:
    """Whether the arguments are inside the contract (the cheap predicate `check_args` tries first)."""
    if q.ndim != 4 or k.ndim != 4 or freqs_cis.ndim != 3:
        return False
    batch, seq, _, dim = q.shape
    return (
        q.dtype in FLOAT_DTYPES
        and k.dtype in FLOAT_DTYPES
        and freqs_cis.dtype in FREQS_DTYPES
        and dim % 2 == 0
        and k.shape[0] == batch
        and k.shape[1] == seq
        and k.shape[3] == dim
        and freqs_cis.shape[0] in (1, batch)
        and freqs_cis.shape[1] == seq
        and freqs_cis.shape[2] == dim // 2
        and q.device == k.device == freqs_cis.device
    )


def check_args(q: torch.Tensor, k: torch.Tensor, freqs_cis: torch.Tensor) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if takes(q, k, freqs_cis):
            return
    except (AttributeError, TypeError):
        pass
    check_floating("llama4_rope", "q", q)
    check_floating("llama4_rope", "k", k)
    if not isinstance(freqs_cis, torch.Tensor):
        raise TypeError(f"llama4_rope: freqs_cis must be a torch.Tensor; got {type(freqs_cis).__name__}")
    if freqs_cis.dtype not in FREQS_DTYPES:
        got = str(freqs_cis.dtype).removeprefix("torch.")
        raise TypeError(f"llama4_rope: freqs_cis must have dtype complex64; got {got}")
    check_same_device("llama4_rope", q=q, k=k, freqs_cis=freqs_cis)
    for name, t in (("q", q), ("k", k)):
        if t.ndim != 4:
            raise ValueError(f"llama4_rope: {name} must be 4-D {_LAYOUT}; got {name}.shape={tuple(t.shape)}")
    batch, seq, _, dim = q.shape
    if dim % 2:
        raise ValueError(
            f"llama4_rope: head_dim must be even (it holds head_dim / 2 complex pairs); got q.shape={tuple(q.shape)}"
        )
    if k.shape[0] != batch or k.shape[1] != seq or k.shape[3] != dim:
        raise ValueError(
            f"llama4_rope: k must match q in batch, seq and head_dim ({_LAYOUT}, heads may differ); "
            f"got q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)}"
        )
    raise ValueError(
        f"llama4_rope: freqs_cis must have shape (batch or 1, seq, head_dim / 2) = ({batch} or 1, {seq}, {dim // 2}); "
        f"got freqs_cis.shape={tuple(freqs_cis.shape)}"
    )


def _rotate(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    real = torch.float64 if x.dtype == torch.float64 else torch.float32
    pairs = torch.view_as_complex(x.to(real).contiguous().reshape(*x.shape[:-1], x.shape[-1] // 2, 2))
    return torch.view_as_real(pairs * freqs.to(pairs.dtype)).flatten(3).to(x.dtype)


def math(q: torch.Tensor, k: torch.Tensor, freqs_cis: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula, differentiable by autograd in q and k, for any floating dtype (float64 for the oracle)."""
    freqs = freqs_cis.detach()[:, :, None, :]
    return _rotate(q, freqs), _rotate(k, freqs)


# -- declaration ---------------------------------------------------------------------------------


def freqs_table(lead: int, seq: int, dim: int, device, kind: str = "llama", g=None) -> torch.Tensor:
    """complex64 ``(lead, seq, dim / 2)``: ``"llama"``, unit rotations of distinct positions per
    leading row as ``Llama4TextRotaryEmbedding`` builds them; ``"random"``: unrelated complex
    values of any magnitude (the contract multiplies by the table as given)."""
    if kind == "random":
        return torch.complex(S.normal((lead, seq, dim // 2), g), S.normal((lead, seq, dim // 2), g)).to(device)
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    pos = torch.arange(seq, dtype=torch.float64)[None, :] * (1 + torch.arange(lead)[:, None])
    angles = pos[..., None] * inv_freq
    return torch.polar(torch.ones_like(angles), angles).to(device=device, dtype=torch.complex64)


def args(
    device,
    shape=(2, 6, 4, 2, 16),
    dtype=torch.float32,
    k_dtype=None,
    freqs_batch=1,
    table="llama",
    layout="contiguous",
):
    """q and k of ``shape`` = (batch, seq, q_heads, k_heads, head_dim), ``(batch, seq, heads,
    head_dim)``; ``layout="projection"``: views of one fused qkv projection output (what the
    attention's ``view`` of a Linear output gives when q and k share a matmul), ``"padded"``: a
    head_dim row that is a slice of a wider one."""
    batch, seq, qh, kh, dim = shape
    g = S.gen(0)
    if layout == "projection":
        qkv = S.to(device, dtype, S.normal((batch, seq, (qh + 2 * kh) * dim), g))
        q = qkv[..., : qh * dim].view(batch, seq, qh, dim)
        k = qkv[..., qh * dim : (qh + kh) * dim].view(batch, seq, kh, dim)
    elif layout == "padded":
        q = S.to(device, dtype, S.normal((batch, seq, qh, dim + 6), g))[..., 3 : dim + 3]
        k = S.to(device, k_dtype or dtype, S.normal((batch, seq, kh, dim + 6), g))[..., 3 : dim + 3]
    else:
        q = S.to(device, dtype, S.normal((batch, seq, qh, dim), g))
        k = S.to(device, k_dtype or dtype, S.normal((batch, seq, kh, dim), g))
    freqs_cis = freqs_table(freqs_batch, seq, dim, device, table, S.gen(1))
    return dict(q=q, k=k, freqs_cis=freqs_cis)


def samples():
    # A single pair, grouped-query, Llama-4-Scout's heads (40 q, 8 kv, head_dim 128), heads and
    # half head_dim that are not powers of two, one k head, an empty sequence.
    shapes = (
        (1, 1, 1, 1, 2),
        (2, 7, 4, 2, 16),
        (1, 3, 40, 8, 128),
        (2, 9, 3, 3, 24),
        (3, 17, 6, 1, 64),
        (2, 0, 4, 2, 8),
    )
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    # One table per sequence, tables of any magnitude, k in another dtype, strided q/k.
    yield from S.grid(args, dict(freqs_batch=(1, 2)), shape=(2, 11, 8, 2, 32), dtype=torch.bfloat16)
    yield sample(args, shape=(2, 5, 4, 2, 16), table="random")
    yield sample(args, shape=(1, 7, 4, 2, 32), k_dtype=torch.bfloat16)
    yield from S.grid(args, dict(layout=("projection", "padded")), shape=(2, 5, 4, 2, 16))


def _freqs_cis(s, dt, dev, gen):
    return freqs_table(1, s.seq, s.head_dim, dev)


def _bench_layout(s, dt, dev, gen):
    # liger-kernel's benchmark_llama4_rope: q (1, seq, q_heads, head_dim) and k (1, seq, kv_heads,
    # head_dim), contiguous, freqs_cis from Llama4TextRotaryEmbedding (1, seq, head_dim / 2),
    # seq swept from 1024 at the model's heads: here batch=1, seq = tokens.
    return dict(
        q=B.normal((s.batch, s.seq, s.heads, s.head_dim), dt, dev, gen),
        k=B.normal((s.batch, s.seq, s.kv_heads, s.head_dim), dt, dev, gen),
        freqs_cis=_freqs_cis(s, dt, dev, gen),
    )


def _torch_apply_rotary_emb(q, k, freqs_cis):
    """transformers' Llama4 apply_rotary_emb, as the model writes it."""
    q_ = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
    k_ = torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2))
    q_out = torch.view_as_real(q_ * freqs_cis[:, :, None, :]).flatten(3)
    k_out = torch.view_as_real(k_ * freqs_cis[:, :, None, :]).flatten(3)
    return q_out.type_as(q), k_out.type_as(k)


def _liger_kernel_llama4_rope():
    # Not in liger-kernel's functional module: its Llama 4 patch's text entry point. (It rotates
    # contiguous q and k in place; a rotation keeps their scale over repeated timed calls.)
    from liger_kernel.transformers.llama4_rope import liger_llama4_text_rotary_pos_emb

    return lambda q, k, freqs_cis: liger_llama4_text_rotary_pos_emb(q, k, freqs_cis)


def _traffic(s, e):
    # Read q and k, write their rotations (backward: the gradients), read the complex64 table.
    n = 2 * s.batch * s.seq * s.head_dim * (s.heads + s.kv_heads) * e + s.seq * s.head_dim * 4
    return n, n


OP = Op(
    llama4_rope,
    since=(1, 6),
    math=math,
    grads=("q", "k"),
    outputs=("q_out", "k_out"),
    samples=samples,
    smoke=(sample(args, shape=(1, 3, 2, 1, 8)), sample(args, shape=(2, 5, 8, 2, 64))),
    error_sample=sample(args),
    errors=(
        bad(
            "q_3d",
            ValueError,
            r"q must be 4-D \(batch, seq, heads, head_dim\); got q.shape=\(2, 6, 4\)",
            q=lambda q: q[..., 0],
        ),
        bad(
            "odd_head_dim",
            ValueError,
            r"head_dim must be even",
            q=lambda t: t[..., :15],
            k=lambda t: t[..., :15],
        ),
        bad(
            "k_seq",
            ValueError,
            r"k must match q in batch, seq and head_dim.*k.shape=\(2, 5, 2, 16\)",
            k=lambda k: k[:, :5],
        ),
        bad(
            "freqs_shape",
            ValueError,
            r"freqs_cis must have shape \(batch or 1, seq, head_dim / 2\) = \(2 or 1, 6, 8\); got .*\(1, 6, 4\)",
            freqs_cis=lambda f: f[..., :4],
        ),
        bad(
            "freqs_real",
            TypeError,
            r"freqs_cis must have dtype complex64; got float32",
            freqs_cis=lambda f: torch.view_as_real(f)[..., 0],
        ),
        bad("mixed_devices", ValueError, r"one device.*q is on .*freqs_cis is on", freqs_cis=on_other_device),
        bad("int_dtype", TypeError, r"k must have dtype float32, bfloat16, float16; got int64", k=lambda k: k.long()),
        bad("float64", TypeError, r"q must have dtype .*got float64", q=lambda q: q.double()),
    ),
    # q's results are as exact as q, k's as k (their dtypes may differ; the table is complex64).
    checks=Checks(
        out_dtypes=lambda a: (a["q"].dtype, a["k"].dtype),
        tolerance_from={"q_out": ("q",), "grad_q": ("q",), "k_out": ("k",), "grad_k": ("k",)},
    ),
    bench=B.BenchSpec(
        group="activations",
        axes=("tokens", "batch", "heads", "kv_heads", "head_dim"),
        layouts={"contiguous": _bench_layout},
        torch_fn=_torch_apply_rotary_emb,
        traffic=_traffic,
        describe=B.heads_text,
        peers={B.LIGER_KERNEL: B.Peer(_liger_kernel_llama4_rope)},
    ),
)
