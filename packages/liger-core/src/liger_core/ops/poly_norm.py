"""The `poly_norm` op (PolyNorm of the PolyCom paper), declared once."""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_eps, check_floating, check_rows, check_same_device


def poly_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """PolyNorm over the last dimension (Zhuo et al., "Polynomial Composition Activations").

    ``y = weight[0] * n(x**3) + weight[1] * n(x**2) + weight[2] * n(x) + bias`` with
    ``n(u) = u / sqrt(mean(u**2, -1) + eps)``, computed in float32 and cast to ``x.dtype``.

    Args:
        x: ``(..., hidden)``, float32, bfloat16 or float16, any layout.
        weight: ``(3,)``, the coefficients of the cubic, square and linear terms.
        bias: ``(1,)`` (a 0-d tensor is accepted too).
        eps: ``>= 0``, added to each mean square.

    Returns:
        ``y`` with ``x``'s shape and dtype. Backward gives ``grad_x`` (``x.dtype``),
        ``grad_weight`` (``weight.dtype``) and ``grad_bias`` (``bias``'s dtype and shape).
    """
    check_args(x, weight, bias, eps)
    return math(x, weight, bias, eps)


def check_args(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if (
            x.dtype in FLOAT_DTYPES
            and x.ndim > 0
            and weight.dtype in FLOAT_DTYPES
            and weight.shape == (3,)
            and bias.dtype in FLOAT_DTYPES
            and bias.shape in ((1,), ())
            and weight.device == x.device
            and bias.device == x.device
            and eps >= 0
        ):
            return
    except (AttributeError, TypeError):
        pass
    check_floating("poly_norm", "weight", weight)
    check_floating("poly_norm", "bias", bias)
    check_rows("poly_norm", x)
    check_same_device("poly_norm", x=x, weight=weight, bias=bias)
    if weight.shape != (3,):
        raise ValueError(f"poly_norm: weight must have shape (3,); got weight.shape={tuple(weight.shape)}")
    if bias.shape not in ((1,), ()):
        raise ValueError(f"poly_norm: bias must have shape (1,) or (); got bias.shape={tuple(bias.shape)}")
    check_eps("poly_norm", eps)


def math(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    compute = x if x.dtype == torch.float64 else x.float()
    w = weight.to(compute.dtype)

    def n(u: torch.Tensor) -> torch.Tensor:
        return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)

    y = w[0] * n(compute.pow(3)) + w[1] * n(compute.pow(2)) + w[2] * n(compute) + bias.to(compute.dtype).reshape(())
    return y.to(x.dtype)


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(4, 16), dtype=torch.float32, param_dtype=None, bias_shape=(1,), strided=False, **options):
    """x around 0.2; weights away from PolyCom's equal 1/3s so each term counts."""
    g = S.gen(0)
    x = S.rows_input(shape, g, device, dtype, 1.5, 0.2, transposed=strided)
    w = S.to(device, param_dtype or dtype, torch.tensor([0.4, -0.7, 1.1]))
    b = S.to(device, param_dtype or dtype, torch.full(bias_shape, 0.3))
    return dict(x=x, weight=w, bias=b, **options)


def samples():
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=S.ROW_SHAPES))
    yield from S.grid(args, dict(eps=(1e-6, 1e-2), bias_shape=((1,), ())), shape=(37, 96))
    yield sample(args, shape=(9, 130), dtype=torch.bfloat16, param_dtype=torch.float32)
    yield sample(args, shape=(33, 40), strided=True)


def _scales(a, upstream):
    # Each term's gradient cancels like RMSNorm's: grad_x's error is measured against the sum
    # over the terms of |w_i| * rstd_i * |dy| * |d(x^i)/dx|.
    x, dy, eps = a["x"], upstream["output"].abs(), a["eps"]
    terms = torch.zeros_like(x)
    for i, wi in zip((3, 2, 1), a["weight"].tolist()):
        rstd = torch.rsqrt(x.pow(i).pow(2).mean(-1, keepdim=True) + eps)
        terms = terms + abs(wi) * rstd * dy * i * x.abs().pow(i - 1)
    return {"grad_x": S.peak(terms)}


def _torch_poly_norm(x, weight, bias, eps=1e-6):
    def n(u):
        return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)

    return weight[0] * n(x**3) + weight[1] * n(x**2) + weight[2] * n(x) + bias


OP = Op(
    poly_norm,
    since=(1, 1),
    math=math,
    grads=("x", "weight", "bias"),
    samples=samples,
    smoke=S.row_smoke(args),
    error_sample=sample(args),
    errors=(
        S.elsewhere("weight"),
        bad(
            "weight_shape",
            ValueError,
            r"weight must have shape \(3,\); got weight.shape=\(2,\)",
            weight=lambda w: w[:2],
        ),
        bad(
            "bias_shape",
            ValueError,
            r"bias must have shape \(1,\) or \(\); got bias.shape=\(2,\)",
            bias=lambda b: torch.cat([b, b]),
        ),
        S.X_INT,
        bad("weight_dtype", TypeError, r"weight must have dtype .*got float64", weight=lambda w: w.double()),
        S.NEGATIVE_EPS,
        S.X_SCALAR,
    ),
    checks=Checks(atol_scales=_scales),
    bench=B.norm(
        dict(weight=B.fixed(0.3, 0.4, 0.5), bias=B.fixed(0.1)),
        _torch_poly_norm,
        lambda s, e: (2 * s.tokens * s.hidden * e + 12 * s.tokens, 3 * s.tokens * s.hidden * e + 12 * s.tokens),
        {
            # liger-kernel's LigerPolyNorm defaults: in_place=True; its bias is 0-d (a (1,) bias
            # gets a 0-d gradient back, which autograd rejects), so it gets a 0-d view.
            B.LIGER_KERNEL: B.liger_kernel(
                "liger_poly_norm", "x", "weight", lambda kw: kw["bias"].view(()), "eps", B.const(True)
            )
        },
    ),
)
