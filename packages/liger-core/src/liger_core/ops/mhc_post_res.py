"""The `mhc_post_res` op (manifold-constrained hyper-connections, issue 17: the post + residual
mix of one mHC layer, the wrapped layer's output back into the streams), declared once.

Op boundary: liger-kernel's mHC is three functions, coefficients -> pre-mix -> (the wrapped layer)
-> post + residual mix. The wrapped layer runs between the pre-mix and this mix, so each mix is its
own op: this one reads the ``HC`` streams and the layer's output once and writes ``HC`` streams
(memory-bound: per token an ``HC x HC`` matrix times the streams plus a rank-one scatter of the
layer's output); `mhc_pre` is the other side of the layer and `mhc_coeffs` computes the weights.
"""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, on_other_device, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device
from liger_core.ops.mhc_pre import BENCH_STREAMS, MIX_SHAPES, streams_and_map


def mhc_post_res(x: torch.Tensor, f_out: torch.Tensor, h_post: torch.Tensor, h_res: torch.Tensor) -> torch.Tensor:
    """mHC post + residual mix (arXiv:2512.24880), as liger-kernel 0.8.5's ``liger_mhc_post_res``:
    ``x_out[..., o, c] = h_post[..., o] * f_out[..., c] + sum_i h_res[..., o, i] * x[..., i, c]``,
    accumulated in float32.

    Args:
        x: ``(..., HC, C)`` the residual streams, HC >= 1, float32, bfloat16 or float16, any layout.
        f_out: ``(..., C)`` the wrapped layer's output, any floating dtype.
        h_post: ``(..., HC)`` the post map, any floating dtype.
        h_res: ``(..., HC, HC)`` the residual mixing matrix (rows index the output stream), any
            floating dtype.

    Returns:
        ``x_out`` ``(..., HC, C)`` in ``x.dtype``. Backward gives ``grad_x = h_res^T grad_out``,
        ``grad_f_out = sum_o h_post[o] * grad_out[o]``, ``grad_h_post = sum_c grad_out * f_out`` and
        ``grad_h_res[o, i] = sum_c grad_out[o] * x[i]``, each in its input's dtype; no input is
        modified.
    """
    check_args(x, f_out, h_post, h_res)
    return math(x, f_out, h_post, h_res)


def check_args(x: torch.Tensor, f_out: torch.Tensor, h_post: torch.Tensor, h_res: torch.Tensor) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if (
            x.dtype in FLOAT_DTYPES
            and x.ndim >= 2
            and x.shape[-2] > 0
            and all(t.dtype in FLOAT_DTYPES and t.device == x.device for t in (f_out, h_post, h_res))
            and f_out.shape == x.shape[:-2] + x.shape[-1:]
            and h_post.shape == x.shape[:-1]
            and h_res.shape == x.shape[:-1] + x.shape[-2:-1]
        ):
            return
    except (AttributeError, TypeError):
        pass
    check_floating("mhc_post_res", "x", x)
    if x.dim() < 2 or x.shape[-2] == 0:
        raise ValueError(
            f"mhc_post_res: x must have shape (..., HC, C) with HC >= 1 streams; got x.shape={tuple(x.shape)}"
        )
    wanted = {
        "f_out": ("x.shape[:-2] + (C,)", x.shape[:-2] + x.shape[-1:]),
        "h_post": ("x.shape[:-1]", x.shape[:-1]),
        "h_res": ("x.shape[:-1] + (HC,)", x.shape[:-1] + x.shape[-2:-1]),
    }
    for name, t in (("f_out", f_out), ("h_post", h_post), ("h_res", h_res)):
        check_floating("mhc_post_res", name, t)
        what, shape = wanted[name]
        if t.shape != shape:
            raise ValueError(
                f"mhc_post_res: {name} must have shape {what} = {tuple(shape)}; got {name}.shape={tuple(t.shape)}"
            )
    check_same_device("mhc_post_res", x=x, f_out=f_out, h_post=h_post, h_res=h_res)


def math(x: torch.Tensor, f_out: torch.Tensor, h_post: torch.Tensor, h_res: torch.Tensor) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    mixed = h_res.to(compute) @ x.to(compute)
    return (mixed + h_post.to(compute).unsqueeze(-1) * f_out.to(compute).unsqueeze(-2)).to(x.dtype)


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(6, 4, 8), dtype=torch.float32, f_dtype=None, h_dtype=None, strided=False):
    """x around 0; f_out like it (x's dtype unless ``f_dtype``); h_post in (0, 2) as `mhc_coeffs`'
    ``post_mult = 2`` gives it; h_res a positive matrix with rows near 1 (not exactly doubly
    stochastic, so every entry's gradient is told apart); the maps float32 unless ``h_dtype``."""
    g = S.gen(0)
    x, h_post = streams_and_map(shape, g, device, dtype, h_dtype, strided)
    hc, c = shape[-2], shape[-1]
    f_out = S.normal(shape[:-2] + (c,), g, 1.0, -0.1).to(device=device, dtype=f_dtype or dtype)
    h_res = torch.softmax(S.normal(shape[:-1] + (hc,), g, 1.0), -1) * 1.1
    return dict(
        x=x,
        f_out=f_out,
        h_post=h_post * 2.0,
        h_res=h_res.to(device=device, dtype=h_dtype or torch.float32),
    )


def samples():
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=MIX_SHAPES))
    yield sample(args, shape=(9, 4, 40), dtype=torch.bfloat16, h_dtype=torch.bfloat16, f_dtype=torch.float32)
    yield sample(args, shape=(4, 3, 4, 10), strided=True)


def _bench_args(s, dt, dev, gen):
    # HC = 4 streams of C = hidden channels each; the maps float32, as mhc_coeffs returns them.
    hc = BENCH_STREAMS
    lead = (s.batch, s.seq)
    return dict(
        x=B.normal(lead + (hc, s.hidden), dt, dev, gen),
        f_out=B.normal(lead + (s.hidden,), dt, dev, gen),
        h_post=(2 * torch.sigmoid(B.normal(lead + (hc,), torch.float32, dev, gen, grad=False))).requires_grad_(),
        h_res=torch.softmax(B.normal(lead + (hc, hc), torch.float32, dev, gen, grad=False), -1).requires_grad_(),
    )


def _torch_mhc_post_res(x, f_out, h_post, h_res):
    # As a model writes it: a batched matmul over the stream axis plus the broadcast scatter.
    out = h_res @ x.float() + h_post.unsqueeze(-1) * f_out.float().unsqueeze(-2)
    return out.to(x.dtype)


OP = Op(
    mhc_post_res,
    since=(1, 8),
    math=math,
    grads=("x", "f_out", "h_post", "h_res"),
    samples=samples,
    smoke=(sample(args, shape=(3, 4, 8)), sample(args, shape=(2, 5, 4, 64))),
    error_sample=sample(args),
    errors=(
        bad("int_dtype", TypeError, r"x must have dtype float32, bfloat16, float16; got int64", x=lambda v: v.long()),
        bad("one_dim", ValueError, r"x must have shape \(\.\.\., HC, C\).*got x.shape=\(8,\)", x=lambda v: v[0, 0]),
        bad("no_streams", ValueError, r"HC >= 1 streams; got x.shape=\(6, 0, 8\)", x=lambda v: v[:, :0]),
        bad(
            "f_out_shape",
            ValueError,
            r"f_out must have shape .* = \(6, 8\); got f_out.shape=\(6, 7\)",
            f_out=lambda f: f[:, :7],
        ),  # fmt: skip
        bad(
            "h_post_shape",
            ValueError,
            r"h_post must have shape .* = \(6, 4\); got h_post.shape=\(5, 4\)",
            h_post=lambda h: h[:5],
        ),  # fmt: skip
        bad(
            "h_res_shape",
            ValueError,
            r"h_res must have shape .* = \(6, 4, 4\); got h_res.shape=\(6, 4, 3\)",
            h_res=lambda h: h[..., :3],
        ),  # fmt: skip
        bad("h_res_dtype", TypeError, r"h_res must have dtype .*got int64", h_res=lambda h: h.long()),
        bad("mixed_devices", ValueError, r"one device.*x is on .*f_out is on", f_out=on_other_device),
    ),
    checks=Checks(out_dtypes=lambda a: (a["x"].dtype,)),
    bench=B.BenchSpec(
        group="norms",
        axes=("tokens", "hidden"),
        layouts={"streams": _bench_args},
        torch_fn=_torch_mhc_post_res,
        # Forward reads the HC streams and the layer output and writes HC streams; backward reads
        # the upstream gradient (HC streams), x and f_out and writes grad_x and grad_f_out.
        traffic=lambda s, e: (
            (2 * BENCH_STREAMS + 1) * s.tokens * s.hidden * e,
            (3 * BENCH_STREAMS + 2) * s.tokens * s.hidden * e,
        ),
        describe=lambda s: B.dims(("streams", BENCH_STREAMS), ("tokens", s.tokens), ("C", s.hidden)),
        peers={B.LIGER_KERNEL: B.liger_kernel("liger_mhc_post_res", "x", "f_out", "h_post", "h_res")},
    ),
)
