"""The `sparsemax` op: its contract, argument checks and PyTorch reference."""

from __future__ import annotations

import torch

from liger_core.ops._checks import FLOAT_DTYPES, check_floating


def sparsemax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Sparsemax (Martins & Astudillo, 2016) along ``dim``: the Euclidean projection of
    each slice onto the probability simplex, ``y = max(x - tau, 0)`` with ``tau`` chosen so
    that ``sum(y) == 1``. Unlike softmax, entries below ``tau`` are exactly zero.

    Args:
        x: float32, bfloat16 or float16, at least 1-D; any layout. Computed in float32.
        dim: the axis to normalise, ``-x.ndim <= dim < x.ndim``.

    Returns:
        ``x``'s shape and dtype. Backward: on the support ``S = {y > 0}`` of each slice,
        ``grad_x = grad_y - mean(grad_y over S)``; zero elsewhere.
    """
    raise NotImplementedError("contract only: call liger_core.functional.liger_sparsemax")


def check_args(x: torch.Tensor, dim: int) -> None:
    """Raise a clear error for arguments outside the contract. Backends call this first."""
    try:
        if x.dtype in FLOAT_DTYPES and x.ndim > 0 and type(dim) is int and -x.ndim <= dim < x.ndim:
            return
    except (AttributeError, TypeError):
        pass
    check_floating("x", x)
    if x.ndim == 0:
        raise ValueError("sparsemax: x must have at least 1 dimension; got a 0-d tensor")
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"sparsemax: dim must be an int; got {type(dim).__name__}")
    if not -x.ndim <= dim < x.ndim:
        raise IndexError(f"sparsemax: dim must be in [{-x.ndim}, {x.ndim - 1}] for x of {x.ndim} dimensions; got {dim}")


def math(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The formula (sort-based threshold), differentiable by autograd, for any floating dtype."""
    z = (x if x.dtype == torch.float64 else x.float()).transpose(dim, -1)
    n = z.shape[-1]
    if n == 0 or z.numel() == 0:
        return x.clone()
    zs = torch.sort(z, dim=-1, descending=True).values
    cs = zs.cumsum(-1)
    ks = torch.arange(1, n + 1, dtype=z.dtype, device=z.device)
    # The support is the k largest entries, k the largest index with 1 + k * z_(k) > sum_{i<=k} z_(i).
    k = ((1 + ks * zs) > cs).sum(-1, keepdim=True)
    tau = (cs.gather(-1, k - 1) - 1) / k.to(z.dtype)
    return torch.relu(z - tau).transpose(dim, -1).to(x.dtype)


def reference(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    check_args(x, dim)
    return math(x, dim)
