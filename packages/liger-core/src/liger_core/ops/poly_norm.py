"""The `poly_norm` op (PolyNorm of the PolyCom paper): its contract, argument checks and
PyTorch reference."""

from __future__ import annotations

import torch

from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device


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
    raise NotImplementedError("contract only: call liger_core.functional.liger_poly_norm")


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
    _raise_bad_args(x, weight, bias, eps)


def _raise_bad_args(x, weight, bias, eps) -> None:
    check_floating("x", x)
    check_floating("weight", weight)
    check_floating("bias", bias)
    if x.dim() == 0:
        raise ValueError("poly_norm: x must have at least 1 dimension (..., hidden); got a 0-d tensor")
    check_same_device("poly_norm", x=x, weight=weight, bias=bias)
    if weight.shape != (3,):
        raise ValueError(f"poly_norm: weight must have shape (3,); got weight.shape={tuple(weight.shape)}")
    if bias.shape not in ((1,), ()):
        raise ValueError(f"poly_norm: bias must have shape (1,) or (); got bias.shape={tuple(bias.shape)}")
    if not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"poly_norm: eps must be a number >= 0; got {eps!r}")


def math(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    compute = x if x.dtype == torch.float64 else x.float()
    w = weight.to(compute.dtype)

    def n(u: torch.Tensor) -> torch.Tensor:
        return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)

    y = w[0] * n(compute.pow(3)) + w[1] * n(compute.pow(2)) + w[2] * n(compute) + bias.to(compute.dtype).reshape(())
    return y.to(x.dtype)


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    check_args(x, weight, bias, eps)
    return math(x, weight, bias, eps)
