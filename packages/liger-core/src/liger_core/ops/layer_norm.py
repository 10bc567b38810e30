"""The `layer_norm` op: layer normalisation over the last dimension, declared once."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, Sharding, bad, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_eps, check_param, check_rows, param_ok


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Layer normalisation over the last dimension (``torch.nn.functional.layer_norm``).

    ``y = (x - mean(x, -1)) / sqrt(var(x, -1) + eps) * weight + bias`` with the biased
    variance, computed in float32 and cast to ``x.dtype`` once at the end.

    Args:
        x: ``(..., hidden)``, float32, bfloat16 or float16, any layout.
        weight: ``(hidden,)`` scale or None (no scale); its dtype may differ from ``x``'s.
        bias: ``(hidden,)`` shift or None (no shift); its dtype may differ from ``x``'s.
        eps: ``>= 0``, added to the variance.

    Returns:
        ``y`` with ``x``'s shape and dtype. Backward gives ``grad_x`` (``x.dtype``),
        ``grad_weight`` (``weight.dtype``) and ``grad_bias`` (``bias.dtype``).
    """
    check_args(x, weight, bias, eps)
    return math(x, weight, bias, eps)


def check_args(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if x.dtype in FLOAT_DTYPES and x.ndim > 0 and eps >= 0 and param_ok(weight, x) and param_ok(bias, x):
            return
    except (AttributeError, TypeError):
        pass
    check_rows("layer_norm", x)
    check_param("layer_norm", "weight", weight, x)
    check_param("layer_norm", "bias", bias, x)
    check_eps("layer_norm", eps)


def math(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    compute = x if x.dtype == torch.float64 else x.float()
    centered = compute - compute.mean(-1, keepdim=True)
    y = centered * torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(compute.dtype)
    if bias is not None:
        y = y + bias.to(compute.dtype)
    return y.to(x.dtype)


def centred_grad_scale(grouped: torch.Tensor, eps: float, g: torch.Tensor) -> torch.Tensor:
    """The size of a centred norm's grad_x terms before they cancel: ``rstd * |g|`` with ``rstd``
    per group of the last axis of ``grouped`` and ``g = dy * weight`` (broadcast to it)."""
    var = (grouped - grouped.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True)
    return (torch.rsqrt(var + eps) * g).abs()


# -- declaration ---------------------------------------------------------------------------------


def args(
    device,
    shape=(4, 16),
    dtype=torch.float32,
    weight=True,
    bias=True,
    param_dtype=None,
    mean=1.5,
    strided=False,
    **options,
):
    """x with a mean offset (centring matters), weight around 1, bias around 0."""
    g = S.gen(0)
    x = S.rows_input(shape, g, device, dtype, 2, mean, transposed=strided)
    w = S.to(device, param_dtype or dtype, S.normal(shape[-1], g, 0.5, 1)) if weight else None
    b = S.to(device, param_dtype or dtype, S.normal(shape[-1], g, 0.5)) if bias else None
    return dict(x=x, weight=w, bias=b, **options)


def samples():
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=S.ROW_SHAPES))
    yield from S.grid(
        args, dict(dtype=S.OPTION_DTYPES, weight=(True, False), bias=(True, False)), shape=(37, 96), eps=1e-6
    )
    yield sample(args, shape=(9, 130), dtype=torch.bfloat16, param_dtype=torch.float32)
    # A mean far above the spread: a one-pass E[x^2] - E[x]^2 variance would cancel.
    yield sample(args, shape=(6, 300), mean=101.5)
    yield sample(args, shape=(33, 40), strided=True)


def _scales(a, upstream):
    g = upstream["output"] * (a["weight"] if a["weight"] is not None else 1.0)
    return {"grad_x": S.peak(centred_grad_scale(a["x"], a["eps"], g))}


OP = Op(
    layer_norm,
    since=(1, 1),
    math=math,
    grads=("x", "weight", "bias"),
    sharding=Sharding(inputs=("x",), across=lambda a: (-1,), outputs=("x",), replicated=("weight", "bias")),
    samples=samples,
    smoke=S.row_smoke(args),
    error_sample=sample(args, shape=(4, 16)),
    errors=(
        S.elsewhere("weight"),
        S.elsewhere("bias", "bias_device"),
        bad(
            "weight_shape",
            ValueError,
            r"weight must have shape \(hidden,\) = \(16,\).*\(15,\)",
            weight=lambda w: w[:15],
        ),
        bad(
            "bias_shape",
            ValueError,
            r"bias must have shape \(hidden,\) = \(16,\).*\(2, 16\)",
            bias=lambda b: b.expand(2, 16),
        ),
        S.X_INT,
        bad("bias_dtype", TypeError, r"bias must have dtype .*got float64", bias=lambda b: b.double()),
        S.NEGATIVE_EPS,
        S.X_SCALAR,
    ),
    checks=Checks(atol_scales=_scales),
    bench=B.norm(
        dict(weight=B.norm_weight, bias=B.norm_bias),
        lambda x, weight=None, bias=None, eps=1e-5: F.layer_norm(x, (x.shape[-1],), weight, bias, eps),
        lambda s, e: (
            2 * s.tokens * s.hidden * e + 2 * s.hidden * e + 8 * s.tokens,
            3 * s.tokens * s.hidden * e + 4 * s.hidden * e + 8 * s.tokens,
        ),
        {B.LIGER_KERNEL: B.liger_kernel("liger_layer_norm", "x", "weight", "bias", "eps")},
    ),
)
