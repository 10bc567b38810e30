"""The `fused_gate_up_swiglu` op, declared once: SwiGLU over the output of one fused gate-up
projection (Phi-3's ``gate_up_proj``, Megatron's ``linear_fc1``), liger-kernel's
``LigerFusedGateUpSiLUMulFunction``."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, sample
from liger_core.ops import _glu
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_floating

OP_NAME = "fused_gate_up_swiglu"


def fused_gate_up_swiglu(gate_up: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """SwiGLU of a fused gate-up activation: ``silu(gate) * up`` where ``gate, up =
    gate_up.chunk(2, dim=-1)``.

    The last dim holds the two halves side by side, the gate first: ``gate = gate_up[..., :I]``,
    ``up = gate_up[..., I:]`` with ``I = gate_up.shape[-1] // 2`` (the layout of transformers'
    Phi-3 MLP and of liger-kernel's fused function; not interleaved). As in the models' eager
    code, ``silu(gate)`` is computed in float32 and rounded to the input dtype before the multiply.

    Args:
        gate_up: ``(..., 2 * I)``, float32, bfloat16 or float16, last dim even and non-zero. Any
            layout (a copy is made where the last dim is not unit-stride).
        in_place: allow the backward pass to write ``grad_gate_up`` into the memory of
            ``gate_up`` (saves one activation-sized buffer). Only the owner of the buffer may set
            it (an MLP for the projection output it created): after backward ``gate_up`` holds the
            gradient, and a second backward through the same graph is wrong. Without it,
            ``gate_up`` is never modified.

    Returns:
        ``(..., I)`` in ``gate_up``'s dtype. Backward gives ``grad_gate_up`` in one ``(..., 2 * I)``
        tensor: ``grad_out * silu'(gate) * up`` in the gate half, ``grad_out * silu(gate)`` (silu
        rounded as in forward) in the up half.
    """
    check_args(gate_up, in_place)
    return math(gate_up, in_place)


def check_args(gate_up: torch.Tensor, in_place: bool) -> None:
    """Raise a clear error for arguments outside the contract. Backends call this first."""
    try:
        if (
            gate_up.dtype in FLOAT_DTYPES
            and gate_up.ndim >= 1
            and gate_up.shape[-1] % 2 == 0
            and gate_up.shape[-1] > 0
            and isinstance(in_place, bool)
        ):
            return
    except (AttributeError, TypeError):
        pass
    check_floating("fused_gate_up_swiglu", "gate_up", gate_up)
    if gate_up.ndim == 0 or gate_up.shape[-1] == 0 or gate_up.shape[-1] % 2:
        raise ValueError(
            f"{OP_NAME}: gate_up must have a non-zero even last dim (the gate and up halves); "
            f"got gate_up.shape={tuple(gate_up.shape)}"
        )
    if not isinstance(in_place, bool):
        raise TypeError(f"{OP_NAME}: in_place must be a bool; got {type(in_place).__name__}")


def math(gate_up: torch.Tensor, in_place: bool) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    gate, up = gate_up.chunk(2, dim=-1)
    return _glu.glu_math(F.silu, gate, up)


def args(device, shape=(4, 16), dtype=torch.float32, padded=False, **options):
    """The gate half spread across silu's bend (|gate| up to ~6), the up half around 0;
    ``padded``: rows of a wider stored matrix (row stride 2 * I + 5), a view."""
    g = S.gen(0)
    *lead, width = shape
    half = width // 2
    gate = S.normal((*lead, half), g, 2, -0.2)
    up = S.normal((*lead, half), g)
    gate_up = torch.cat([gate, up], dim=-1)
    if padded:
        stored = torch.cat([gate_up, S.normal((*lead, 5), g)], dim=-1)
        return dict(gate_up=S.to(device, dtype, stored)[..., :width], **options)
    return dict(gate_up=S.to(device, dtype, gate_up), **options)


def samples():
    # One gate/up pair, odd halves, 3-D input, halves wider than one block of any vendor (4099),
    # LLaMA-3-8B's intermediate size (14336) and an empty batch.
    shapes = ((2,), (5, 6), (2, 7, 66), (3, 8198), (1, 28672), (0, 96))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    yield from S.grid(args, dict(dtype=S.DTYPES), shape=(3, 8198), in_place=True)
    yield from S.grid(args, dict(in_place=(False, True)), shape=(33, 80), padded=True)


def _torch_fused_gate_up_swiglu(gate_up, in_place=False):
    """The models' eager code (transformers' Phi-3 MLP)."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def _liger_kernel_peer() -> B.Peer:
    """liger-kernel 0.8.5's ``LigerFusedGateUpSiLUMulFunction`` (not in its functional API)."""

    def load():
        from liger_kernel.ops.swiglu import LigerFusedGateUpSiLUMulFunction

        return lambda gate_up, in_place=False: LigerFusedGateUpSiLUMulFunction.apply(gate_up, in_place)

    return B.Peer(load)


OP = Op(
    fused_gate_up_swiglu,
    since=(1, 6),
    math=math,
    grads=("gate_up",),
    samples=samples,
    smoke=(sample(args, shape=(3, 10)), sample(args, shape=(2, 7, 2000))),
    error_sample=sample(args),
    errors=(
        bad(
            "int_dtype",
            TypeError,
            r"gate_up must have dtype float32, bfloat16, float16; got int64",
            gate_up=lambda t: t.long(),
        ),
        bad("float64", TypeError, r"gate_up must have dtype .*got float64", gate_up=lambda t: t.double()),
        bad(
            "odd_width",
            ValueError,
            r"gate_up must have a non-zero even last dim .*got gate_up.shape=\(4, 15\)",
            gate_up=lambda t: t[:, :15],
        ),
        bad(
            "scalar",
            ValueError,
            r"gate_up must have a non-zero even last dim .*got gate_up.shape=\(\)",
            gate_up=lambda t: t[0, 0],
        ),
        bad("in_place", TypeError, r"in_place must be a bool; got str", in_place="yes"),
    ),
    # With in_place the op may write its gradient into gate_up (it reaches the op as a copy).
    checks=Checks(overwritable=lambda a: ("gate_up",) if a["in_place"] else ()),
    # liger-kernel's benchmark shapes for SwiGLU: LLaMA's (tokens, intermediate), here as the one
    # (tokens, 2 * intermediate) projection output; `--sweep tokens=...` as for swiglu.
    bench=B.BenchSpec(
        group="activations",
        axes=("tokens", "intermediate"),
        layouts={"rows": lambda s, dt, dev, gen: dict(gate_up=B.normal((s.tokens, 2 * s.intermediate), dt, dev, gen))},
        torch_fn=_torch_fused_gate_up_swiglu,
        # Forward reads 2I and writes I per token; backward reads I + 2I and writes 2I.
        traffic=lambda s, e: (3 * s.tokens * s.intermediate * e, 5 * s.tokens * s.intermediate * e),
        describe=lambda s: B.dims(("tokens", s.tokens), ("intermediate", s.intermediate)),
        peers={B.LIGER_KERNEL: _liger_kernel_peer()},
    ),
)
