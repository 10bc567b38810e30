"""The `tiled_mlp` op, declared once: a gated MLP (LLaMA's SwiGLU, Gemma's GEGLU) run over tiles
of tokens, its forward recomputed tile by tile in the backward, so a long sequence trains with
the activation memory of one tile (DeepSpeed's TiledMLP, liger-kernel's ``LigerTiledMLPFunction``).

The orchestration is vendor-neutral and lives here (`tiled_forward`, `tiled_backward`): the three
projections are torch matmuls; the gated activation is the backend's own kernel pair, which a
vendor module hands in as a `GatedKernels` (its glu module's forward and in-place backward).
"""

from __future__ import annotations

import math as _math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, on_other_device, sample
from liger_core.ops import _glu
from liger_core.ops import _losses as L
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_dtype
from liger_core.ops.geglu import gelu_tanh

OP_NAME = "tiled_mlp"
# The gated activations: ``activation`` name -> its float formula (the oracle's).
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"silu": F.silu, "gelu_tanh": gelu_tanh}


def tiled_mlp(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
    activation: str = "silu",
    num_shards: int | None = None,
) -> torch.Tensor:
    """The gated MLP ``down(act(gate(x)) * up(x))`` over tiles of tokens, recomputed in backward.

    With ``gate(x) = x @ gate_weight.T``, ``up(x) = x @ up_weight.T`` and ``down(h) = h @
    down_weight.T`` (no biases: LLaMA's, Mistral's, Qwen's and Gemma's MLPs), ``act`` is
    ``silu`` (SwiGLU) or ``gelu_tanh`` (GEGLU, the tanh approximation), computed in float32 and
    rounded to the input dtype before the multiply, as `swiglu` and `geglu` are. The result is
    the untiled MLP's (transformers' ``LlamaMLP``); only memory and time depend on the tiles.

    The tokens (every dim of ``x`` but the last, flattened) are cut into ``num_shards`` tiles of
    consecutive rows. Forward runs the MLP tile by tile and keeps the last tile's gate and up
    projections (when a gradient is wanted); backward starts from that tile, recomputes every
    other tile's projections and activation, and accumulates the weight gradients, so the
    intermediate activations alive at any time are one or two tiles' (``rows / num_shards`` x
    ``intermediate``), not the sequence's. Keeping the last tile is torch's
    ``checkpoint_sequential`` choice for its last segment: backward needs it first, so its
    recompute would buy no memory (two of the untiled MLP's nine GEMMs are recomputed, less
    the last tile's share).

    Args:
        x: ``(..., hidden)``, float32, bfloat16 or float16 (the weights' dtype and device).
        gate_weight: ``(intermediate, hidden)``.
        up_weight: ``(intermediate, hidden)``.
        down_weight: ``(hidden, intermediate)``.
        activation: ``"silu"`` or ``"gelu_tanh"``.
        num_shards: tiles to cut the tokens into, at least 1 (more than the tokens acts as one
            tile per token). None: ``ceil(tokens / hidden)``, liger-kernel's default (tiles of
            about ``hidden`` tokens).

    Returns:
        ``(..., hidden)`` in ``x``'s dtype. Backward gives ``grad_x`` and the three weights'
        gradients; a weight gradient is summed over the tiles in the weight's dtype (one
        rounding per tile, as autograd's accumulation into ``.grad`` does for liger-kernel's and
        DeepSpeed's tiled MLPs).
    """
    check_args(x, gate_weight, up_weight, down_weight, activation, num_shards)
    return math(x, gate_weight, up_weight, down_weight, activation, num_shards)


def check_args(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
    activation: str,
    num_shards: int | None,
) -> None:
    """Raise a clear error for arguments outside the contract. Backends call this first."""
    try:
        if (
            x.dtype in FLOAT_DTYPES
            and x.ndim >= 1
            and gate_weight.dtype == x.dtype
            and up_weight.dtype == x.dtype
            and down_weight.dtype == x.dtype
            and gate_weight.ndim == 2
            and gate_weight.shape[1] == x.shape[-1]
            and up_weight.shape == gate_weight.shape
            and down_weight.shape == (gate_weight.shape[1], gate_weight.shape[0])
            and x.device == gate_weight.device == up_weight.device == down_weight.device
            and activation in ACTIVATIONS
            and (num_shards is None or (type(num_shards) is int and num_shards >= 1))
        ):
            return
    except (AttributeError, TypeError):
        pass
    op = OP_NAME
    for name, t in (("x", x), ("gate_weight", gate_weight), ("up_weight", up_weight), ("down_weight", down_weight)):
        check_floating("tiled_mlp", name, t)
    for name, t in (("gate_weight", gate_weight), ("up_weight", up_weight), ("down_weight", down_weight)):
        if t.device != x.device:
            raise ValueError(f"{op}: all tensors must be on one device; x is on {x.device} but {name} is on {t.device}")
        check_same_dtype(op, name, t, "x", x)
    if x.ndim == 0:
        raise ValueError(f"{op}: x must have a hidden dim (..., hidden); got a scalar")
    if gate_weight.ndim != 2 or gate_weight.shape[1] != x.shape[-1]:
        raise ValueError(
            f"{op}: gate_weight must be (intermediate, hidden={x.shape[-1]}); got {tuple(gate_weight.shape)}"
        )
    if up_weight.shape != gate_weight.shape:
        raise ValueError(
            f"{op}: up_weight must have gate_weight's shape {tuple(gate_weight.shape)}; got {tuple(up_weight.shape)}"
        )
    want = (gate_weight.shape[1], gate_weight.shape[0])
    if tuple(down_weight.shape) != want:
        raise ValueError(f"{op}: down_weight must be (hidden, intermediate)={want}; got {tuple(down_weight.shape)}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"{op}: activation must be one of {', '.join(ACTIVATIONS)}; got {activation!r}")
    if num_shards is not None and type(num_shards) is not int:
        raise TypeError(f"{op}: num_shards must be None or an int; got {type(num_shards).__name__}")
    if num_shards is not None and num_shards < 1:
        raise ValueError(f"{op}: num_shards must be at least 1; got {num_shards}")


def math(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
    activation: str,
    num_shards: int | None,
) -> torch.Tensor:
    """The formula, untiled (tiling changes no value), differentiable by autograd, for any
    floating dtype (float64 for the oracle)."""
    hidden = _glu.glu_math(ACTIVATIONS[activation], F.linear(x, gate_weight), F.linear(x, up_weight))
    return F.linear(hidden, down_weight)


# -- orchestration: what every backend shares ------------------------------------------------------


@dataclass(frozen=True)
class GatedKernels:
    """A backend's gated activation on contiguous ``(rows, intermediate)`` tensors of one dtype:
    ``forward(gate, up) -> act(gate) * up``; ``backward(grad_out, gate, up)`` writes
    ``grad_gate`` and ``grad_up`` over ``gate`` and ``up`` (buffers the orchestration owns)."""

    forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    backward: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]


def tile_rows(n_rows: int, hidden: int, num_shards: int | None) -> int:
    """Rows per tile: ``num_shards`` tiles (None: ``ceil(rows / hidden)``), at least one row."""
    shards = _math.ceil(n_rows / max(hidden, 1)) if num_shards is None else num_shards
    shards = max(1, min(shards, n_rows))
    return max(1, _math.ceil(n_rows / shards))


def _tiles(n_rows: int, rows_per_tile: int):
    return ((start, min(start + rows_per_tile, n_rows)) for start in range(0, n_rows, rows_per_tile))


def tiled_forward(
    x2d: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
    rows_per_tile: int,
    kernels: GatedKernels,
    keep_last: bool = False,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
    """The MLP of contiguous ``(rows, hidden)`` ``x2d``, tile by tile, and the last tile's
    ``(gate, up)`` projections when ``keep_last`` (else None); nothing of another tile survives."""
    out = torch.empty_like(x2d)
    kept = None
    for start, end in _tiles(x2d.shape[0], rows_per_tile):
        x_tile = x2d[start:end]
        gate, up = x_tile @ gate_weight.t(), x_tile @ up_weight.t()
        hidden = kernels.forward(gate, up)
        if keep_last and end == x2d.shape[0]:
            kept = (gate, up)
        del gate, up  # before the down GEMM: a tile's working set is its hidden and output
        torch.mm(hidden, down_weight.t(), out=out[start:end])
        del hidden
    return out, kept


def _accumulate(grad_w: torch.Tensor, a_t: torch.Tensor, b: torch.Tensor, first: bool) -> None:
    """``grad_w (+)= a_t @ b`` in grad_w's dtype (the GEMM accumulates in fp32, rounds once)."""
    if first:
        torch.mm(a_t, b, out=grad_w)
    else:
        grad_w.addmm_(a_t, b)


def tiled_backward(
    grad_out: torch.Tensor,
    x2d: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
    rows_per_tile: int,
    kernels: GatedKernels,
    needs: tuple[bool, bool, bool, bool],
    kept: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor | None, ...]:
    """``(grad_x2d, grad_gate_weight, grad_up_weight, grad_down_weight)`` of the MLP at contiguous
    ``x2d`` for the contiguous ``(rows, hidden)`` ``grad_out``, recomputing each tile's forward
    but the last's when ``kept`` holds its ``(gate, up)`` from `tiled_forward` (read, not
    written: a retained graph backs up through them again); ``needs`` says which are wanted
    (None for the others)."""
    need_x, need_gate, need_up, need_down = needs
    grad_x = torch.empty_like(x2d) if need_x else None
    grad_gate = torch.empty_like(gate_weight) if need_gate else None
    grad_up = torch.empty_like(up_weight) if need_up else None
    grad_down = torch.empty_like(down_weight) if need_down else None
    if x2d.shape[0] == 0:
        # No tokens: the weights' gradients are sums over nothing.
        for g in (grad_gate, grad_up, grad_down):
            if g is not None:
                g.zero_()
        return grad_x, grad_gate, grad_up, grad_down
    tiles = list(_tiles(x2d.shape[0], rows_per_tile))
    if kept is not None:
        tiles = tiles[-1:] + tiles[:-1]  # the kept tile first: its projections are at hand
    for i, (start, end) in enumerate(tiles):
        x_tile, dy_tile = x2d[start:end], grad_out[start:end]
        if kept is not None:
            # Copies: the activation's backward writes its gradients over them. The kept pair
            # stays saved until backward ends, so this costs no more than a recompute's buffers.
            gate, up = (t.clone() for t in kept)
            kept = None
        else:
            gate, up = x_tile @ gate_weight.t(), x_tile @ up_weight.t()
        if need_down:
            _accumulate(grad_down, dy_tile.t(), kernels.forward(gate, up), i == 0)
        grad_hidden = dy_tile @ down_weight
        kernels.backward(grad_hidden, gate, up)  # gate, up now hold their gradients
        del grad_hidden
        if need_gate:
            _accumulate(grad_gate, gate.t(), x_tile, i == 0)
        if need_up:
            _accumulate(grad_up, up.t(), x_tile, i == 0)
        if need_x:
            dx_tile = grad_x[start:end]
            torch.mm(gate, gate_weight, out=dx_tile)
            dx_tile.addmm_(up, up_weight)
    return grad_x, grad_gate, grad_up, grad_down


class TiledMLPFunction(torch.autograd.Function):
    """The autograd of `tiled_mlp` over a backend's `GatedKernels`: the vendors' Function is built
    from it by `liger_core.drivers.tiled_mlp`, which checks the arguments and calls `shared_forward`
    with the vendor's kernels.
    Saved for backward: ``x``, the weights and the last tile's gate and up projections (through
    ``save_for_backward``, so activation checkpointing and offloading hooks see them)."""

    @staticmethod
    def shared_forward(ctx, x, gate_weight, up_weight, down_weight, num_shards, kernels: GatedKernels):
        x2d = x.reshape(-1, x.shape[-1]).contiguous()
        weights = [w.contiguous() for w in (gate_weight, up_weight, down_weight)]
        rows_per_tile = tile_rows(x2d.shape[0], x2d.shape[1], num_shards)
        keep_last = any(ctx.needs_input_grad[:4])
        out, kept = tiled_forward(x2d, *weights, rows_per_tile, kernels, keep_last)
        ctx.save_for_backward(x2d, *weights, *(kept or (None, None)))
        ctx.rows_per_tile, ctx.kernels, ctx.shape = rows_per_tile, kernels, x.shape
        return out.view(x.shape)

    @staticmethod
    def backward(ctx, grad_out):
        x2d, gate_weight, up_weight, down_weight, kept_gate, kept_up = ctx.saved_tensors
        kept = None if kept_gate is None else (kept_gate, kept_up)
        dy = grad_out.reshape(x2d.shape).contiguous()
        needs = tuple(ctx.needs_input_grad[:4])
        grad_x, grad_gate, grad_up, grad_down = tiled_backward(
            dy, x2d, gate_weight, up_weight, down_weight, ctx.rows_per_tile, ctx.kernels, needs, kept
        )
        grad_x = None if grad_x is None else grad_x.view(ctx.shape)
        return grad_x, grad_gate, grad_up, grad_down, None, None


# -- samples -------------------------------------------------------------------------------------


def args(device, shape=(6, 16), intermediate=24, dtype=torch.float32, **options):
    """Unit-variance ``x``; weights scaled as a trained layer's (``1 / sqrt(fan_in)``), so every
    activation is O(1) and the gate crosses the activation's bend."""
    g = S.gen(0)
    hidden = shape[-1]
    x = S.normal(shape, g)
    gate_weight = S.normal((intermediate, hidden), g, 2 / _math.sqrt(hidden))
    up_weight = S.normal((intermediate, hidden), g, 1 / _math.sqrt(hidden))
    down_weight = S.normal((hidden, intermediate), g, 1 / _math.sqrt(intermediate))
    return dict(
        x=S.to(device, dtype, x),
        gate_weight=S.to(device, dtype, gate_weight),
        up_weight=S.to(device, dtype, up_weight),
        down_weight=S.to(device, dtype, down_weight),
        **options,
    )


def samples():
    # One token; odd sizes cut into uneven tiles; the default tile count (rows > hidden); more
    # tiles than tokens; a 3-D batch; an intermediate wider than one activation block; no tokens.
    yield from S.grid(args, dict(dtype=S.DTYPES, activation=tuple(ACTIVATIONS)), shape=(7, 16), num_shards=3)
    yield from S.grid(args, dict(dtype=S.DTYPES), shape=(1, 8), intermediate=5)
    yield from S.grid(args, dict(num_shards=(None, 1, 4, 100)), shape=(37, 12), intermediate=20)
    yield from S.grid(args, dict(activation=tuple(ACTIVATIONS)), shape=(2, 9, 16), intermediate=33, num_shards=5)
    yield sample(args, shape=(5, 8), intermediate=4099, num_shards=2)
    yield from S.grid(args, dict(dtype=S.OPTION_DTYPES), shape=(0, 16), num_shards=2)
    # A frozen trunk: the input needs no gradient (the first MLP of a LoRA-tuned model's embeddings).
    yield sample(args, shape=(7, 16), num_shards=3, frozen=("x",))


def _scales(a, upstream):
    """Every output and gradient of the MLP is a GEMM whose terms cancel: its absolute tolerance
    is set by the size of the terms before they cancel (`_losses.grad_scale_through`), which in a
    half dtype is what each rounding of a term is relative to."""
    x = a["x"].reshape(-1, a["x"].shape[-1])
    gate_weight, up_weight, down_weight = a["gate_weight"], a["up_weight"], a["down_weight"]
    gate = (x @ gate_weight.t()).requires_grad_()
    up = (x @ up_weight.t()).requires_grad_()
    hidden = ACTIVATIONS[a["activation"]](gate) * up
    scales = {"output": L.grad_scale_through(hidden.detach(), down_weight.t())}
    grad_out = upstream.get("output")
    if grad_out is None or x.numel() == 0:
        return scales
    grad_out = grad_out.reshape(-1, grad_out.shape[-1])
    grad_gate, grad_up = torch.autograd.grad(hidden, (gate, up), grad_out @ down_weight)
    scales["grad_down_weight"] = L.grad_scale_through(grad_out.t(), hidden.detach())
    scales["grad_gate_weight"] = L.grad_scale_through(grad_gate.t(), x)
    scales["grad_up_weight"] = L.grad_scale_through(grad_up.t(), x)
    grad_x_terms = grad_gate.abs() @ gate_weight.abs() + grad_up.abs() @ up_weight.abs()
    scales["grad_x"] = float(grad_x_terms.max())
    return scales


# -- benchmark --------------------------------------------------------------------------------------


def _torch_mlp(x, gate_weight, up_weight, down_weight, activation="silu", num_shards=None):
    """transformers' LlamaMLP (untiled): what torch eager and torch.compile run."""
    act = ACTIVATIONS[activation]
    return F.linear(act(F.linear(x, gate_weight)) * F.linear(x, up_weight), down_weight)


def _liger_kernel_peer() -> B.Peer:
    """liger-kernel 0.8.5's ``apply_tiled_mlp`` over its SiLU/GELU-mul Functions, as its
    ``LigerTiledSwiGLUMLP`` / ``LigerTiledGEGLUMLP`` call it (weights rather than a module)."""

    def load():
        from liger_kernel.ops import LigerGELUMulFunction, LigerSiLUMulFunction
        from liger_kernel.ops.tiled_mlp import apply_tiled_mlp

        glu = {"silu": LigerSiLUMulFunction, "gelu_tanh": LigerGELUMulFunction}

        def call(x, gate_weight, up_weight, down_weight, activation="silu", num_shards=None):
            def mlp(_module, x_tile):
                return F.linear(
                    glu[activation].apply(F.linear(x_tile, gate_weight), F.linear(x_tile, up_weight)), down_weight
                )

            return apply_tiled_mlp(mlp, None, x, num_shards, [gate_weight, up_weight, down_weight])

        return call

    return B.Peer(load)


def _bench_args(s, dt, dev, gen):
    """LLaMA's MLP at ``s``: ``(batch, seq, hidden)`` hidden states and the three projections."""
    x = B.normal((s.batch, s.seq, s.hidden), dt, dev, gen)
    return dict(
        x=x,
        gate_weight=B.normal((s.intermediate, s.hidden), dt, dev, gen, scale=1 / _math.sqrt(s.hidden)),
        up_weight=B.normal((s.intermediate, s.hidden), dt, dev, gen, scale=1 / _math.sqrt(s.hidden)),
        down_weight=B.normal((s.hidden, s.intermediate), dt, dev, gen, scale=1 / _math.sqrt(s.intermediate)),
    )


def _flops(s) -> tuple[int, int]:
    """Three (tokens x hidden x intermediate) GEMMs forward; backward runs six (two per weight:
    its gradient and the input's) and recomputes two (gate, up) over every tile but the kept
    last one (the default tiles: the bench passes no ``num_shards``)."""
    rows = s.batch * s.seq
    per_row = 2 * s.hidden * s.intermediate
    tiles = list(_tiles(rows, tile_rows(rows, s.hidden, None)))
    recomputed = tiles[-1][0] if tiles else 0  # the rows before the last tile
    return 3 * rows * per_row, (6 * rows + 2 * recomputed) * per_row


OP = Op(
    tiled_mlp,
    since=(1, 6),
    math=math,
    grads=("x", "gate_weight", "up_weight", "down_weight"),
    samples=samples,
    smoke=(sample(args, shape=(9, 16), num_shards=2), sample(args, shape=(2, 40, 48), intermediate=80)),
    error_sample=sample(args),
    errors=(
        bad("int_dtype", TypeError, r"x must have dtype float32, bfloat16, float16; got int64", x=lambda t: t.long()),
        bad(
            "weight_dtype",
            TypeError,
            r"up_weight must have x's dtype float32; got float16",
            up_weight=lambda w: w.half(),
        ),
        bad(
            "mixed_devices",
            ValueError,
            r"one device; x is on .* but down_weight is on ",
            down_weight=on_other_device,
        ),
        bad("scalar", ValueError, r"x must have a hidden dim", x=lambda t: t[0, 0]),
        bad(
            "hidden",
            ValueError,
            r"gate_weight must be \(intermediate, hidden=15\); got \(24, 16\)",
            x=lambda t: t[:, :15],
        ),
        bad(
            "up_shape",
            ValueError,
            r"up_weight must have gate_weight's shape \(24, 16\); got \(23, 16\)",
            up_weight=lambda w: w[:23],
        ),
        bad(
            "down_shape",
            ValueError,
            r"down_weight must be \(hidden, intermediate\)=\(16, 24\); got \(24, 16\)",
            down_weight=lambda w: w.t(),
        ),
        bad("activation", ValueError, r"activation must be one of silu, gelu_tanh; got 'relu'", activation="relu"),
        bad("num_shards", ValueError, r"num_shards must be at least 1; got 0", num_shards=0),
        bad("num_shards_type", TypeError, r"num_shards must be None or an int; got float", num_shards=2.0),
    ),
    checks=Checks(atol_scales=_scales),
    # The target is LLaMA-3-8B's MLP at 65536 tokens (`--config llama-3-8b --sweep
    # tokens=65536`); liger-kernel's own benchmark (benchmark_tiled_mlp) runs batch 2 x seq
    # 1024..16384 at hidden 2048, intermediate 4096, bfloat16, with num_shards=4.
    bench=B.BenchSpec(
        group="activations",
        axes=("tokens", "hidden", "intermediate", "batch"),
        layouts={"rows": _bench_args},
        torch_fn=_torch_mlp,
        # Ideal traffic: x, the weights and the output once each way (the GEMMs dominate: FLOPs).
        traffic=lambda s, e: (
            (2 * s.tokens * s.hidden + 3 * s.hidden * s.intermediate) * e,
            (3 * s.tokens * s.hidden + 6 * s.hidden * s.intermediate) * e,
        ),
        describe=lambda s: B.dims(("tokens", s.tokens), ("hidden", s.hidden), ("intermediate", s.intermediate)),
        flops=_flops,
        peers={B.LIGER_KERNEL: _liger_kernel_peer()},
    ),
)
