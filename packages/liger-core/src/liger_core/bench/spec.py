"""What an op's benchmark is: the `BenchSpec` an op declares (``liger_core/ops/<op>.py``, its
``OP.bench``), and the helpers the declarations build their specs from.

A spec builds the op's arguments as keyword arguments named as in the op's contract, at a model
shape and in the layout the model passes them (LLaMA's q/k are transposed views), so the same
dict feeds this project's op (dispatched, or one backend's), the PyTorch formula as the models
write it, its ``torch.compile`` and every peer adapter. A peer that needs its inputs in another
layout (torch_npu's fused SwiGLU wants ``cat([a, b], -1)``) gets a ``prepare`` step, run outside
the timed region. Random inputs come from a generator of their own seeded by op and shape
(`input_generator`): the same tensors for every provider and every run, and the global RNG
(which a failed CUDA-graph capture can leave unusable on CUDA) is never read.

Bytes moved are the ideal traffic of a fused kernel (each input read once, each output written
once; the same for every provider of a row), so GB/s compare providers on one scale. FLOPs are
given for the ops that contain a matmul (the fused linear losses).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from liger_core.bench.configs import MOE_AXES, ModelShape

Kwargs = dict[str, Any]
Builder = Callable[[ModelShape, torch.dtype, torch.device, torch.Generator], Kwargs]
MODES = ("forward", "backward", "full")
GROUPS = ("norms", "activations", "losses", "moe", "attention")

LIGER_KERNEL = "liger-kernel"
CUT_CROSS_ENTROPY = "cut-cross-entropy"
TORCH_NPU = "torch_npu"
# transformers 5.x's grouped-GEMM experts (experts_implementation="grouped_mm"), for fused_moe.
TRANSFORMERS_GROUPED_MM = "transformers-grouped_mm"


@dataclass(frozen=True)
class ViewOf:
    """An argument the model makes as a view of a tensor it owns (LLaMA's q/k,
    ``proj(x).view(b, s, h, d).transpose(1, 2)``). The runner remakes it from ``base`` at every
    timed call, as the model does every step: gradients reach ``base`` through the view's own
    backward, and a CUDA-graph capture sees the whole step (a view made once, outside, ties every
    call to one autograd graph whose leaf the timer detaches, and the capture fails)."""

    base: torch.Tensor
    make: Callable[[torch.Tensor], torch.Tensor]

    def __call__(self) -> torch.Tensor:
        return self.make(self.base)


def materialise(kwargs: Kwargs) -> Kwargs:
    """The arguments with every `ViewOf` made into its view."""
    return {k: v() if isinstance(v, ViewOf) else v for k, v in kwargs.items()}


@dataclass(frozen=True)
class Peer:
    """A provider outside this project for one op.

    ``load()`` imports the peer and returns a callable taking the spec's keyword arguments
    (after ``prepare``); ImportError means the peer is not installed.
    """

    load: Callable[[], Callable[..., Any]]
    prepare: Callable[[Kwargs], Kwargs] | None = None
    note: str = ""


@dataclass(frozen=True)
class BenchSpec:
    """An op's benchmark.

    Attributes:
        group: ``norms``, ``activations``, ``losses``, ``moe`` or ``attention`` (``liger bench --ops <group>``).
        axes: the ModelShape fields the input shapes depend on (what a sweep can vary).
        layouts: layout name -> builder ``(shape, dtype, device, generator) -> the op's keyword
            arguments``, every random input drawn from the generator. The first is the layout the
            models pass and the default; others (``contiguous`` q/k for RoPE) are for comparison.
        torch_fn: the PyTorch formula as the models write it (torch eager and torch.compile run it).
        traffic: ideal bytes moved ``(forward, backward)`` at a shape and element size.
        describe: the shape in words for the rows.
        flops: ``(forward, backward)`` FLOPs, for the ops containing a matmul.
        peers: provider name -> `Peer`.
        op: the op's name (set from its declaration by `specs`).
    """

    group: str
    axes: tuple[str, ...]
    layouts: dict[str, Builder]
    torch_fn: Callable[..., Any]
    traffic: Callable[[ModelShape, int], tuple[int, int]]
    describe: Callable[[ModelShape], str]
    flops: Callable[[ModelShape], tuple[int, int]] | None = None
    peers: dict[str, Peer] = field(default_factory=dict)
    op: str = ""
    # The op's `Op.bind`: the built arguments with the contract's defaults filled in, so every
    # provider gets every argument (set by `specs`).
    bind: Callable[[Kwargs], Kwargs] = dict

    @property
    def layout(self) -> str:
        """The default layout: the one the models pass."""
        return next(iter(self.layouts))

    @property
    def build(self) -> Builder:
        return self.layouts[self.layout]

    def with_layout(self, layout: str | None) -> BenchSpec:
        """This spec building its inputs in ``layout`` (None: the default)."""
        if layout is None or layout == self.layout:
            return self
        if layout not in self.layouts:
            raise ValueError(f"{self.op}: layout must be one of {', '.join(self.layouts)}; got {layout!r}")
        return replace(self, layouts={layout: self.layouts[layout]})

    def arguments(self, shape: ModelShape, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> Kwargs:
        """Every argument of the op at ``shape`` (built in this spec's layout, defaults filled in);
        views the model makes are `ViewOf` (see `materialise`)."""
        return self.bind(self.build(shape, dtype, device, gen))

    def inputs(self, shape: ModelShape, dtype: torch.dtype, device: torch.device | str) -> Kwargs:
        """The op's arguments at ``shape`` as tensors (views made): the same tensors on every call
        (see `input_generator`)."""
        return materialise(self.arguments(shape, dtype, torch.device(device), input_generator(self.op, shape, device)))

    def bytes_moved(self, shape: ModelShape, dtype: torch.dtype, mode: str) -> int:
        fwd, bwd = self.traffic(shape, torch.empty((), dtype=dtype).element_size())
        return {"forward": fwd, "backward": bwd, "full": fwd + bwd}[mode]

    def flop_count(self, shape: ModelShape, mode: str) -> int | None:
        if self.flops is None:
            return None
        fwd, bwd = self.flops(shape)
        return {"forward": fwd, "backward": bwd, "full": fwd + bwd}[mode]


def rows(group: str, build: Builder, torch_fn, traffic, peers: dict[str, Peer], axes=("tokens", "hidden")) -> BenchSpec:
    """The spec of an op over rows of a (tokens, hidden) activation, the norms' and softmax's layout."""
    return BenchSpec(group, axes, {"rows": build}, torch_fn, traffic, rows_text, peers=peers)


Drawer = Callable[[ModelShape, torch.dtype, torch.device, torch.Generator], torch.Tensor]


def norm(params: dict[str, Drawer], torch_fn, traffic, peers: dict[str, Peer]) -> BenchSpec:
    """The spec of a norm over rows of a (tokens, hidden) ``x``: x (`hidden_states`), then each
    parameter in ``params`` from its drawer (`norm_weight`, `norm_bias`, `fixed`, ...), in order."""

    def build(s: ModelShape, dt, dev, gen) -> Kwargs:
        return dict(x=hidden_states(s, dt, dev, gen), **{name: draw(s, dt, dev, gen) for name, draw in params.items()})

    return rows("norms", build, torch_fn, traffic, peers)


def row_activation(torch_fn, peers: dict[str, Peer]) -> BenchSpec:
    """The spec of an activation over the rows of one (tokens, hidden) ``x`` (softmax, sparsemax):
    forward reads x and writes y, backward reads y (or x) and the incoming gradient and writes grad_x."""
    return rows(
        "activations",
        lambda s, dt, dev, gen: dict(x=hidden_states(s, dt, dev, gen)),
        torch_fn,
        lambda s, e: (2 * s.tokens * s.hidden * e, 3 * s.tokens * s.hidden * e),
        peers,
    )


def vocab_rows(build: Builder, torch_fn, traffic, peers: dict[str, Peer]) -> BenchSpec:
    """The spec of a loss over rows of (tokens, vocab) logits or distributions (cross_entropy, the
    divergences)."""
    return BenchSpec("losses", ("tokens", "vocab"), {"rows": build}, torch_fn, traffic, vocab_text, peers=peers)


# -- inputs ------------------------------------------------------------------------------------


def seeded_generator(seed: int, device: torch.device | str) -> torch.Generator:
    """A generator of its own on ``device`` (the CPU's where the device has none), seeded ``seed``."""
    try:
        gen = torch.Generator(device=device)
    except RuntimeError:  # a device plugin without generators: draw on the CPU, then copy over
        gen = torch.Generator()
    return gen.manual_seed(seed)


def input_generator(op: str, shape: ModelShape, device: torch.device | str) -> torch.Generator:
    """The generator every random input of ``op`` at ``shape`` is drawn from.

    Seeded from the op and the shape's sizes, so each provider (this project, torch, every peer)
    and the reference output get the same inputs, run after run. Never PyTorch's default
    generator: a CUDA-graph capture that fails (a peer syncing with the host inside the timed
    call) leaves the default CUDA generator unusable for eager random ops, and a benchmark must
    not consume or depend on the caller's global RNG either.
    """
    # The MoE sizes count only where set, so shapes without experts keep the seeds they had.
    sizes = ",".join(f"{k}={v}" for k, v in shape.as_dict().items() if k != "name" and not (k in MOE_AXES and v == 0))
    return seeded_generator(zlib.crc32(f"{op}:{sizes}".encode()), device)


def randn(shape, gen: torch.Generator, device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard normal float32 draws from ``gen`` (on its device), as ``dtype`` on ``device``."""
    return torch.randn(shape, generator=gen, device=gen.device, dtype=torch.float32).to(device=device, dtype=dtype)


def normal(shape, dtype, device, gen, grad=True, scale=1.0, shift=0.0) -> torch.Tensor:
    """``scale * N(0, 1) + shift`` as ``dtype``, a leaf that requires grad unless ``grad=False``."""
    t = randn(shape, gen, device) * scale + shift
    return t.to(dtype).requires_grad_(grad)


def hidden_states(shape: ModelShape, dtype, device, gen, grad=True) -> torch.Tensor:
    """A unit-normal ``(tokens, hidden)`` activation: what the norms and row ops take."""
    return normal((shape.tokens, shape.hidden), dtype, device, gen, grad)


def norm_weight(shape: ModelShape, dtype, device, gen) -> torch.Tensor:
    """A norm's ``(hidden,)`` scale, around 1."""
    return normal((shape.hidden,), dtype, device, gen, scale=0.1, shift=1.0)


def norm_bias(shape: ModelShape, dtype, device, gen) -> torch.Tensor:
    """A norm's ``(hidden,)`` shift, around 0."""
    return normal((shape.hidden,), dtype, device, gen, scale=0.1)


def fixed(*values: float) -> Drawer:
    """A drawer of a small parameter with these values (a leaf that requires grad), for any shape."""
    return lambda s, dt, dev, gen: torch.tensor(values, device=dev, dtype=dt).requires_grad_()


def log_probs(rows, cols, dtype, device, gen, grad) -> torch.Tensor:
    return randn((rows, cols), gen, device).log_softmax(-1).to(dtype).requires_grad_(grad)


def probs(rows, cols, dtype, device, gen, grad) -> torch.Tensor:
    return randn((rows, cols), gen, device).softmax(-1).to(dtype).requires_grad_(grad)


def targets(rows, vocab, device, gen) -> torch.Tensor:
    return torch.randint(0, vocab, (rows,), generator=gen, device=gen.device).to(device)


def lm_head(shape: ModelShape, dtype, device, gen, grad=True) -> torch.Tensor:
    """A ``(vocab, hidden)`` projection giving O(1) logits from unit-variance hidden states."""
    return normal((shape.vocab, shape.hidden), dtype, device, gen, grad, scale=1 / math.sqrt(shape.hidden))


def dims(*pairs: tuple[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in pairs)


def rows_text(s: ModelShape) -> str:
    return dims(("tokens", s.tokens), ("hidden", s.hidden))


def vocab_text(s: ModelShape) -> str:
    return dims(("tokens", s.tokens), ("vocab", s.vocab))


def linear_text(s: ModelShape) -> str:
    return dims(("tokens", s.tokens), ("hidden", s.hidden), ("vocab", s.vocab))


def heads_text(s: ModelShape) -> str:
    return dims(
        ("batch", s.batch), ("seq", s.seq), ("heads", s.heads), ("kv_heads", s.kv_heads), ("head_dim", s.head_dim)
    )


def attention_qk(
    s: ModelShape, dtype, device, gen, transposed: bool
) -> tuple[torch.Tensor | ViewOf, torch.Tensor | ViewOf]:
    """q and k as attention holds them: ``(batch, heads, seq, head_dim)``; ``transposed`` is LLaMA's
    layout, ``proj(x).view(batch, seq, heads, head_dim).transpose(1, 2)`` (strided, not a copy)."""

    def one(heads: int) -> torch.Tensor:
        if not transposed:
            return normal((s.batch, heads, s.seq, s.head_dim), dtype, device, gen)
        stored = normal((s.batch, s.seq, heads * s.head_dim), dtype, device, gen)
        # Remade from the projection's output at every call, as in the model: gradients reach `stored`.
        return ViewOf(stored, lambda t: t.view(s.batch, s.seq, heads, s.head_dim).transpose(1, 2))

    return one(s.heads), one(s.kv_heads)


def rotary_tables(lead: tuple[int, ...], s: ModelShape, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of real rotary angles, ``(*lead, seq, head_dim)`` (a rotation keeps q and k's
    scale, so peers that rotate in place do not drift to inf over thousands of timed calls)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, s.head_dim, 2, device=device, dtype=torch.float32) / s.head_dim))
    pos = torch.arange(s.seq, device=device, dtype=torch.float32)
    angles = torch.outer(pos, inv_freq).repeat(1, 2)  # (seq, head_dim), the halves duplicated
    angles = angles.expand(*lead, s.seq, s.head_dim).contiguous()
    return angles.cos().to(dtype), angles.sin().to(dtype)


# -- peers -------------------------------------------------------------------------------------


def const(value: Any) -> Callable[[Kwargs], Any]:
    """A peer argument that is always ``value`` (liger-kernel's own default where ours differs)."""
    return lambda kw: value


def liger_kernel(name: str, *args: str | Callable[[Kwargs], Any], **keywords: str) -> Peer:
    """liger-kernel 0.8.5's functional entry point ``name`` (imported when first used), called with
    ``args`` in order (a spec argument's name, or a function of the spec's arguments), then
    ``keywords`` (liger-kernel's name = the spec argument's name)."""

    def load():
        from liger_kernel.transformers import functional as lkf

        fn = getattr(lkf, name)

        def call(**kw):
            positional = [kw[a] if isinstance(a, str) else a(kw) for a in args]
            return fn(*positional, **{theirs: kw[ours] for theirs, ours in keywords.items()})

        return call

    return Peer(load)


def torch_npu(call: Callable[..., Any], prepare: Callable[[Kwargs], Kwargs] | None = None) -> Peer:
    """torch_npu's fused op: ``call(torch_npu, **kwargs)``."""

    def load():
        import torch_npu as module

        return lambda **kw: call(module, **kw)

    return Peer(load, prepare, note="torch_npu's fused op (written from its documented API; untested without an NPU)")
