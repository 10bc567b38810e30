"""What the gated activations (`swiglu`, `geglu`) share: two same-shape inputs, their checks,
samples, bad inputs and benchmark layout; each op adds its activation."""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Sharding, bad, on_other_device, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device

# Elementwise: a and b may be sharded on any dim (a colwise gate/up plan shards the last), alike.
SHARDING = Sharding(inputs=("a", "b"), across=lambda args: (), outputs=("a",), aligned=True)


def check_glu_args(op: str, a: torch.Tensor, b: torch.Tensor, in_place: bool) -> None:
    """Fast path: one predicate; the slow path names the argument that is wrong."""
    try:
        if (
            a.dtype in FLOAT_DTYPES
            and b.dtype == a.dtype
            and a.shape == b.shape
            and a.device == b.device
            and isinstance(in_place, bool)
        ):
            return
    except (AttributeError, TypeError):
        pass
    check_floating(op, "a", a)
    check_floating(op, "b", b)
    check_same_device(op, a=a, b=b)
    if a.shape != b.shape:
        raise ValueError(
            f"{op}: a and b must have the same shape; got a.shape={tuple(a.shape)}, b.shape={tuple(b.shape)}"
        )
    if a.dtype != b.dtype:
        raise TypeError(
            f"{op}: a and b must have the same dtype; got a.dtype={str(a.dtype).removeprefix('torch.')}, "
            f"b.dtype={str(b.dtype).removeprefix('torch.')}"
        )
    if not isinstance(in_place, bool):
        raise TypeError(f"{op}: in_place must be a bool; got {type(in_place).__name__}")


def glu_math(activation, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``activation(a) * b``: the activation in float32 (float64 for the oracle), rounded to the
    input dtype before the multiply, as the models' eager code does."""
    compute = a if a.dtype == torch.float64 else a.float()
    return activation(compute).to(a.dtype) * b


def args(device, shape=(4, 16), dtype=torch.float32, strided=False, **options):
    """The gate spread across the activation's bend (|a| up to ~6), the up projection around 0."""
    g = S.gen(0)
    if strided:
        return dict(a=S.strided(shape, g, device, dtype, 2, -0.2), b=S.strided(shape, g, device, dtype), **options)
    return dict(
        a=S.to(device, dtype, S.normal(shape, g, 2, -0.2)), b=S.to(device, dtype, S.normal(shape, g)), **options
    )


def samples():
    # A single element, odd sizes, 3-D input, several programs' worth of a 14336-wide row
    # (LLaMA-3-8B's intermediate size) and an empty batch.
    shapes = ((1,), (5, 3), (2, 7, 33), (3, 4099), (1, 14336), (0, 48))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    yield from S.grid(args, dict(dtype=S.DTYPES), shape=(3, 4099), in_place=True)
    yield from S.grid(args, dict(in_place=(False, True)), shape=(33, 40), strided=True)


SMOKE = (sample(args, shape=(3, 5)), sample(args, shape=(2, 7, 1000)))
ERROR_SAMPLE = sample(args)
ERRORS = (
    bad("mixed_devices", ValueError, r"one device.*a is on .*b is on", b=on_other_device),
    bad(
        "shape",
        ValueError,
        r"a and b must have the same shape; got a.shape=\(4, 16\), b.shape=\(4, 15\)",
        b=lambda b: b[:, :15],
    ),
    bad(
        "dtype",
        TypeError,
        r"a and b must have the same dtype; got a.dtype=float32, b.dtype=float16",
        b=lambda b: b.half(),
    ),
    bad("int_dtype", TypeError, r"a must have dtype float32, bfloat16, float16; got int64", a=lambda a: a.long()),
    bad("float64", TypeError, r"b must have dtype .*got float64", b=lambda b: b.double()),
    bad("in_place", TypeError, r"in_place must be a bool; got str", in_place="yes"),
)
# With in_place the op may write its gradients into a and b (they reach it as copies).
CHECKS = Checks(overwritable=lambda a: ("a", "b") if a["in_place"] else ())


def bench_spec(activation, peers: dict) -> B.BenchSpec:
    return B.BenchSpec(
        group="activations",
        axes=("tokens", "intermediate"),
        layouts={
            "rows": lambda s, dt, dev, gen: dict(
                a=B.normal((s.tokens, s.intermediate), dt, dev, gen),
                b=B.normal((s.tokens, s.intermediate), dt, dev, gen),
            )
        },
        torch_fn=lambda a, b, in_place=False: activation(a) * b,
        traffic=lambda s, e: (3 * s.tokens * s.intermediate * e, 5 * s.tokens * s.intermediate * e),
        describe=lambda s: B.dims(("tokens", s.tokens), ("intermediate", s.intermediate)),
        peers=peers,
    )


def cat_ab(kw: B.Kwargs) -> B.Kwargs:
    """torch_npu's fused gated activations take the two halves as one tensor."""
    ab = torch.cat([kw["a"].detach(), kw["b"].detach()], dim=-1).requires_grad_()
    return {"ab": ab}
