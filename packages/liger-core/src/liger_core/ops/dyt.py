"""The `dyt` op (Dynamic Tanh, a normalisation-free replacement for LayerNorm): its
contract, argument checks and PyTorch reference."""

from __future__ import annotations

import torch

from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device


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
    raise NotImplementedError("contract only: call liger_core.functional.liger_dyt")


def check_args(x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if (
            x.dtype in FLOAT_DTYPES
            and x.ndim > 0
            and alpha.dtype in FLOAT_DTYPES
            and alpha.shape in ((1,), ())
            and alpha.device == x.device
            and gamma.dtype in FLOAT_DTYPES
            and gamma.ndim == 1
            and gamma.shape[0] == x.shape[-1]
            and gamma.device == x.device
            and (
                beta is None
                or (
                    beta.dtype in FLOAT_DTYPES
                    and beta.ndim == 1
                    and beta.shape[0] == x.shape[-1]
                    and beta.device == x.device
                )
            )
        ):
            return
    except (AttributeError, TypeError):
        pass
    _raise_bad_args(x, alpha, gamma, beta)


def _raise_bad_args(x, alpha, gamma, beta) -> None:
    check_floating("x", x)
    check_floating("alpha", alpha)
    check_floating("gamma", gamma)
    if beta is not None:
        check_floating("beta", beta)
    if x.dim() == 0:
        raise ValueError("dyt: x must have at least 1 dimension (..., hidden); got a 0-d tensor")
    check_same_device("dyt", x=x, alpha=alpha, gamma=gamma, beta=beta)
    if alpha.shape not in ((1,), ()):
        raise ValueError(f"dyt: alpha must have shape (1,) or (); got alpha.shape={tuple(alpha.shape)}")
    for name, p in (("gamma", gamma), ("beta", beta)):
        if p is not None and p.shape != (x.shape[-1],):
            raise ValueError(
                f"dyt: {name} must have shape (hidden,) = ({x.shape[-1]},) to match x.shape[-1]; "
                f"got {name}.shape={tuple(p.shape)}"
            )


def math(x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    compute = x if x.dtype == torch.float64 else x.float()
    y = gamma.to(compute.dtype) * torch.tanh(alpha.to(compute.dtype).reshape(()) * compute)
    if beta is not None:
        y = y + beta.to(compute.dtype)
    return y.to(x.dtype)


def reference(x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None) -> torch.Tensor:
    check_args(x, alpha, gamma, beta)
    return math(x, alpha, gamma, beta)
