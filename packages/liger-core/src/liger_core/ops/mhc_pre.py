"""The `mhc_pre` op (manifold-constrained hyper-connections, issue 17: the pre-mix of one mHC
layer, the streams into the wrapped layer's input), declared once.

Op boundary: liger-kernel's mHC is three functions, coefficients -> pre-mix -> (the wrapped layer)
-> post + residual mix. The wrapped layer runs between the pre-mix and the post-mix, so each mix
is its own op: this one reads the ``HC`` streams once and writes one stream (memory-bound, a
weighted sum over the stream axis); `mhc_post_res` is the other side of the layer and
`mhc_coeffs` computes the weights. `liger_core.nn.LigerMHC` composes the three.
"""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, on_other_device, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device


def mhc_pre(x: torch.Tensor, h_pre: torch.Tensor) -> torch.Tensor:
    """mHC pre-mix (arXiv:2512.24880), as liger-kernel 0.8.5's ``liger_mhc_pre``: the wrapped
    layer's input ``x_in[..., c] = sum_s h_pre[..., s] * x[..., s, c]``, accumulated in float32.

    Args:
        x: ``(..., HC, C)`` the residual streams, HC >= 1, float32, bfloat16 or float16, any layout.
        h_pre: ``(..., HC)`` the pre map (`mhc_coeffs`' first output), any floating dtype.

    Returns:
        ``x_in`` ``(..., C)`` in ``x.dtype``. Backward gives ``grad_x = grad_out * h_pre`` (in
        ``x.dtype``) and ``grad_h_pre = sum_c grad_out * x`` (in ``h_pre.dtype``); no input is
        modified.
    """
    check_args(x, h_pre)
    return math(x, h_pre)


def check_args(x: torch.Tensor, h_pre: torch.Tensor) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if (
            x.dtype in FLOAT_DTYPES
            and x.ndim >= 2
            and x.shape[-2] > 0
            and h_pre.dtype in FLOAT_DTYPES
            and h_pre.shape == x.shape[:-1]
            and h_pre.device == x.device
        ):
            return
    except (AttributeError, TypeError):
        pass
    check_floating("mhc_pre", "x", x)
    if x.dim() < 2 or x.shape[-2] == 0:
        raise ValueError(f"mhc_pre: x must have shape (..., HC, C) with HC >= 1 streams; got x.shape={tuple(x.shape)}")
    check_floating("mhc_pre", "h_pre", h_pre)
    if h_pre.shape != x.shape[:-1]:
        raise ValueError(
            f"mhc_pre: h_pre must have shape x.shape[:-1] = {tuple(x.shape[:-1])}; got h_pre.shape={tuple(h_pre.shape)}"
        )
    check_same_device("mhc_pre", x=x, h_pre=h_pre)


def math(x: torch.Tensor, h_pre: torch.Tensor) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    return (x.to(compute) * h_pre.to(compute).unsqueeze(-1)).sum(-2).to(x.dtype)


# -- declaration ---------------------------------------------------------------------------------


def streams_and_map(shape, g, device, dtype, map_dtype, strided):
    """x around 0 (``shape``: (..., HC, C)) and a map of ``shape[:-1]`` in (0, 1) as a sigmoid
    gives it, distinct per stream. ``strided``: x a view of rows padded by 8 elements."""
    c = shape[-1]
    stored = shape[:-1] + (c + 8,) if strided else shape
    x = S.normal(stored, g, 1.0, 0.1).to(device=device, dtype=dtype)
    if strided:
        x = x[..., :c]
    weights = torch.sigmoid(S.normal(shape[:-1], g, 1.5)).to(device=device, dtype=map_dtype or torch.float32)
    return x, weights


def args(device, shape=(6, 4, 8), dtype=torch.float32, h_dtype=None, strided=False):
    """h_pre float32 (as `mhc_coeffs` returns it) unless ``h_dtype``."""
    x, h_pre = streams_and_map(shape, S.gen(0), device, dtype, h_dtype, strided)
    return dict(x=x, h_pre=h_pre)


# One stream, HC not a power of two (padded stream lanes), the paper's four streams, leading dims
# (batch, seq), channels wider than one block with a masked tail, more tokens than one program's
# tile, an empty batch; every dtype, the map in x's dtype, a strided x.
MIX_SHAPES = ((5, 1, 7), (2, 3, 3, 5), (37, 4, 8), (3, 5, 300), (0, 4, 8))


def samples():
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=MIX_SHAPES))
    yield sample(args, shape=(9, 4, 40), dtype=torch.bfloat16, h_dtype=torch.bfloat16)
    yield sample(args, shape=(4, 3, 4, 10), strided=True)


def _bench_args(s, dt, dev, gen):
    # HC = 4 streams of C = hidden channels each; the map float32, as mhc_coeffs returns it.
    hc = BENCH_STREAMS
    return dict(
        x=B.normal((s.batch, s.seq, hc, s.hidden), dt, dev, gen),
        h_pre=torch.sigmoid(B.normal((s.batch, s.seq, hc), torch.float32, dev, gen, grad=False)).requires_grad_(),
    )


def _torch_mhc_pre(x, h_pre):
    # As a model writes it: a broadcast product and a sum over the stream axis, in float32.
    return (x.float() * h_pre.float().unsqueeze(-1)).sum(-2).to(x.dtype)


# liger-kernel's mHC benchmark and the paper: n = 4 residual streams.
BENCH_STREAMS = 4

OP = Op(
    mhc_pre,
    since=(1, 8),
    math=math,
    grads=("x", "h_pre"),
    samples=samples,
    smoke=(sample(args, shape=(3, 4, 8)), sample(args, shape=(2, 5, 4, 64))),
    error_sample=sample(args),
    errors=(
        bad("int_dtype", TypeError, r"x must have dtype float32, bfloat16, float16; got int64", x=lambda v: v.long()),
        bad("one_dim", ValueError, r"x must have shape \(\.\.\., HC, C\).*got x.shape=\(8,\)", x=lambda v: v[0, 0]),
        bad("no_streams", ValueError, r"HC >= 1 streams; got x.shape=\(6, 0, 8\)", x=lambda v: v[:, :0]),
        bad(
            "h_pre_shape",
            ValueError,
            r"h_pre must have shape x.shape\[:-1\] = \(6, 4\); got h_pre.shape=\(6, 3\)",
            h_pre=lambda h: h[:, :3],
        ),  # fmt: skip
        bad("h_pre_dtype", TypeError, r"h_pre must have dtype .*got int64", h_pre=lambda h: h.long()),
        bad("mixed_devices", ValueError, r"one device.*x is on .*h_pre is on", h_pre=on_other_device),
    ),
    checks=Checks(out_dtypes=lambda a: (a["x"].dtype,)),
    bench=B.BenchSpec(
        group="norms",
        axes=("tokens", "hidden"),
        layouts={"streams": _bench_args},
        torch_fn=_torch_mhc_pre,
        # Forward reads the HC streams and writes one; backward reads them and the upstream
        # gradient and writes grad_x (HC streams). The map is HC numbers per token: negligible.
        traffic=lambda s, e: (
            (BENCH_STREAMS + 1) * s.tokens * s.hidden * e,
            (2 * BENCH_STREAMS + 1) * s.tokens * s.hidden * e,
        ),
        describe=lambda s: B.dims(("streams", BENCH_STREAMS), ("tokens", s.tokens), ("C", s.hidden)),
        peers={B.LIGER_KERNEL: B.liger_kernel("liger_mhc_pre", "x", "h_pre")},
    ),
)
