"""The `fused_neighborhood_attention` op: softmax attention restricted to a 1-D sliding window of
keys around each query (Neighborhood Attention; liger-kernel's fused version, arXiv:2504.16922),
declared once."""

from __future__ import annotations

import math as _math

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, on_other_device, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device, check_same_dtype

OP_NAME = "fused_neighborhood_attention"


def fused_neighborhood_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    kernel_size: int = 7,
    dilation: int = 1,
    scale: float | None = None,
) -> torch.Tensor:
    """Neighborhood attention over a sequence (liger-kernel's
    ``LigerFusedNeighborhoodAttentionFunction``):
    ``out = softmax(mask(scale * query @ key^T)) @ value`` per (batch, head).

    The mask keeps, for query ``i``, the keys ``j`` with ``|j - i| <= (kernel_size // 2) *
    dilation`` and ``(j - i) % dilation == 0``, and ``0 <= j < seq``: the window is centred on the
    query and clipped at the sequence ends (not shifted inwards), so a query near an end sees
    fewer keys (``kernel_size // 2 + 1`` at the first and last position). Every query sees at least
    itself. Excluded keys take no part (probability 0). ``scale`` None means ``1 / sqrt(head_dim)``.

    Computed in float32 (scores, softmax and both products accumulate in float32; no intermediate
    rounding is part of the contract) and rounded to the inputs' dtype once.

    Args:
        query, key, value: ``(batch, heads, seq, head_dim)``, one shape, dtype (float32, bfloat16
            or float16) and device, any layout (the models pass transposed views of ``(batch, seq,
            heads, head_dim)`` projections).
        kernel_size: the window's size in positions, an odd int ``>= 1``.
        dilation: the step between the window's positions, an int ``>= 1``.
        scale: the scores' factor, a number, or None for ``1 / sqrt(head_dim)``.

    Returns:
        ``(batch, heads, seq, head_dim)`` in the inputs' dtype. Backward gives ``grad_query``,
        ``grad_key``, ``grad_value`` in that dtype; no input is modified.
    """
    check_args(query, key, value, kernel_size, dilation, scale)
    return math(query, key, value, kernel_size, dilation, scale)


def _int_at_least(value: object, low: int) -> bool:
    return type(value) is int and value >= low


def check_args(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    kernel_size: int,
    dilation: int,
    scale: float | None,
) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if (
            query.dtype in FLOAT_DTYPES
            and query.ndim == 4
            and key.shape == query.shape
            and value.shape == query.shape
            and key.dtype == query.dtype
            and value.dtype == query.dtype
            and key.device == query.device
            and value.device == query.device
            and _int_at_least(kernel_size, 1)
            and kernel_size % 2 == 1
            and _int_at_least(dilation, 1)
            and (scale is None or (type(scale) in (int, float) and _math.isfinite(scale)))
        ):
            return
    except (AttributeError, TypeError):
        pass
    op = OP_NAME
    check_floating("fused_neighborhood_attention", "query", query)
    if query.dim() != 4:
        raise ValueError(f"{op}: query must be (batch, heads, seq, head_dim), 4-D; got shape {tuple(query.shape)}")
    for name, t in (("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor; got {type(t).__name__}")
        check_same_dtype(op, name, t, "query", query)
        if t.shape != query.shape:
            raise ValueError(
                f"{op}: {name} must have query's shape {tuple(query.shape)}; got {name}.shape={tuple(t.shape)}"
            )
        check_same_device(op, query=query, **{name: t})
    for name, value_, low in (("kernel_size", kernel_size, 1), ("dilation", dilation, 1)):
        if type(value_) is not int:
            raise TypeError(f"{op}: {name} must be an int; got {type(value_).__name__}")
        if value_ < low:
            raise ValueError(f"{op}: {name} must be >= {low}; got {value_}")
    if kernel_size % 2 == 0:
        raise ValueError(f"{op}: kernel_size must be odd (a window centred on the query); got {kernel_size}")
    if scale is not None:
        if type(scale) not in (int, float):
            raise TypeError(f"{op}: scale must be a number or None; got {type(scale).__name__}")
        raise ValueError(f"{op}: scale must be finite; got {scale}")


def default_scale(head_dim: int, scale: float | None) -> float:
    """The scores' factor: ``scale``, or ``1 / sqrt(head_dim)`` when None."""
    return float(scale) if scale is not None else 1.0 / _math.sqrt(max(head_dim, 1))


def neighborhood(seq: int, kernel_size: int, dilation: int, device: torch.device | str) -> torch.Tensor:
    """The ``(seq, seq)`` boolean mask of the keys ``j`` each query ``i`` attends to."""
    pos = torch.arange(seq, device=device)
    offset = pos[None, :] - pos[:, None]  # j - i
    return (offset.abs() <= (kernel_size // 2) * dilation) & (offset.remainder(dilation) == 0)


def math(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    kernel_size: int,
    dilation: int,
    scale: float | None,
) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle):
    a dense masked softmax (the reference; the kernels never build the (seq, seq) scores)."""
    compute = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(compute), key.to(compute), value.to(compute)
    scores = (q @ k.transpose(-1, -2)) * default_scale(query.shape[-1], scale)
    keep = neighborhood(query.shape[-2], kernel_size, dilation, query.device)
    probs = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
    return (probs @ v).to(query.dtype)


# -- declaration ---------------------------------------------------------------------------------


def args(
    device,
    shape=(2, 3, 37, 16),
    dtype=torch.float32,
    kernel_size=7,
    dilation=1,
    scale=None,
    transposed=False,
):
    """query, key, value of ``shape`` (batch, heads, seq, head_dim): unit-normal queries and keys
    with scores spread over a few units (softmax rows neither flat nor one-hot), values around 0.
    ``transposed``: each a ``(batch, seq, heads, head_dim)`` tensor viewed as ``(batch, heads,
    seq, head_dim)``, the layout the models' projections give."""
    g = S.gen(0)
    batch, heads, seq, head_dim = shape
    stored = (batch, seq, heads, head_dim) if transposed else shape

    def draw(spread: float) -> torch.Tensor:
        t = S.to(device, dtype, S.normal(stored, g, spread))
        return t.transpose(1, 2) if transposed else t

    # scores = scale * q.k with scale ~ 1/sqrt(head_dim): q, k of spread 1.5 give scores of spread ~2.
    return dict(
        query=draw(1.5),
        key=draw(1.5),
        value=draw(1.0),
        kernel_size=kernel_size,
        dilation=dilation,
        scale=scale,
    )


def samples():
    # seq not a multiple of any block, every dtype, the default window.
    yield from S.grid(args, dict(dtype=S.DTYPES))
    # kernel_size 1 (each query sees itself: out = value); a window wider than the sequence.
    yield sample(args, shape=(1, 2, 19, 16), kernel_size=1)
    yield sample(args, shape=(2, 2, 5, 16), kernel_size=9)
    # Dilation: 2 and 3, with windows reaching across several key blocks of a short tile.
    yield sample(args, shape=(1, 2, 45, 16), kernel_size=5, dilation=2)
    yield sample(args, shape=(1, 2, 150, 16), kernel_size=11, dilation=3, dtype=torch.bfloat16)
    # Several query blocks of any vendor's tile; a window wider than a 64-row block.
    yield sample(args, shape=(1, 2, 150, 32), kernel_size=71)
    yield sample(args, shape=(1, 1, 200, 16), kernel_size=21, dilation=4, dtype=torch.float16)
    # Odd head_dim (masked tails of the feature tile); a head_dim wider than 32.
    yield sample(args, shape=(2, 1, 23, 5), kernel_size=3)
    yield sample(args, shape=(1, 2, 30, 33), kernel_size=7, dilation=2, dtype=torch.bfloat16)
    # An explicit scale; one token; the models' transposed layout; an empty batch.
    yield sample(args, shape=(1, 2, 17, 16), scale=0.5)
    yield sample(args, shape=(2, 2, 1, 16))
    yield sample(args, shape=(2, 3, 29, 16), transposed=True)
    yield sample(args, shape=(0, 2, 7, 16))


def _scales(a, upstream):
    # grad_query and grad_key are sums of p * (dp - delta) with dp = dO . v and delta = dO . out:
    # where a row's probability sits on few keys the two cancel (to exactly 0 for kernel_size 1),
    # so their error is measured against the terms' size, scale * |dO| |v| * |k| (or |q|).
    d_out = upstream["output"]
    if d_out is None or not d_out.numel():
        return {}
    q, k, v = a["query"], a["key"], a["value"]
    scale = abs(default_scale(q.shape[-1], a["scale"]))
    dp = float((d_out.abs() * v.abs().amax(dim=-2, keepdim=True)).sum(-1).max())
    return {"grad_query": scale * dp * S.peak(k), "grad_key": scale * dp * S.peak(q)}


def _bench_args(s, dt, dev, gen):
    """q, k, v as the module passes them: ``(batch, seq, heads * head_dim)`` projections viewed as
    ``(batch, heads, seq, head_dim)``."""
    b, h, d, seq = BENCH_BATCH, BENCH_HEADS, BENCH_HEAD_DIM, s.seq

    def projection(spread: float):
        stored = B.normal((b, seq, h * d), dt, dev, gen, scale=spread)
        return B.ViewOf(stored, lambda t: t.view(b, seq, h, d).transpose(1, 2))

    return dict(query=projection(1.0), key=projection(1.0), value=projection(1.0), kernel_size=BENCH_KERNEL, dilation=1)


def _bench_contiguous(s, dt, dev, gen):
    b, h, d, seq = BENCH_BATCH, BENCH_HEADS, BENCH_HEAD_DIM, s.seq
    qkv = {name: B.normal((b, h, seq, d), dt, dev, gen) for name in ("query", "key", "value")}
    return dict(**qkv, kernel_size=BENCH_KERNEL, dilation=1)


def _torch_fused_neighborhood_attention(query, key, value, kernel_size=7, dilation=1, scale=None):
    """As a PyTorch model writes it: the dense (seq, seq) scores in the inputs' dtype, the window
    as a -inf mask, softmax, the product with value."""
    seq = query.shape[-2]
    scores = (query @ key.transpose(-1, -2)) * default_scale(query.shape[-1], scale)
    keep = neighborhood(seq, kernel_size, dilation, query.device)
    return torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1) @ value


# The bench shape (liger-kernel's benchmark of this op does not ship in its wheel; these are the
# sizes its module's defaults and ViT-style use imply): batch 2, 12 heads of 64, kernel_size 7,
# seq the model shape's tokens / batch (4096 by default); sweep it with
# ``liger bench --ops fused_neighborhood_attention --sweep tokens=1024,2048,4096``.
BENCH_BATCH, BENCH_HEADS, BENCH_HEAD_DIM, BENCH_KERNEL = 2, 12, 64, 7


def _bench_elements(s) -> int:
    return BENCH_BATCH * BENCH_HEADS * s.seq * BENCH_HEAD_DIM


def _traffic(s, e):
    # forward reads q, k, v and writes out; backward reads q, k, v, out and the upstream gradient
    # and writes the three gradients (the per-row statistics are negligible).
    return 4 * _bench_elements(s) * e, 8 * _bench_elements(s) * e


def _flops(s):
    # Products over the window only: forward q.k and p.v; backward recomputes q.k and forms
    # do.v, p^T do, ds k and ds^T q.
    per_product = 2 * _bench_elements(s) * BENCH_KERNEL
    return 2 * per_product, 5 * per_product


def _describe(s):
    return B.dims(
        ("batch", BENCH_BATCH),
        ("heads", BENCH_HEADS),
        ("seq", s.seq),
        ("head_dim", BENCH_HEAD_DIM),
        ("kernel", BENCH_KERNEL),
    )


OP = Op(
    fused_neighborhood_attention,
    since=(1, 8),
    math=math,
    grads=("query", "key", "value"),
    samples=samples,
    smoke=(
        sample(args, shape=(2, 3, 37, 16)),
        sample(args, shape=(1, 4, 300, 64), kernel_size=9, dilation=2),
    ),
    error_sample=sample(args),
    checks=Checks(atol_scales=_scales),
    errors=(
        bad(
            "query_dtype",
            TypeError,
            r"query must have dtype float32, bfloat16, float16; got int64",
            query=lambda t: t.long(),
        ),
        bad(
            "query_3d",
            ValueError,
            r"query must be \(batch, heads, seq, head_dim\), 4-D; got shape",
            query=lambda t: t[0],
        ),
        bad("key_dtype", TypeError, r"key must have query's dtype float32; got float16", key=lambda t: t.half()),
        bad(
            "value_shape",
            ValueError,
            r"value must have query's shape \(2, 3, 37, 16\); got value.shape=\(2, 3, 36, 16\)",
            value=lambda t: t[:, :, :36],
        ),
        bad("key_device", ValueError, r"one device.*query is on .*key is on", key=on_other_device),
        bad("kernel_even", ValueError, r"kernel_size must be odd .*got 6", kernel_size=6),
        bad("kernel_zero", ValueError, r"kernel_size must be >= 1; got 0", kernel_size=0),
        bad("kernel_type", TypeError, r"kernel_size must be an int; got float", kernel_size=7.0),
        bad("dilation_zero", ValueError, r"dilation must be >= 1; got 0", dilation=0),
        bad("scale_type", TypeError, r"scale must be a number or None; got str", scale="0.5"),
        bad("scale_nan", ValueError, r"scale must be finite; got nan", scale=float("nan")),
    ),
    bench=B.BenchSpec(
        group="attention",
        axes=("tokens", "batch"),
        layouts={"projections": _bench_args, "contiguous": _bench_contiguous},
        torch_fn=_torch_fused_neighborhood_attention,
        traffic=_traffic,
        describe=_describe,
        flops=_flops,
        peers={
            B.LIGER_KERNEL: B.liger_kernel(
                "liger_fused_neighborhood_attention", "query", "key", "value", "kernel_size", "dilation", "scale"
            )
        },
    ),
)
