"""The `mhc_coeffs` op (manifold-constrained hyper-connections, issue 17: the routing
coefficients of one mHC layer), declared once.

Op boundary: liger-kernel's mHC is three functions, coefficients -> pre-mix -> (the wrapped layer)
-> post + residual mix. The layer runs between the pre-mix and the post-mix, so one op cannot
own all three; the coefficients are the part with a kernel's worth of work (the RMS-normalised
projection and the Sinkhorn iterations over an ``HC x HC`` matrix per token, whose backward
walks the iterations in reverse). The pre-mix and the post + residual mix are the ops `mhc_pre`
and `mhc_post_res` (memory-bound sums over the stream axis); `liger_core.nn.LigerMHC` composes
the three.
"""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, on_other_device, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device


def mhc_coeffs(
    x: torch.Tensor,
    phi: torch.Tensor,
    b: torch.Tensor,
    alpha_pre: torch.Tensor,
    alpha_post: torch.Tensor,
    alpha_res: torch.Tensor,
    tmax: int = 20,
    rms_eps: float = 1e-6,
    pre_eps: float = 0.0,
    sinkhorn_eps: float = 1e-6,
    post_mult: float = 2.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Manifold-constrained hyper-connections (mHC, arXiv:2512.24880): the per-token routing
    coefficients of ``HC`` residual streams, as liger-kernel 0.8.5's ``liger_mhc_coeffs``.

    Per token, with its streams flattened to ``v = x[..., :, :].reshape(HC * C)`` (``K = HC * C``)
    and ``M = HC * HC + 2 * HC``:
    ``mix = (v @ phi) * rsqrt(mean(v ** 2) + rms_eps)`` (``M`` values), split as
    ``[pre (HC) | post (HC) | res (HC * HC, row-major)]``;
    ``h_pre = sigmoid(alpha_pre * mix_pre + b_pre) + pre_eps``;
    ``h_post = post_mult * sigmoid(alpha_post * mix_post + b_post)``;
    ``h_res``: Sinkhorn-Knopp on ``L = alpha_res * mix_res + b_res`` (``HC x HC``):
    ``P = softmax(L, rows) + sinkhorn_eps``, ``P = P / (colsum(P) + sinkhorn_eps)``, then
    ``tmax - 1`` times ``P = P / (rowsum(P) + sinkhorn_eps)``,
    ``P = P / (colsum(P) + sinkhorn_eps)``; ``h_res = P`` (near doubly stochastic, rows index
    the output stream). Computed in float32 throughout (the projection of ``x`` in float32, no
    intermediate rounding). liger-kernel's ``allow_fp32`` guard is not part of the contract:
    float32 ``x`` is always accepted.

    Args:
        x: ``(..., HC, C)`` the residual streams, HC >= 1, float32, bfloat16 or float16, any layout.
        phi: ``(HC * C, HC * HC + 2 * HC)`` the projection to the routing logits.
        b: ``(HC * HC + 2 * HC,)`` the logits' bias.
        alpha_pre, alpha_post, alpha_res: 0-dim tensors, the logits' scales.
        tmax: Sinkhorn iterations, >= 1 (the first is the softmax step).
        rms_eps, sinkhorn_eps, pre_eps: >= 0. post_mult: any number.

    Returns:
        ``(h_pre (..., HC), h_post (..., HC), h_res (..., HC, HC))``, float32. Backward gives
        ``grad_x`` (``x.dtype``) and the gradients of ``phi``, ``b`` and the alphas in their own
        dtypes, through every Sinkhorn iteration; no input is modified.
    """
    check_args(x, phi, b, alpha_pre, alpha_post, alpha_res, tmax, rms_eps, pre_eps, sinkhorn_eps, post_mult)
    return math(x, phi, b, alpha_pre, alpha_post, alpha_res, tmax, rms_eps, pre_eps, sinkhorn_eps, post_mult)


def _number_ok(v: object, low: float | None = 0.0) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and (low is None or v >= low)


def check_args(
    x: torch.Tensor,
    phi: torch.Tensor,
    b: torch.Tensor,
    alpha_pre: torch.Tensor,
    alpha_post: torch.Tensor,
    alpha_res: torch.Tensor,
    tmax: int,
    rms_eps: float,
    pre_eps: float,
    sinkhorn_eps: float,
    post_mult: float,
) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    alphas = (("alpha_pre", alpha_pre), ("alpha_post", alpha_post), ("alpha_res", alpha_res))
    try:
        if x.dtype in FLOAT_DTYPES and x.ndim >= 2 and x.shape[-2] > 0:
            hc, k = x.shape[-2], x.shape[-2] * x.shape[-1]
            m = hc * hc + 2 * hc
            if (
                phi.dtype in FLOAT_DTYPES
                and phi.shape == (k, m)
                and phi.device == x.device
                and b.dtype in FLOAT_DTYPES
                and b.shape == (m,)
                and b.device == x.device
                and all(a.dtype in FLOAT_DTYPES and a.ndim == 0 and a.device == x.device for _, a in alphas)
                and isinstance(tmax, int)
                and tmax >= 1
                and _number_ok(rms_eps)
                and _number_ok(pre_eps)
                and _number_ok(sinkhorn_eps)
                and _number_ok(post_mult, None)
            ):
                return
    except (AttributeError, TypeError):
        pass
    check_floating("mhc_coeffs", "x", x)
    if x.dim() < 2 or x.shape[-2] == 0:
        raise ValueError(
            f"mhc_coeffs: x must have shape (..., HC, C) with HC >= 1 streams; got x.shape={tuple(x.shape)}"
        )
    hc, c = x.shape[-2], x.shape[-1]
    k, m = hc * c, hc * hc + 2 * hc
    check_floating("mhc_coeffs", "phi", phi)
    if phi.shape != (k, m):
        raise ValueError(
            f"mhc_coeffs: phi must have shape (HC * C, HC * HC + 2 * HC) = ({k}, {m}) for x's HC={hc}, C={c}; "
            f"got phi.shape={tuple(phi.shape)}"
        )
    check_floating("mhc_coeffs", "b", b)
    if b.shape != (m,):
        raise ValueError(f"mhc_coeffs: b must have shape (HC * HC + 2 * HC,) = ({m},); got b.shape={tuple(b.shape)}")
    for name, a in alphas:
        check_floating("mhc_coeffs", name, a)
        if a.ndim != 0:
            raise ValueError(f"mhc_coeffs: {name} must be a 0-dim tensor; got {name}.shape={tuple(a.shape)}")
    check_same_device("mhc_coeffs", x=x, phi=phi, b=b, **dict(alphas))
    if not isinstance(tmax, int) or isinstance(tmax, bool) or tmax < 1:
        raise ValueError(f"mhc_coeffs: tmax must be an int >= 1; got {tmax!r}")
    for name, v in (("rms_eps", rms_eps), ("pre_eps", pre_eps), ("sinkhorn_eps", sinkhorn_eps)):
        if not _number_ok(v):
            raise ValueError(f"mhc_coeffs: {name} must be a number >= 0; got {v!r}")
    if not _number_ok(post_mult, None):
        raise ValueError(f"mhc_coeffs: post_mult must be a number; got {post_mult!r}")


def sinkhorn(logits: torch.Tensor, tmax: int, eps: float) -> torch.Tensor:
    """Sinkhorn-Knopp over the last two dims of ``logits`` (rows softmaxed first), as the contract states."""
    mat = torch.softmax(logits, dim=-1) + eps
    mat = mat / (mat.sum(-2, keepdim=True) + eps)
    for _ in range(tmax - 1):
        mat = mat / (mat.sum(-1, keepdim=True) + eps)
        mat = mat / (mat.sum(-2, keepdim=True) + eps)
    return mat


def math(
    x: torch.Tensor,
    phi: torch.Tensor,
    b: torch.Tensor,
    alpha_pre: torch.Tensor,
    alpha_post: torch.Tensor,
    alpha_res: torch.Tensor,
    tmax: int,
    rms_eps: float,
    pre_eps: float,
    sinkhorn_eps: float,
    post_mult: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    hc = x.shape[-2]
    v = x.to(compute).flatten(-2)
    mix = (v @ phi.to(compute)) * torch.rsqrt(v.square().mean(-1, keepdim=True) + rms_eps)
    logits_pre = mix[..., :hc] * alpha_pre.to(compute) + b[:hc].to(compute)
    logits_post = mix[..., hc : 2 * hc] * alpha_post.to(compute) + b[hc : 2 * hc].to(compute)
    logits_res = mix[..., 2 * hc :] * alpha_res.to(compute) + b[2 * hc :].to(compute)
    h_pre = torch.sigmoid(logits_pre) + pre_eps
    h_post = torch.sigmoid(logits_post) * post_mult
    h_res = sinkhorn(logits_res.reshape(*x.shape[:-2], hc, hc), tmax, sinkhorn_eps)
    return h_pre, h_post, h_res


# -- declaration ---------------------------------------------------------------------------------


def args(
    device,
    shape=(6, 4, 8),
    dtype=torch.float32,
    phi_dtype=None,
    strided=False,
    tmax=20,
    rms_eps=1e-6,
    pre_eps=0.0,
    sinkhorn_eps=1e-6,
    post_mult=2.0,
):
    """x around 0; phi scaled so the RMS-normalised logits spread over a few units (the softmax is
    neither uniform nor one-hot, the sigmoids off their flat tails); b small; alphas near 1
    (liger-kernel's init) but distinct, so each gradient is told apart. b and the alphas float32
    as liger-kernel keeps them. ``strided``: x a view of rows padded by 8 elements."""
    g = S.gen(0)
    hc, c = shape[-2], shape[-1]
    k, m = hc * c, hc * hc + 2 * hc
    stored = shape[:-1] + (c + 8,) if strided else shape
    x = S.normal(stored, g, 1.0, 0.1).to(device=device, dtype=dtype)
    if strided:
        x = x[..., :c]
    phi = S.to(device, phi_dtype or dtype, S.normal((k, m), g, 1.5 / max(k, 1) ** 0.5))
    b = S.to(device, torch.float32, S.normal(m, g, 0.3))
    alphas = {
        name: S.to(device, torch.float32, torch.tensor(value))
        for name, value in (("alpha_pre", 0.9), ("alpha_post", 1.1), ("alpha_res", 1.3))
    }
    return dict(
        x=x,
        phi=phi,
        b=b,
        **alphas,
        tmax=tmax,
        rms_eps=rms_eps,
        pre_eps=pre_eps,
        sinkhorn_eps=sinkhorn_eps,
        post_mult=post_mult,
    )


def samples():
    # One stream (h_res is 1x1), HC not a power of two (padded lanes in a register tile), four
    # streams (the paper's n), leading dims (batch, seq), more tokens than one program's block,
    # an empty batch, every dtype; one Sinkhorn step only and a few steps; the options.
    shapes = ((5, 1, 7), (2, 3, 3, 5), (37, 4, 8), (3, 5, 6), (0, 4, 8))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes), tmax=6)
    yield sample(args, shape=(70, 2, 16), tmax=20)
    yield sample(args, shape=(9, 4, 8), tmax=1)
    yield sample(args, shape=(9, 4, 8), dtype=torch.bfloat16, phi_dtype=torch.float32, tmax=4)
    yield sample(args, shape=(4, 3, 4, 10), strided=True, tmax=5)
    yield sample(args, shape=(11, 3, 8), tmax=5, rms_eps=0.5, pre_eps=0.25, sinkhorn_eps=0.05, post_mult=1.0)


def _bench_args(s, dt, dev, gen):
    # HC = 4 streams of C = hidden channels each, liger-kernel's defaults for the options.
    hc = BENCH_STREAMS
    k, m = hc * s.hidden, hc * hc + 2 * hc
    return dict(
        x=B.normal((s.batch, s.seq, hc, s.hidden), dt, dev, gen),
        phi=B.normal((k, m), dt, dev, gen, scale=0.02),
        b=torch.zeros(m, dtype=torch.float32, device=dev),
        alpha_pre=torch.ones((), dtype=torch.float32, device=dev),
        alpha_post=torch.ones((), dtype=torch.float32, device=dev),
        alpha_res=torch.ones((), dtype=torch.float32, device=dev),
        tmax=20,
        rms_eps=1e-6,
        pre_eps=0.0,
        sinkhorn_eps=1e-6,
        post_mult=2.0,
    )


def _torch_mhc_coeffs(x, phi, b, alpha_pre, alpha_post, alpha_res, tmax=20, rms_eps=1e-6, pre_eps=0.0,
                      sinkhorn_eps=1e-6, post_mult=2.0):  # fmt: skip
    # As a model writes it: the projection in x's dtype, float32 from the logits on.
    hc = x.shape[-2]
    v = x.flatten(-2)
    mix = (v @ phi).float() * torch.rsqrt(v.float().pow(2).mean(-1, keepdim=True) + rms_eps)
    h_pre = torch.sigmoid(mix[..., :hc] * alpha_pre + b[:hc]) + pre_eps
    h_post = torch.sigmoid(mix[..., hc : 2 * hc] * alpha_post + b[hc : 2 * hc]) * post_mult
    logits = (mix[..., 2 * hc :] * alpha_res + b[2 * hc :]).unflatten(-1, (hc, hc))
    return h_pre, h_post, sinkhorn(logits, tmax, sinkhorn_eps)


# liger-kernel's mHC benchmark and the paper: n = 4 residual streams.
BENCH_STREAMS = 4

OP = Op(
    mhc_coeffs,
    since=(1, 7),
    math=math,
    grads=("x", "phi", "b", "alpha_pre", "alpha_post", "alpha_res"),
    outputs=("h_pre", "h_post", "h_res"),
    samples=samples,
    smoke=(sample(args, shape=(3, 4, 8), tmax=3), sample(args, shape=(2, 5, 4, 64))),
    error_sample=sample(args),
    errors=(
        bad("int_dtype", TypeError, r"x must have dtype float32, bfloat16, float16; got int64", x=lambda v: v.long()),
        bad("one_dim", ValueError, r"x must have shape \(\.\.\., HC, C\).*got x.shape=\(8,\)", x=lambda v: v[0, 0]),
        bad("no_streams", ValueError, r"HC >= 1 streams; got x.shape=\(6, 0, 8\)", x=lambda v: v[:, :0]),
        bad("phi_shape", ValueError, r"phi must have shape .* = \(32, 24\).*\(31, 24\)", phi=lambda p: p[:31]),
        bad("b_shape", ValueError, r"b must have shape .* = \(24,\); got b.shape=\(23,\)", b=lambda v: v[:23]),
        bad("phi_dtype", TypeError, r"phi must have dtype .*got float64", phi=lambda p: p.double()),
        bad(
            "alpha_shape",
            ValueError,
            r"alpha_res must be a 0-dim tensor; got alpha_res.shape=\(1,\)",
            alpha_res=lambda a: a.reshape(1),
        ),  # fmt: skip
        bad("mixed_devices", ValueError, r"one device.*x is on .*phi is on", phi=on_other_device),
        bad("tmax_zero", ValueError, r"tmax must be an int >= 1; got 0", tmax=0),
        bad("negative_rms_eps", ValueError, r"rms_eps must be a number >= 0; got -1", rms_eps=-1),
        bad("negative_sinkhorn_eps", ValueError, r"sinkhorn_eps must be a number >= 0; got -0.5", sinkhorn_eps=-0.5),
    ),
    checks=Checks(out_dtypes=lambda a: (torch.float32,) * 3),
    bench=B.BenchSpec(
        group="norms",
        axes=("tokens", "hidden"),
        layouts={"streams": _bench_args},
        torch_fn=_torch_mhc_coeffs,
        # Forward reads x (HC streams per token); backward reads x again and writes grad_x. The
        # projection's weights and the per-token coefficients are negligible beside the streams.
        traffic=lambda s, e: (
            BENCH_STREAMS * s.tokens * s.hidden * e,
            2 * BENCH_STREAMS * s.tokens * s.hidden * e,
        ),
        describe=lambda s: B.dims(("streams", BENCH_STREAMS), ("tokens", s.tokens), ("C", s.hidden)),
        peers={
            B.LIGER_KERNEL: B.liger_kernel(
                "liger_mhc_coeffs",
                "x",
                "phi",
                "b",
                "alpha_pre",
                "alpha_post",
                "alpha_res",
                tmax="tmax",
                rms_eps="rms_eps",
                pre_eps="pre_eps",
                sinkhorn_eps="sinkhorn_eps",
                post_mult="post_mult",
            )
        },
    ),
)
