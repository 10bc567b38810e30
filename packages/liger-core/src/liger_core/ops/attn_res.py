"""The `attn_res` op (Attention Residuals, Kimi/Moonshot AI: softmax attention over depth in
place of the residual sum), declared once."""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, on_other_device, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_eps, check_floating, check_same_device


def attn_res(V: torch.Tensor, w_query: torch.Tensor, w_norm: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Attention Residuals (arXiv:2603.15031): a learned pseudo-query attends over the stacked
    outputs of ``N`` earlier blocks, and the attention-weighted sum replaces the residual sum.

    Per position (every index of ``V`` but the first and the last), over the blocks ``i``:
    ``k_i = v_i * rsqrt(mean(v_i ** 2) + eps) * w_norm`` (RMSNorm of the block's row),
    ``score_i = sum(w_query * k_i)``, ``alpha = softmax(score)`` over the ``N`` blocks, and
    ``h = sum_i alpha_i * v_i``. Computed in float32 (no intermediate rounding) and cast to
    ``V.dtype`` once.

    Args:
        V: ``(N, ..., hidden)`` stacked block outputs (``torch.stack(blocks)``: ``(N, batch, seq,
            hidden)`` in a model), N >= 1, float32, bfloat16 or float16, any layout.
        w_query: ``(hidden,)`` the pseudo-query.
        w_norm: ``(hidden,)`` the RMSNorm scale of the keys.
        eps: RMSNorm's epsilon, >= 0.

    Returns:
        ``h`` of shape ``V.shape[1:]``, ``V.dtype``. Backward gives ``grad_V`` (``V.dtype``) and
        ``grad_w_query``, ``grad_w_norm`` (their parameters' dtypes); ``V`` is never modified.
    """
    check_args(V, w_query, w_norm, eps)
    return math(V, w_query, w_norm, eps)


def _param_ok(p: torch.Tensor, V: torch.Tensor) -> bool:
    return p.dtype in FLOAT_DTYPES and p.ndim == 1 and p.shape[0] == V.shape[-1] and p.device == V.device


def check_args(V: torch.Tensor, w_query: torch.Tensor, w_norm: torch.Tensor, eps: float) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if (
            V.dtype in FLOAT_DTYPES
            and V.ndim >= 2
            and V.shape[0] > 0
            and _param_ok(w_query, V)
            and _param_ok(w_norm, V)
            and isinstance(eps, (int, float))
            and eps >= 0
        ):
            return
    except (AttributeError, TypeError):
        pass
    check_floating("attn_res", "V", V)
    if V.dim() < 2:
        raise ValueError(
            f"attn_res: V must have at least 2 dimensions (blocks, ..., hidden); got V.shape={tuple(V.shape)}"
        )
    if V.shape[0] == 0:
        raise ValueError(f"attn_res: V must hold at least one block (V.shape[0] >= 1); got V.shape={tuple(V.shape)}")
    for name, p in (("w_query", w_query), ("w_norm", w_norm)):
        check_floating("attn_res", name, p)
        check_same_device("attn_res", V=V, **{name: p})
        if p.shape != (V.shape[-1],):
            raise ValueError(
                f"attn_res: {name} must have shape (hidden,) = ({V.shape[-1]},) to match V.shape[-1]; "
                f"got {name}.shape={tuple(p.shape)}"
            )
    check_eps("attn_res", eps)


def math(V: torch.Tensor, w_query: torch.Tensor, w_norm: torch.Tensor, eps: float) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    compute = torch.float64 if V.dtype == torch.float64 else torch.float32
    v = V.to(compute)
    rstd = torch.rsqrt(v.square().mean(-1, keepdim=True) + eps)
    keys = v * rstd * w_norm.to(compute)
    scores = (keys * w_query.to(compute)).sum(-1)  # (N, ...)
    alpha = torch.softmax(scores, dim=0)
    return (alpha.unsqueeze(-1) * v).sum(0).to(V.dtype)


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(3, 4, 16), dtype=torch.float32, param_dtype=None, strided=False, eps=1e-6):
    """V around 0 with a per-block scale (so the blocks' keys differ); w_query scaled so the scores
    spread over a few units (the softmax is neither uniform nor one-hot); w_norm around 1.
    ``strided``: V a view of rows padded by 24 elements."""
    g = S.gen(0)
    n_blocks, hidden = shape[0], shape[-1]
    block_scale = torch.linspace(0.5, 2.0, n_blocks).reshape((n_blocks,) + (1,) * (len(shape) - 1))
    stored_shape = shape[:-1] + (hidden + 24,) if strided else shape
    V = (S.normal(stored_shape, g) * block_scale + 0.2).to(device=device, dtype=dtype)
    if strided:
        V = V[..., :hidden]
    w_query = S.to(device, param_dtype or dtype, S.normal(hidden, g, 1.5 / max(hidden, 1) ** 0.5))
    w_norm = S.to(device, param_dtype or dtype, S.normal(hidden, g, 0.3, 1.0))
    return dict(V=V, w_query=w_query, w_norm=w_norm, eps=eps)


def samples():
    # One block (alpha = 1: the score path gets no gradient), odd sizes, 4-D (N, batch, seq,
    # hidden), many rows for several programs, rows wider than any vendor's single tile, more
    # blocks than a power-of-two register tile, an empty batch, every dtype.
    shapes = ((1, 3, 5), (3, 2, 7, 33), (4, 130, 64), (2, 4, 1000), (3, 2, 16500), (17, 3, 40), (5, 0, 48))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    yield sample(args, shape=(3, 9, 130), dtype=torch.bfloat16, param_dtype=torch.float32)
    yield sample(args, shape=(4, 33, 40), strided=True)
    yield sample(args, shape=(3, 5, 24), eps=0.5)


def _scales(a, upstream):
    # grad_w_query and grad_w_norm sum a softmax gradient times the normalised rows over every
    # position and block: random signs cancel, so their error is measured against the sum of the
    # terms' magnitudes over sqrt(terms).
    V, dh = a["V"], upstream["output"]
    if dh is None or not dh.numel():
        return {}
    rstd = torch.rsqrt(V.square().mean(-1, keepdim=True) + a["eps"])
    normed = V * rstd
    alpha = torch.softmax((normed * a["w_norm"] * a["w_query"]).sum(-1), dim=0)
    d_alpha = (dh.unsqueeze(0) * V).sum(-1)
    d_score = alpha * (d_alpha.abs() + (alpha * d_alpha).sum(0, keepdim=True).abs())
    terms = (d_score.unsqueeze(-1) * normed.abs()).reshape(-1, V.shape[-1]).sum(0)
    count = V.numel() // V.shape[-1]
    return {
        "grad_w_query": float((terms * a["w_norm"].abs()).max()) / count**0.5,
        "grad_w_norm": float((terms * a["w_query"].abs()).max()) / count**0.5,
    }


# liger-kernel's benchmark (benchmark_attn_res.py): N = 8 blocks of (batch, seq, hidden).
BENCH_BLOCKS = 8


def _bench_args(s, dt, dev, gen):
    return dict(
        V=B.normal((BENCH_BLOCKS, s.batch, s.seq, s.hidden), dt, dev, gen),
        w_query=B.normal((s.hidden,), dt, dev, gen, scale=0.02),
        w_norm=B.norm_weight(s, dt, dev, gen),
    )


def _torch_attn_res(V, w_query, w_norm, eps):
    # As the paper's reference writes it: RMSNorm of each block, dot with the query, softmax over depth.
    keys = V * torch.rsqrt(V.float().pow(2).mean(-1, keepdim=True) + eps).to(V.dtype) * w_norm
    alpha = torch.softmax(torch.einsum("d,n...d->n...", w_query.float(), keys.float()), dim=0)
    return torch.einsum("n...,n...d->...d", alpha.to(V.dtype), V)


OP = Op(
    attn_res,
    since=(1, 7),
    math=math,
    grads=("V", "w_query", "w_norm"),
    samples=samples,
    smoke=(sample(args, shape=(3, 3, 5)), sample(args, shape=(8, 2, 7, 1000))),
    error_sample=sample(args),
    errors=(
        bad("int_dtype", TypeError, r"V must have dtype float32, bfloat16, float16; got int64", V=lambda v: v.long()),
        bad("one_dim", ValueError, r"V must have at least 2 dimensions .*got V.shape=\(16,\)", V=lambda v: v[0, 0]),
        bad("no_blocks", ValueError, r"at least one block .*got V.shape=\(0, 4, 16\)", V=lambda v: v[:0]),
        bad(
            "w_query_shape",
            ValueError,
            r"w_query must have shape \(hidden,\) = \(16,\).*\(15,\)",
            w_query=lambda w: w[:15],
        ),
        bad(
            "w_norm_shape",
            ValueError,
            r"w_norm must have shape \(hidden,\) = \(16,\).*\(17,\)",
            w_norm=lambda w: torch.cat([w, w[:1]]),
        ),
        bad("w_norm_dtype", TypeError, r"w_norm must have dtype .*got float64", w_norm=lambda w: w.double()),
        bad("mixed_devices", ValueError, r"one device.*V is on .*w_query is on", w_query=on_other_device),
        S.NEGATIVE_EPS,
    ),
    checks=Checks(atol_scales=_scales),
    bench=B.BenchSpec(
        group="norms",
        axes=("tokens", "hidden"),
        layouts={"stacked": _bench_args},
        torch_fn=_torch_attn_res,
        # forward reads V (N rows per position) and writes h; backward reads V and dh, writes dV
        # (the parameters and the per-position softmax statistics are negligible).
        traffic=lambda s, e: (
            (BENCH_BLOCKS + 1) * s.tokens * s.hidden * e,
            (2 * BENCH_BLOCKS + 1) * s.tokens * s.hidden * e,
        ),
        describe=lambda s: B.dims(("blocks", BENCH_BLOCKS), ("tokens", s.tokens), ("hidden", s.hidden)),
        peers={B.LIGER_KERNEL: B.liger_kernel("liger_attn_res", "V", "w_query", "w_norm", "eps")},
    ),
)
