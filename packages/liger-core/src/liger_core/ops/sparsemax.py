"""The `sparsemax` op: the Euclidean projection onto the probability simplex, declared once."""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_rows


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
    check_args(x, dim)
    return math(x, dim)


def check_args(x: torch.Tensor, dim: int) -> None:
    """Raise a clear error for arguments outside the contract. Backends call this first."""
    try:
        if x.dtype in FLOAT_DTYPES and x.ndim > 0 and type(dim) is int and -x.ndim <= dim < x.ndim:
            return
    except (AttributeError, TypeError):
        pass
    check_rows("sparsemax", x)
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"sparsemax: dim must be an int; got {type(dim).__name__}")
    if not -x.ndim <= dim < x.ndim:
        raise IndexError(f"sparsemax: dim must be in [{-x.ndim}, {x.ndim - 1}] for x of {x.ndim} dimensions; got {dim}")


def math(x: torch.Tensor, dim: int) -> torch.Tensor:
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


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(4, 16), dtype=torch.float32, strided=False, **options):
    """Rows of random spread, so that supports range from one entry to many."""
    g = S.gen(0)
    rows = shape[:-1] + (1,)
    scale = torch.rand(rows, generator=g) * 2 + 0.05
    if strided:
        x = S.strided(shape, g, device, dtype)
    else:
        x = S.to(device, dtype, S.normal(shape, g) * scale)
    return dict(x=x, **options)


def ties_args(device):
    """Equal entries share the support; one dominant entry takes everything."""
    x = torch.tensor([[1.0, 1.0, 1.0, -1.0], [0.25, 0.25, 0.25, 0.25], [5.0, 0.0, 0.5, 1.0]])
    return dict(x=x.to(device))


def samples():
    # A single element, odd rows, several programs' worth of short rows, 3-D input, rows wider
    # than any vendor's single tile, an empty batch.
    shapes = ((1,), (5, 1), (3, 5), (2, 7, 33), (130, 64), (4, 1000), (2, 20000), (0, 48))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    yield from S.grid(args, dict(dim=(0, 1, -2, 2, -3)), shape=(5, 6, 7))
    yield sample(args, shape=(33, 40), strided=True)
    yield sample(ties_args)


def _scales(a, upstream):
    return {"grad_x": S.peak(upstream["output"])}


def _torch_sparsemax(x, dim=-1):
    z = x.transpose(dim, -1).float()
    z_sorted, _ = torch.sort(z, dim=-1, descending=True)
    k = torch.arange(1, z.shape[-1] + 1, device=z.device, dtype=z.dtype)
    cumsum = z_sorted.cumsum(-1)
    support = (1 + k * z_sorted) > cumsum
    k_z = support.sum(-1, keepdim=True)
    tau = (cumsum.gather(-1, k_z - 1) - 1) / k_z
    return torch.clamp(z - tau, min=0).to(x.dtype).transpose(dim, -1)


OP = Op(
    sparsemax,
    since=(1, 2),
    math=math,
    grads=("x",),
    samples=samples,
    smoke=S.row_smoke(args),
    error_sample=sample(args),
    errors=(
        S.X_INT,
        S.X_SCALAR,
        bad("dim_range", IndexError, r"dim must be in \[-2, 1\] for x of 2 dimensions; got 2", dim=2),
        bad("dim_type", TypeError, r"dim must be an int; got float", dim=1.0),
    ),
    checks=Checks(atol_scales=_scales),
    bench=B.row_activation(_torch_sparsemax, {B.LIGER_KERNEL: B.liger_kernel("liger_sparsemax", "x", "dim")}),
)
