"""The `relu_squared` op: the squared-ReLU activation of Nemotron's MLP, declared once."""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Op, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import check_unary


def relu_squared(x: torch.Tensor) -> torch.Tensor:
    """Squared ReLU, ``relu(x) ** 2`` elementwise (Nemotron's ``relu2`` activation,
    ``down_proj(relu(up_proj(x)) ** 2)``).

    Computed in float32 and rounded to ``x.dtype`` once, which equals transformers'
    ``torch.square(relu(x))`` in that dtype.

    Args:
        x: any shape of at least one dimension, float32, bfloat16 or float16, any layout.

    Returns:
        ``y`` with ``x``'s shape and dtype. Backward gives ``grad_x = 2 * relu(x) * grad_y``
        (``x.dtype``); ``x`` is never modified.
    """
    check_args(x)
    return math(x)


def check_args(x: torch.Tensor) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    check_unary("relu_squared", x)


def math(x: torch.Tensor) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    compute = x if x.dtype == torch.float64 else x.float()
    return torch.relu(compute).square().to(x.dtype)


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(4, 16), dtype=torch.float32, strided=False):
    """x around 0, half of it below zero (where the gradient is 0)."""
    g = S.gen(0)
    x = S.strided(shape, g, device, dtype, 2) if strided else S.to(device, dtype, S.normal(shape, g, 2))
    return dict(x=x)


def samples():
    # A single element, odd sizes, 3-D input, several programs' worth of a row wider than any
    # vendor's single block (Nemotron-4-15B's intermediate size 24576), an empty batch.
    shapes = ((1,), (5, 3), (2, 7, 33), (3, 4099), (1, 24576), (0, 48))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    yield sample(args, shape=(33, 40), strided=True)


OP = Op(
    relu_squared,
    since=(1, 4),
    math=math,
    grads=("x",),
    samples=samples,
    smoke=(sample(args, shape=(3, 5)), sample(args, shape=(2, 7, 1000))),
    error_sample=sample(args),
    errors=(S.X_INT, S.X_FLOAT64, S.X_SCALAR),
    bench=B.BenchSpec(
        group="activations",
        axes=("tokens", "intermediate"),
        layouts={"rows": lambda s, dt, dev, gen: dict(x=B.normal((s.tokens, s.intermediate), dt, dev, gen))},
        # transformers' ReLUSquaredActivation.
        torch_fn=lambda x: torch.square(torch.relu(x)),
        # forward reads x and writes y; backward reads x and the incoming gradient, writes grad_x.
        traffic=lambda s, e: (2 * s.tokens * s.intermediate * e, 3 * s.tokens * s.intermediate * e),
        describe=lambda s: B.dims(("tokens", s.tokens), ("intermediate", s.intermediate)),
        peers={B.LIGER_KERNEL: B.liger_kernel("liger_relu_squared", "x")},
    ),
)
