"""How an op is declared: one `Op` per op, in ``liger_core/ops/<op>.py``, in the spirit of
PyTorch's OpInfo.

A declaration holds everything the project needs to know about the op:

- its contract: the reference function, whose signature and docstring are the interface and
  whose body (argument checks, then the formula) is the PyTorch fallback;
- the formula on every argument (``math``), which the conformance suite runs in float64 as the
  oracle, and which inputs it differentiates;
- sample inputs (shapes that reach every code path, odd sizes, the strided layouts models pass),
  error inputs as data (argument changes -> exception type and message), smoke samples for
  ``liger check``;
- its benchmark spec (`liger_core.bench.spec.BenchSpec`).

The conformance suite (`liger_core.conformance.cases`), ``liger check`` and ``liger bench`` are
generated from the catalogue of declarations (`liger_core.interface.CATALOGUE`).

Argument errors, every op and backend alike: the message starts with the op's name
(``rms_norm: x must have dtype float32, bfloat16, float16; got int64``) and names the argument,
the expected and the actual value (`liger_core.ops._checks`).

Dtypes, one rule for every op: floating tensors are float32, bfloat16 or float16. Tensors that
enter one matrix product or one elementwise combination as operands (a projection's input and
weight, an expert's hidden states and weights, attention's query/key/value, the two halves of a
GLU) share one dtype; otherwise the call raises TypeError naming both arguments and both dtypes
(`liger_core.ops._checks.check_same_dtype`). Two kinds of argument are outside that rule:

- per-feature parameters and side inputs (norm weights and biases, DyT's alpha/gamma/beta,
  modulation scale/shift, RoPE's cos/sin, class weights, advantages, log-probabilities, a
  teacher's or reference model's inputs): any supported dtype, computed in float32, outputs in
  the main input's dtype, gradients in each tensor's own dtype;
- the causal-LM head taken by the fused linear losses listed in
  `liger_core.ops._checks.CASTS_TO_INPUT_DTYPE` (cross-entropy, scaled cross-entropy and the
  preference losses): ``weight`` / ``bias`` (and ``ref_weight``) of another float dtype than
  their input are cast to the input's dtype for the matmul, as autocast does, and get their
  gradients in their own dtypes. Mixed-precision training hands the patched causal-LM forward
  exactly that (bfloat16 hidden states from a bfloat16 body, a float32 ``lm_head`` kept for
  stability or by the training framework), so the rule admits it. GRPO and the distillation
  losses (JSD, KL, cosine) do not cast yet: their weights must share their input's dtype.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

Args = dict[str, Any]


def _is_function_class(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, torch.autograd.Function)


def implementation_signature(impl: Callable) -> inspect.Signature:
    """The signature an implementation offers: a function's own, or an autograd Function's
    ``forward`` without ``ctx``."""
    if _is_function_class(impl):
        sig = inspect.signature(impl.forward)
        return sig.replace(parameters=list(sig.parameters.values())[1:])
    return inspect.signature(impl)


def implementation_callable(impl: Callable) -> Callable:
    """What dispatch calls: a function itself, an autograd Function's ``apply``."""
    return impl.apply if _is_function_class(impl) else impl


def _text(value: Any) -> str:
    """A short, id-safe rendering of a sample parameter (for pytest ids and messages)."""
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
        return "x".join(map(str, value)) if value else "scalar"
    if callable(value):
        return getattr(value, "__name__", "fn").strip("_")
    return str(value)


@dataclass(frozen=True)
class Sample:
    """One set of arguments for an op, built lazily on a device.

    ``build(device, **params)`` returns the op's arguments by name (those left out take the
    contract's defaults). Upstream gradients are not part of a sample: the check draws them
    (seeded) for every output, ``grad_scalar`` for a scalar one.
    """

    build: Callable[..., Args]
    params: Mapping[str, Any] = field(default_factory=dict)
    grad_scalar: float = 1.0
    # Outputs that feed nothing downstream (no upstream gradient; fused_add_rms_norm's residual).
    unused_outputs: tuple[str, ...] = ()
    # Differentiable inputs passed without requires_grad (a frozen trunk).
    frozen: tuple[str, ...] = ()
    # Forward only: nothing requires grad.
    forward_only: bool = False

    def args(self, device: str | torch.device) -> Args:
        return self.build(device, **self.params)

    def with_params(self, **params: Any) -> Sample:
        return replace(self, params={**self.params, **params})

    @property
    def id(self) -> str:
        parts = [] if self.build.__name__ in ("args", "_args") else [_text(self.build)]
        parts += [f"{k}={_text(v)}" for k, v in self.params.items()]
        if self.grad_scalar != 1.0:
            parts.append(f"dy={self.grad_scalar:g}")
        parts += [f"unused={n}" for n in self.unused_outputs] + [f"frozen={n}" for n in self.frozen]
        if self.forward_only:
            parts.append("no_grad")
        return "-".join(parts) or "default"


def sample(
    build: Callable[..., Args],
    *,
    grad_scalar: float = 1.0,
    unused_outputs: tuple[str, ...] = (),
    frozen: tuple[str, ...] = (),
    forward_only: bool = False,
    **params: Any,
) -> Sample:
    """``Sample(build, params)`` with the parameters as keywords."""
    return Sample(build, params, grad_scalar, unused_outputs, frozen, forward_only)


@dataclass(frozen=True)
class BadInput:
    """Arguments outside the contract and the error every backend must raise for them.

    ``changes`` maps argument names to new values; a callable is applied to the valid value
    (``weight=lambda w: w[:15]``). The valid arguments come from the op's ``error_sample``.
    """

    name: str
    error: type[Exception]
    match: str
    changes: Mapping[str, Any]

    def apply(self, args: Args) -> Args:
        out = dict(args)
        for key, change in self.changes.items():
            out[key] = change(out.get(key)) if callable(change) and not isinstance(change, type) else change
        return out


def bad(name: str, error: type[Exception], match: str, **changes: Any) -> BadInput:
    return BadInput(name, error, match, changes)


def on_other_device(t: torch.Tensor) -> torch.Tensor:
    """The tensor on a device other than its own: ``meta`` from the CPU, the CPU from elsewhere."""
    return t.to("meta" if t.device.type == "cpu" else "cpu")


def set_item(index: int, value: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """A change that sets one element of a tensor (on a copy)."""

    def change(t: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        t[index] = value
        return t

    return change


@dataclass(frozen=True)
class Checks:
    """How the conformance check reads an op's results (all optional; defaults in brackets).

    - ``out_dtypes(args)``: each output's dtype [the first tensor argument's].
    - ``atol_scales(args64, upstream64)``: per output or gradient name (``"output"``, ``"grad_x"``),
      the magnitude of the terms the math cancels, for the absolute tolerance [the expected
      value's own magnitude]. ``args64`` are the float64 arguments, ``upstream64`` the upstream
      gradients by output name (None where unused).
    - ``tolerance_from``: per output or gradient name, the inputs whose dtypes set its tolerance
      [every floating input].
    - ``overwritable(args)``: what an opted-in call may overwrite: input names (they are passed as
      copies, so the caller's tensors stay intact), or ``"grad_<output>"`` for an upstream
      gradient [nothing].
    """

    out_dtypes: Callable[[Args], tuple[torch.dtype, ...]] | None = None
    atol_scales: Callable[[Args, dict[str, torch.Tensor | None]], dict[str, float]] | None = None
    tolerance_from: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    overwritable: Callable[[Args], tuple[str, ...]] | None = None


@dataclass(frozen=True)
class Sharding:
    """Where an op's math is local, so that it runs on DTensor inputs shard by shard
    (tensor and sequence parallelism; `liger_core.distributed` does the running).

    - ``inputs``: the activations the op maps, sharded as a parallel plan shards them.
    - ``across(args)``: the dims of the inputs the op computes across (a norm's last dim, the
      rotated head dim): an input sharded on one of them cannot run locally. Negative dims count
      from the end.
    - ``aligned``: the inputs combine elementwise, so they must be sharded alike.
    - ``replicated``: arguments broadcast over the inputs (norm weights, cos/sin), which every
      rank must hold whole. The gradient of one is a sum over the inputs' rows, so along a mesh
      dim that shards an input it comes back ``Partial(sum)``, as torch's own ops return it.
    - ``outputs``: per output, the input whose placements and global shape it takes.
    """

    inputs: tuple[str, ...]
    across: Callable[[Args], tuple[int, ...]]
    outputs: tuple[str, ...]
    aligned: bool = False
    replicated: tuple[str, ...] = ()


def always(args: Args) -> bool:
    """A predicate true for every argument set (``Op.grads_in_forward`` of a loss that is always a scalar)."""
    return True


@dataclass(frozen=True)
class Op:
    """One op of the interface, declared once (see the module docstring).

    Attributes:
        reference: the contract. Its name is the op's name, its signature and docstring the
            interface every backend implements; calling it runs the PyTorch reference.
        since: the interface version (major, minor) that added the op.
        math: the formula, taking every contract argument positionally, differentiable by
            autograd; float64 inputs give the float64 oracle.
        grads: the inputs the contract differentiates (others get no gradient).
        outputs: names of the outputs in ``math``'s order; a call returns all of them or, where
            an option turns the later ones off (``return_z_loss``), the first.
        no_grad_outputs: outputs that carry no gradient (logged values such as the z-loss).
        samples: the conformance samples.
        smoke: ``liger check``'s samples; each runs in every tested dtype (``dtype`` is set).
        error_sample: valid arguments that ``errors`` change.
        errors: bad inputs and the errors they raise.
        checks: how results are compared (see `Checks`).
        bench: the benchmark spec, or None.
        sharding: how it runs on DTensor inputs (see `Sharding`); None: it does not.
        grads_in_forward: for which arguments the first output is a scalar loss and every other
            output carries no gradient, so that every gradient is the upstream scalar times
            the gradient at upstream 1. Compiled calls then take the gradients from the forward
            (where the fused losses compute them anyway) and the backward only scales them
            (`liger_core.compile`). None: never.
    """

    reference: Callable
    since: tuple[int, int]
    math: Callable
    grads: tuple[str, ...]
    samples: Callable[[], Iterable[Sample]]
    smoke: tuple[Sample, ...]
    error_sample: Sample
    errors: tuple[BadInput, ...]
    outputs: tuple[str, ...] = ("output",)
    no_grad_outputs: tuple[str, ...] = ()
    checks: Checks = field(default_factory=Checks)
    bench: Any = None  # liger_core.bench.spec.BenchSpec (not imported here: the bench is optional)
    sharding: Sharding | None = None
    grads_in_forward: Callable[[Args], bool] | None = None

    @property
    def name(self) -> str:
        return self.reference.__name__

    @property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.reference)

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.reference) or ""

    @property
    def contract(self) -> Callable:
        # The contract and the reference are one function.
        return self.reference

    def bind(self, args: Mapping[str, Any]) -> Args:
        """Every contract argument, in order, defaults filled in; a clear error for unknown names."""
        try:
            bound = self.signature.bind(**args)
        except TypeError as e:
            raise TypeError(f"{self.name}: {e}") from None
        bound.apply_defaults()
        return dict(bound.arguments)
