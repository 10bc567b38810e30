"""What the op declarations build their conformance samples from: seeded CPU draws moved to the
test device, the dtypes and shapes every op family is checked at, labels with ignored rows."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator

import torch

from liger_core.op import BadInput, Sample, bad, on_other_device, sample, set_item

# Every dtype a kernel must serve, and the two the option grids run in.
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
OPTION_DTYPES = (torch.float32, torch.bfloat16)

# Rows of a last-dimension op: odd sizes, one column, several programs' worth of short rows,
# 3-D input, rows wider than any vendor's single tile, an empty batch.
ROW_SHAPES = ((1, 1), (3, 5), (2, 7, 33), (130, 64), (4, 1000), (1, 16500), (0, 48))


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def normal(shape, g: torch.Generator, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    """``scale * N(0, 1) + shift`` in float32 on the CPU (cast and move it afterwards)."""
    return torch.randn(shape, generator=g) * scale + shift


def to(device, dtype, t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype)


def peak(t: torch.Tensor) -> float:
    """The largest magnitude in ``t`` (1.0 for an empty tensor): an atol scale."""
    return float(t.abs().max()) if t.numel() else 1.0


def labels(n: int, vocab: int, seed: int, ignore_index: int = -100, ignored: float | str = 0.25) -> torch.Tensor:
    """``n`` class indices in ``[0, vocab)``; a fraction ``ignored`` (or ``"all"``) set to ``ignore_index``."""
    g = gen(seed + 101)
    t = torch.randint(0, vocab, (n,), generator=g)
    if ignored == "all":
        return torch.full((n,), ignore_index, dtype=torch.int64)
    drop = torch.rand(n, generator=g) < float(ignored)
    if n >= 2 and ignored:
        drop[1] = True  # at least one ignored row whenever some are wanted
    return torch.where(drop, torch.full_like(t, ignore_index), t)


def strided(shape: tuple[int, int], g: torch.Generator, device, dtype, scale=1.0, shift=0.0) -> torch.Tensor:
    """A ``shape`` (rows, cols) view whose rows are columns of a wider stored matrix: strides
    ``(1, rows + 33)``, not contiguous, the layout a transposed projection output has."""
    rows, cols = shape
    stored = normal((cols, rows + 33), g, scale, shift).to(device=device, dtype=dtype)
    return stored.t()[:rows]


def rows_input(shape, g: torch.Generator, device, dtype, scale=1.0, shift=0.0, transposed=False) -> torch.Tensor:
    """``scale * N(0, 1) + shift`` of ``shape`` as ``dtype`` on ``device``: contiguous, or with
    ``transposed`` the (rows, cols) column view of a wider matrix (see `strided`)."""
    if transposed:
        return strided(shape, g, device, dtype, scale, shift)
    return to(device, dtype, normal(shape, g, scale, shift))


def row_smoke(build: Callable[..., dict]) -> tuple[Sample, Sample]:
    """``liger check``'s samples of a last-dimension op: odd (3, 5) rows and a 3-D input of rows
    wider than a warp's tile."""
    return sample(build, shape=(3, 5)), sample(build, shape=(2, 7, 1000))


def vocab_smoke(build: Callable[..., dict]) -> tuple[Sample, Sample]:
    """``liger check``'s samples of a loss over (tokens, vocab) rows: a tiny one and rows wider
    than a warp's tile."""
    return sample(build, shape=(3, 5)), sample(build, shape=(6, 3000))


def grid(build: Callable[..., dict], vary: dict[str, Iterable], grad_scalar: float = 1.0, **fixed) -> Iterator[Sample]:
    """A sample for every combination of the ``vary`` values, each with the ``fixed`` parameters."""
    names = list(vary)
    for values in itertools.product(*vary.values()):
        yield sample(build, grad_scalar=grad_scalar, **fixed, **dict(zip(names, values)))


# Bad inputs many ops share (their valid arguments: an ``x`` of (4, 16) and per-feature parameters).
X_INT = bad("int_dtype", TypeError, r"x must have dtype float32, bfloat16, float16; got int64", x=lambda x: x.long())
X_FLOAT64 = bad("float64", TypeError, r"x must have dtype .*got float64", x=lambda x: x.double())
X_SCALAR = bad("scalar", ValueError, r"at least 1 dimension", x=lambda x: x[0, 0])
NEGATIVE_EPS = bad("negative_eps", ValueError, r"eps must be a number >= 0; got -1", eps=-1)
# The class-index ``target``'s errors on a 4-row, 20-class sample with no ignored row
# (cross_entropy's and vocab_parallel_cross_entropy's).
CLASS_TARGET_ERRORS = (
    bad(
        "target_range",
        ValueError,
        r"target must be in \[0, 20\) or equal ignore_index=-100; 1 are not \(first: 20\)",
        target=set_item(2, 20),
    ),
    bad("negative_target", ValueError, r"target must be in \[0, 20\).*first: -3", target=set_item(0, -3)),
    bad(
        "target_shape",
        ValueError,
        r"target must have shape \(tokens,\) = \(4,\); got \(3,\)",
        target=lambda t: t[:3],
    ),
    bad("target_float", TypeError, r"target must have an integer dtype.*got float32", target=lambda t: t.float()),
)


def elsewhere(param: str, name: str = "mixed_devices") -> BadInput:
    """``param`` on another device than ``x``."""
    return bad(name, ValueError, rf"one device.*x is on .*{param} is on", **{param: on_other_device})


def too_short(param: str, want: str, n: int = 15) -> BadInput:
    """``param`` cut to ``n`` elements: the error names the expected shape ``want`` and the actual one."""
    return bad(f"{param}_shape", ValueError, rf"{param} must have shape {want}.*\({n},\)", **{param: lambda t: t[:n]})
