"""The `dyt` op (Dynamic Tanh, a normalisation-free replacement for LayerNorm), declared once."""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_param, check_rows, check_same_device, param_ok


def dyt(x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None) -> torch.Tensor:
    """Dynamic Tanh (Zhu et al., "Transformers without Normalization") over the last dimension.

    ``y = gamma * tanh(alpha * x) + beta``, computed in float32 and cast to ``x.dtype``.

    Args:
        x: ``(..., hidden)``, float32, bfloat16 or float16, any layout.
        alpha: ``(1,)`` learnable scalar (a 0-d tensor is accepted too).
        gamma: ``(hidden,)`` per-channel scale.
        beta: ``(hidden,)`` per-channel shift, or None (no shift).

    Returns:
        ``y`` with ``x``'s shape and dtype. Backward gives ``grad_x`` (``x.dtype``),
        ``grad_alpha`` (``alpha``'s dtype and shape), ``grad_gamma`` and ``grad_beta``
        (their parameters' dtypes).
    """
    check_args(x, alpha, gamma, beta)
    return math(x, alpha, gamma, beta)


def check_args(x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if (
            x.dtype in FLOAT_DTYPES
            and x.ndim > 0
            and alpha.dtype in FLOAT_DTYPES
            and alpha.shape in ((1,), ())
            and alpha.device == x.device
            and gamma is not None
            and param_ok(gamma, x)
            and param_ok(beta, x)
        ):
            return
    except (AttributeError, TypeError):
        pass
    check_floating("dyt", "alpha", alpha)
    check_floating("dyt", "gamma", gamma)
    check_rows("dyt", x)
    check_same_device("dyt", x=x, alpha=alpha, gamma=gamma, beta=beta)
    if alpha.shape not in ((1,), ()):
        raise ValueError(f"dyt: alpha must have shape (1,) or (); got alpha.shape={tuple(alpha.shape)}")
    check_param("dyt", "gamma", gamma, x)
    check_param("dyt", "beta", beta, x)


def math(x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    compute = x if x.dtype == torch.float64 else x.float()
    y = gamma.to(compute.dtype) * torch.tanh(alpha.to(compute.dtype).reshape(()) * compute)
    if beta is not None:
        y = y + beta.to(compute.dtype)
    return y.to(x.dtype)


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(4, 16), dtype=torch.float32, beta=True, param_dtype=None, alpha_shape=(1,), strided=False):
    """x around 0.3 and alpha 0.7, so tanh's argument crosses its bend; gamma around 1."""
    g = S.gen(0)
    x = S.rows_input(shape, g, device, dtype, 2, 0.3, transposed=strided)
    alpha = S.to(device, param_dtype or dtype, torch.full(alpha_shape, 0.7))
    gamma = S.to(device, param_dtype or dtype, S.normal(shape[-1], g, 0.5, 1))
    b = S.to(device, param_dtype or dtype, S.normal(shape[-1], g, 0.5)) if beta else None
    return dict(x=x, alpha=alpha, gamma=gamma, beta=b)


def samples():
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=S.ROW_SHAPES))
    yield from S.grid(args, dict(dtype=S.OPTION_DTYPES, beta=(True, False), alpha_shape=((1,), ())), shape=(37, 96))
    yield sample(args, shape=(9, 130), dtype=torch.bfloat16, param_dtype=torch.float32)
    yield sample(args, shape=(33, 40), strided=True)


def _scales(a, upstream):
    # grad_alpha sums dy * gamma * x * (1 - tanh^2) over every element: random signs cancel, so
    # its error is measured against the sum of the magnitudes over sqrt(elements).
    x = a["x"]
    if not x.numel():
        return {}
    t = torch.tanh(a["alpha"].reshape(()) * x)
    terms = (upstream["output"] * a["gamma"] * x * (1 - t * t)).abs().sum()
    return {"grad_alpha": float(terms) / x.numel() ** 0.5}


OP = Op(
    dyt,
    since=(1, 1),
    math=math,
    grads=("x", "alpha", "gamma", "beta"),
    samples=samples,
    smoke=S.row_smoke(args),
    error_sample=sample(args),
    errors=(
        S.elsewhere("gamma"),
        bad(
            "alpha_shape",
            ValueError,
            r"alpha must have shape \(1,\) or \(\); got alpha.shape=\(2,\)",
            alpha=lambda a: torch.cat([a, a]),
        ),
        bad("gamma_shape", ValueError, r"gamma must have shape \(hidden,\) = \(16,\).*\(15,\)", gamma=lambda g: g[:15]),
        bad(
            "beta_shape",
            ValueError,
            r"beta must have shape \(hidden,\) = \(16,\).*\(17,\)",
            beta=lambda b: torch.cat([b, b[:1]]),
        ),
        S.X_INT,
        bad("alpha_dtype", TypeError, r"alpha must have dtype .*got float64", alpha=lambda a: a.double()),
        S.X_SCALAR,
    ),
    checks=Checks(atol_scales=_scales),
    bench=B.norm(
        dict(alpha=B.fixed(0.5), gamma=B.norm_weight, beta=B.norm_bias),
        lambda x, alpha, gamma, beta: gamma * torch.tanh(alpha * x) + (0 if beta is None else beta),
        lambda s, e: (
            2 * s.tokens * s.hidden * e + 2 * s.hidden * e,
            3 * s.tokens * s.hidden * e + 4 * s.hidden * e,
        ),
        {B.LIGER_KERNEL: B.liger_kernel("liger_dyt", "x", "alpha", "gamma", "beta")},
    ),
)
