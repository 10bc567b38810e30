"""The `softmax` op: softmax over the last dimension, declared once."""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import check_unary


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension: ``exp(x - max) / sum(exp(x - max))``, in float32.

    Args:
        x: ``(..., n)``, float32, bfloat16 or float16, at least 1-D; any layout (rows are
            read as a contiguous ``(-1, n)`` view, a copy is made if needed).

    Returns:
        ``x``'s shape and dtype. Backward gives ``grad_x = y * (grad_y - sum(grad_y * y, -1))``.
    """
    check_args(x)
    return math(x)


def check_args(x: torch.Tensor) -> None:
    """Raise a clear error for arguments outside the contract. Backends call this first."""
    check_unary("softmax", x)


def math(x: torch.Tensor) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    compute = x if x.dtype == torch.float64 else x.float()
    return torch.softmax(compute, dim=-1).to(x.dtype)


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(4, 16), dtype=torch.float32, strided=False, scale=3.0, masked=False):
    """Logits spread wide enough that rows are peaked; ``masked``: every 7th column -inf."""
    g = S.gen(0)
    x = S.strided(shape, g, device, dtype, scale, 1) if strided else S.to(device, dtype, S.normal(shape, g, scale, 1))
    if masked:
        x = x.clone()
        x[:, ::7] = float("-inf")
    return dict(x=x)


def samples():
    # A single element, odd rows, several programs' worth of short rows, 3-D input, rows wider
    # than any vendor's single tile, an empty batch.
    shapes = ((1,), (5, 1), (3, 5), (2, 7, 33), (130, 64), (4, 1000), (3, 40000), (0, 48))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    yield sample(args, shape=(33, 40), strided=True)
    # Logits far beyond exp's range; masked (-inf) entries get zero.
    yield sample(args, shape=(6, 50), scale=300.0, masked=True)


def _scales(a, upstream):
    # grad_x = y * (dy - sum(dy * y)): the sum cancels; measure against max(y * |dy|).
    return {"grad_x": S.peak(math(a["x"]) * upstream["output"])}


OP = Op(
    softmax,
    since=(1, 2),
    math=math,
    grads=("x",),
    samples=samples,
    smoke=(sample(args, shape=(3, 5)), sample(args, shape=(2, 7, 1000))),
    error_sample=sample(args),
    errors=(
        S.X_INT,
        S.X_FLOAT64,
        S.X_SCALAR,
    ),
    checks=Checks(atol_scales=_scales),
    bench=B.rows(
        "activations",
        lambda s, dt, dev, gen: dict(x=B.normal((s.tokens, s.hidden), dt, dev, gen)),
        lambda x: torch.softmax(x, dim=-1),
        lambda s, e: (2 * s.tokens * s.hidden * e, 3 * s.tokens * s.hidden * e),
        {B.LIGER_KERNEL: B.liger_kernel("liger_softmax", "x")},
    ),
)
