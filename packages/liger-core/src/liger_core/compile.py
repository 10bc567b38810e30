"""torch.compile support: every catalogue op as an opaque ``torch.library`` custom op.

Dynamo cannot trace a vendor's op (the registry's lock, host-side argument checks such as
``tolist()``, Triton launches on any device), so while compiling, dispatch
(`liger_core.registry.Registry.resolve`) hands out the callables built here instead. Each one
calls ``torch.ops.liger.<op>``: a custom op whose schema, fake (meta) implementation and
autograd formula are all generated from the op's declaration (`liger_core.op.Op`), so
Dynamo sees one node per call (no graph break), Inductor and CUDA graphs see an ordinary
extern op, and at run time the op dispatches to the backend serving its tensors' device, as
eager calls do (CUDA, NPU, XPU, or the Triton interpreter on the CPU).

- Forward: ``liger::<op>`` runs the backend's op without autograd; outputs are returned
  contiguous and never aliasing an input (custom ops may not alias).
- Scalar losses (`Op.grads_in_forward` true for the call's arguments, some input requiring grad:
  the fused linear losses and cross_entropy with reduction "mean"/"sum", the distillation,
  preference and GRPO losses): ``liger::<op>_with_grads`` returns the outputs and every gradient
  at upstream 1, and the backward only multiplies those by the loss's upstream gradient (traced
  elementwise ops Inductor fuses; no custom op, nothing re-run). The op drives the backend's
  autograd Function's own ``forward`` and ``backward`` on a `RecordingCtx` (vendor-neutral: the
  fused losses compute the gradients in ``forward`` and ``backward`` hands them over, so this is
  their eager cost: one chunked pass, no logits); a plain function (the reference) runs under
  autograd. Its fake gives each gradient its input's shape and dtype; a backend gradient of
  another shape is a clear error.
- Ops whose liger-core driver gives its Function a ``saved_form`` (`SAVED_STATE_OPS`: fused_moe and
  its clamped variant): ``liger::<op>_saving`` returns the outputs and the tensors the backward needs
  (fused_moe: the gate-up output and the routing), which autograd keeps; ``liger::<op>_from_saved``
  runs the Function's backward on them, the forward's kernels not re-run. A backend serving the op
  without a saved form returns none, and its backward recomputes as below.
- Backward of every other op (and of reduction "none"): ``liger::<op>_backward`` runs the
  backend's autograd Function again on the saved inputs and calls its own backward (through
  ``torch.autograd.grad``). Recomputing the forward costs one extra forward of the op in the
  backward pass, in exchange for needing nothing from the backend beyond its eager op: the
  vendor Functions keep Python state in ``ctx`` (plans, flags) that a compiled graph cannot carry
  between two opaque ops. ``LIGER_COMPILE_DECOMPOSE`` avoids it for the ops it names (below).
- Strategy per op (`COMPILE_STRATEGY`, overridden by ``LIGER_COMPILE_DECOMPOSE=rms_norm,rope`` /
  ``all`` / ``none``): "opaque" (the custom ops above; the default) or "decompose"
  (compiled code traces the declaration's ``math``, cast to the contract's output dtypes:
  Inductor fuses it with its neighbours and derives its backward; no argument checks run).
- Fake: the declaration's ``math`` run on fake tensors gives each output's shape and dtype.
- ``in_place=True`` is an allowance (the backend *may* overwrite a buffer); compiled calls
  pass ``False``, since a compiled graph must know every mutation.
- An op with an option that drops its later outputs (``return_z_loss``: ``return_<output>``)
  always returns every output from the custom op; the wrapper returns what an eager call would.
- An op taking an argument no schema type carries (a process group) is no custom op: compiled
  code calls it eagerly, with a graph break around the call (`EAGER_ONLY` says which and why).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from liger_core import registry
from liger_core.interface import CATALOGUE
from liger_core.op import Op
from liger_core.registry import REGISTRY, Registry

NAMESPACE = "liger"

# Contract annotations (strings: the op modules use ``from __future__ import annotations``)
# -> the schema type of a custom op argument.
_SCHEMA_TYPES = {
    "torch.Tensor": "Tensor",
    "torch.Tensor | None": "Tensor?",
    "float": "float",
    "float | None": "float?",
    "int": "int",
    "int | None": "int?",
    "bool": "bool",
    "str": "str",
    "Sequence[int]": "int[]",
    "list[int]": "int[]",
    "torch.dtype | None": "ScalarType?",
}


def schema_type(op: Op, param: inspect.Parameter) -> str:
    """The custom-op schema type of a contract parameter; a clear error for one without a mapping."""
    annotation = param.annotation if isinstance(param.annotation, str) else inspect.formatannotation(param.annotation)
    try:
        return _SCHEMA_TYPES[annotation]
    except KeyError:
        raise TypeError(
            f"{op.name}: parameter {param.name!r} has type {annotation!r}, which liger_core.compile cannot "
            f"map to a torch.library schema type (known: {sorted(_SCHEMA_TYPES)}); add it to _SCHEMA_TYPES"
        ) from None


class CompiledOp:
    """One op as ``torch.ops.liger.<op>`` plus its backward op, and the Python wrapper compiled
    code calls in place of the backend's op (same positional arguments as the contract)."""

    def __init__(self, op: Op, library: torch.library.Library) -> None:
        self.op = op
        params = list(op.signature.parameters.values())
        self.names = [p.name for p in params]
        self.types = [schema_type(op, p) for p in params]
        self.tensor_slots = [i for i, t in enumerate(self.types) if t.startswith("Tensor")]
        self.grad_slots = [self.names.index(g) for g in op.grads]
        self.in_place_slot = self.names.index("in_place") if "in_place" in self.names else None
        # Options that turn later outputs off: ``return_z_loss`` for output ``z_loss``.
        self.option_slots = {
            k: self.names.index(f"return_{name}")
            for k, name in enumerate(op.outputs)
            if k > 0 and f"return_{name}" in self.names
        }
        self.n_out = len(op.outputs)
        args = ", ".join(f"{t} {n}" for t, n in zip(self.types, self.names, strict=True))
        outs = "Tensor" if self.n_out == 1 else "(" + ", ".join(["Tensor"] * self.n_out) + ")"
        name = op.name
        library.define(f"{name}({args}) -> {outs}")
        library.define(f"{name}_backward(Tensor?[] grad_outputs, bool[] needs_grad, {args}) -> Tensor[]")
        library.impl(name, self._forward, "CompositeExplicitAutograd")
        library.impl(f"{name}_backward", self._backward, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::{name}", self._fake_forward, lib=library)
        torch.library.register_fake(f"{NAMESPACE}::{name}_backward", self._fake_backward, lib=library)
        self.forward_op = getattr(getattr(torch.ops, NAMESPACE), name).default
        self.backward_op = getattr(getattr(torch.ops, NAMESPACE), f"{name}_backward").default
        torch.library.register_autograd(
            f"{NAMESPACE}::{name}", self._autograd_backward, setup_context=self._setup_context, lib=library
        )
        # Ops whose driver keeps tensors for the backward (`SAVED_STATE_OPS`): the forward returns them too.
        self.saving_op = None
        if name in SAVED_STATE_OPS:
            outs_saved = "(" + ", ".join(["Tensor"] * self.n_out + ["Tensor[]"]) + ")"
            library.define(f"{name}_saving({args}) -> {outs_saved}")
            library.define(
                f"{name}_from_saved(Tensor?[] grad_outputs, bool[] needs_grad, Tensor[] saved, {args}) -> Tensor[]"
            )
            library.impl(f"{name}_saving", self._forward_saving, "CompositeExplicitAutograd")
            library.impl(f"{name}_from_saved", self._from_saved, "CompositeExplicitAutograd")
            torch.library.register_fake(f"{NAMESPACE}::{name}_saving", self._fake_forward_saving, lib=library)
            torch.library.register_fake(f"{NAMESPACE}::{name}_from_saved", self._fake_from_saved, lib=library)
            self.saving_op = getattr(getattr(torch.ops, NAMESPACE), f"{name}_saving").default
            self.from_saved_op = getattr(getattr(torch.ops, NAMESPACE), f"{name}_from_saved").default
            torch.library.register_autograd(
                f"{NAMESPACE}::{name}_saving", self._saving_backward, setup_context=self._setup_saving, lib=library
            )
        # Scalar losses (`Op.grads_in_forward`): one op returns the outputs and every gradient at
        # upstream 1; its backward scales them (elementwise, traced: no custom op, no recompute).
        self.grads_in_forward = op.grads_in_forward
        self.with_grads_op = None
        if op.grads_in_forward is not None:
            n_grads = len(self.grad_slots)
            outs_with_grads = "(" + ", ".join(["Tensor"] * (self.n_out + n_grads)) + ")"
            library.define(f"{name}_with_grads(bool[] needs_grad, {args}) -> {outs_with_grads}")
            library.impl(f"{name}_with_grads", self._forward_with_grads, "CompositeExplicitAutograd")
            torch.library.register_fake(f"{NAMESPACE}::{name}_with_grads", self._fake_forward_with_grads, lib=library)
            self.with_grads_op = getattr(getattr(torch.ops, NAMESPACE), f"{name}_with_grads").default
            torch.library.register_autograd(
                f"{NAMESPACE}::{name}_with_grads",
                self._scale_grads_backward,
                setup_context=self._setup_with_grads,
                lib=library,
            )

    # -- what compiled code calls ---------------------------------------------------------------

    def __call__(self, *args: Any) -> torch.Tensor | tuple[torch.Tensor, ...]:
        if self.in_place_slot is not None and args[self.in_place_slot]:
            args = (*args[: self.in_place_slot], False, *args[self.in_place_slot + 1 :])
        needs = self._needs_grad(args)
        if any(needs) and self.grads_in_forward(dict(zip(self.names, args, strict=True))):
            out = self.with_grads_op(needs, *args)[: self.n_out]
        elif self.saving_op is not None and self._any_requires_grad(args):
            out = self.saving_op(*args)[: self.n_out]
        else:
            out = self.forward_op(*args)
        if self.n_out == 1:
            return out[0] if isinstance(out, (tuple, list)) else out
        kept = self._kept(args)
        return out[0] if kept == 1 else tuple(out[:kept])

    def _needs_grad(self, args: Sequence[Any]) -> list[bool]:
        """Per differentiable input, whether the gradients-in-forward op must compute its gradient
        (all False: the op is not declared so, or grad mode is off). Dynamo reads these at trace time."""
        if self.grads_in_forward is None or not torch.is_grad_enabled():
            return [False] * len(self.grad_slots)
        return [isinstance(args[i], torch.Tensor) and args[i].requires_grad for i in self.grad_slots]

    def _any_requires_grad(self, args: Sequence[Any]) -> bool:
        return torch.is_grad_enabled() and any(
            isinstance(args[i], torch.Tensor) and args[i].requires_grad for i in self.grad_slots
        )

    def _kept(self, args: Sequence[Any]) -> int:
        """How many outputs an eager call returns: all, or the first where an option drops the rest."""
        for k, slot in self.option_slots.items():
            if not args[slot]:
                return k
        return self.n_out

    # -- forward --------------------------------------------------------------------------------

    def _device(self, args: Sequence[Any]) -> torch.device:
        return args[self.tensor_slots[0]].device

    def _outputs(self, out: Any, args: Sequence[Any]) -> tuple[torch.Tensor, ...] | torch.Tensor:
        """The backend's result as the schema's outputs: every output (the dropped ones as zeros of the
        first's dtype), contiguous, none aliasing an input or another output."""
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        while len(outs) < self.n_out:
            outs.append(outs[0].new_zeros(()))
        result = _unaliased(outs, [args[i] for i in self.tensor_slots])
        return result[0] if self.n_out == 1 else tuple(result)

    def _forward(self, *args: Any):
        with torch.no_grad():
            out = REGISTRY.resolve(self.op.name, self._device(args))(*args)
        return self._outputs(out, args)

    def _fake_forward(self, *args: Any):
        out = self.op.math(*args)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        outs = outs[: self._kept(args)]
        dtypes = (
            self.op.checks.out_dtypes(dict(zip(self.names, args, strict=True))) if self.op.checks.out_dtypes else None
        )
        result = []
        for k, t in enumerate(outs):
            dtype = dtypes[k] if dtypes is not None and k < len(dtypes) else t.dtype
            result.append(torch.empty(t.shape, dtype=dtype, device=t.device))
        while len(result) < self.n_out:
            result.append(result[0].new_zeros(()))
        return result[0] if self.n_out == 1 else tuple(result)

    # -- gradients in the forward (scalar losses) -----------------------------------------------

    def _forward_with_grads(self, needs_grad: list[bool], *args: Any):
        """The outputs and, per differentiable input, its gradient at upstream 1 (an empty
        placeholder where not needed). A backend's autograd Function runs its own ``forward`` and
        ``backward`` on a `RecordingCtx` (the fused losses compute the gradients in ``forward``;
        ``backward`` hands them over); a plain function (the reference) runs under autograd."""
        fn = REGISTRY.resolve(self.op.name, self._device(args))
        function = getattr(fn, "__self__", None)
        grads: Sequence[torch.Tensor | None]
        if isinstance(function, type) and issubclass(function, torch.autograd.Function):
            ctx = RecordingCtx(self._needs_input_grad(needs_grad, args))
            # As under ``apply``: grad mode off, autograd dispatch on (some Functions differentiate a
            # small part of their loss with autograd inside ``forward``).
            with _autograd_dispatch(), torch.no_grad():
                out = function.forward(ctx, *args)
                outs = list(out) if isinstance(out, (tuple, list)) else [out]
                self._check_scalar_loss(outs[0], args)
                upstream = [torch.ones_like(outs[0])] + [
                    torch.zeros_like(o) if ctx.materialize_grads else None for o in outs[1:]
                ]
                all_grads = function.backward(ctx, *upstream)
            all_grads = list(all_grads) if isinstance(all_grads, (tuple, list)) else [all_grads]
            grads = [all_grads[i] if i < len(all_grads) else None for i in self.grad_slots]
        else:
            inputs = list(args)
            leaves = []
            for k, i in enumerate(self.grad_slots):
                if needs_grad[k] and args[i] is not None:
                    inputs[i] = args[i].detach().requires_grad_(True)
                    leaves.append(inputs[i])
            with _autograd_dispatch():
                out = fn(*inputs)
                outs = list(out) if isinstance(out, (tuple, list)) else [out]
                self._check_scalar_loss(outs[0], args)
                found = iter(torch.autograd.grad(outs[0], leaves, allow_unused=True) if outs[0].requires_grad else [])
            grads = [next(found, None) if needs_grad[k] and args[i] is not None else None
                     for k, i in enumerate(self.grad_slots)]  # fmt: skip
            out = [o.detach() for o in outs]
        result = self._outputs(out, args)
        result = list(result) if self.n_out > 1 else [result]
        for k, i in enumerate(self.grad_slots):
            g = grads[k]
            if not needs_grad[k] or args[i] is None:
                result.append(_nothing(args))
                continue
            if g is None:  # the loss does not depend on this input
                g = torch.zeros_like(args[i], memory_format=torch.contiguous_format)
            if g.shape != args[i].shape:
                raise RuntimeError(
                    f"{self.op.name}: the backend's gradient of {self.names[i]!r} has shape {tuple(g.shape)}; "
                    f"expected the input's shape {tuple(args[i].shape)} (liger_core.compile, gradients in forward)"
                )
            result.append(g.to(args[i].dtype))  # autograd would cast it alike
        return tuple(_unaliased(result, [args[i] for i in self.tensor_slots]))

    def _check_scalar_loss(self, loss: torch.Tensor, args: Sequence[Any]) -> None:
        if loss.dim() != 0:
            raise RuntimeError(
                f"{self.op.name}: Op.grads_in_forward is true for these arguments, so the first output must be "
                f"a scalar loss; the backend returned shape {tuple(loss.shape)}"
            )

    def _fake_forward_with_grads(self, needs_grad: list[bool], *args: Any):
        outs = self._fake_forward(*args)
        outs = list(outs) if self.n_out > 1 else [outs]
        if outs[0].dim() != 0:
            raise RuntimeError(
                f"{self.op.name}: Op.grads_in_forward is true for these arguments, but the first output "
                f"has shape {tuple(outs[0].shape)}, not a scalar"
            )
        for k, i in enumerate(self.grad_slots):
            outs.append(
                torch.empty(args[i].shape, dtype=args[i].dtype, device=args[i].device)
                if needs_grad[k] and args[i] is not None
                else _nothing(args)
            )
        return tuple(outs)

    def _setup_with_grads(self, ctx, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.needs = list(inputs[0])
        ctx.n_args = len(inputs) - 1
        ctx.save_for_backward(*output[self.n_out :])

    def _scale_grads_backward(self, ctx, *grads: torch.Tensor | None):
        """Each gradient computed in the forward times the loss's upstream gradient: a few
        elementwise ops in the traced backward (Inductor fuses them), no custom op."""
        result: list[torch.Tensor | None] = [None] * (1 + ctx.n_args)
        upstream = grads[0]
        if upstream is None:
            return tuple(result)
        for k, (i, g) in enumerate(zip(self.grad_slots, ctx.saved_tensors, strict=True)):
            if ctx.needs[k] and ctx.needs_input_grad[1 + i]:
                result[1 + i] = (g * upstream).to(g.dtype)
        return tuple(result)

    # -- saved state (SAVED_STATE_OPS) ----------------------------------------------------------

    def _saved_form(self, args: Sequence[Any]) -> Any:
        """The serving Function's ``saved_form`` (None: a plain function, or a Function without one)."""
        fn = REGISTRY.resolve(self.op.name, self._device(args))
        return getattr(getattr(fn, "__self__", None), "saved_form", None)

    def _forward_saving(self, *args: Any):
        form = self._saved_form(args)
        with torch.no_grad():
            if form is None:
                out, saved = REGISTRY.resolve(self.op.name, self._device(args))(*args), []
            else:
                out, saved = form.forward(
                    RecordingCtx(self._needs_input_grad([True] * len(self.grad_slots), args)), *args
                )
        outs = self._outputs(out, args)
        outs = list(outs) if self.n_out > 1 else [outs]
        inputs = [args[i] for i in self.tensor_slots]
        return (*outs, _unaliased([t.contiguous() for t in saved], [*inputs, *outs]))

    def _fake_forward_saving(self, *args: Any):
        outs = self._fake_forward(*args)
        outs = list(outs) if self.n_out > 1 else [outs]
        form = self._saved_form(args)
        return (*outs, [] if form is None else form.fake_saved(*args))

    def _setup_saving(self, ctx, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.n_inputs = len(self.tensor_slots)
        ctx.save_for_backward(*(inputs[i] for i in self.tensor_slots), *output[self.n_out])
        ctx.constants = [None if i in self.tensor_slots else a for i, a in enumerate(inputs)]

    def _saving_backward(self, ctx, *grads: Any):
        args, needs = self._restored_args(ctx, ctx.saved_tensors[: ctx.n_inputs])
        if not any(needs):
            return (None,) * len(args)
        saved = list(ctx.saved_tensors[ctx.n_inputs :])
        return self._per_argument(len(args), needs, self.from_saved_op(list(grads[: self.n_out]), needs, saved, *args))

    def _from_saved(
        self, grad_outputs: list[torch.Tensor | None], needs_grad: list[bool], saved: list[torch.Tensor], *args: Any
    ):
        form = self._saved_form(args) if saved else None
        if form is None:  # the serving backend keeps nothing: recompute (see _backward)
            return self._backward(grad_outputs, needs_grad, *args)
        ctx = RecordingCtx(self._needs_input_grad(needs_grad, args))
        with torch.no_grad():
            all_grads = form.backward(ctx, grad_outputs[0], saved, *args)
        grads = [all_grads[i] if i < len(all_grads) else None for i in self.grad_slots]
        return _unaliased(self._gradients(needs_grad, grads, args), [*grad_outputs, *saved, *self._tensors(args)])

    def _fake_from_saved(
        self, grad_outputs: list[torch.Tensor | None], needs_grad: list[bool], saved: list[torch.Tensor], *args: Any
    ):
        return self._fake_backward(grad_outputs, needs_grad, *args)

    # -- backward -------------------------------------------------------------------------------

    def _setup_context(self, ctx, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*(inputs[i] for i in self.tensor_slots))
        ctx.constants = [None if i in self.tensor_slots else a for i, a in enumerate(inputs)]

    def _autograd_backward(self, ctx, *grads: torch.Tensor | None):
        args, needs = self._restored_args(ctx, ctx.saved_tensors)
        if not any(needs):
            return (None,) * len(args)
        return self._per_argument(len(args), needs, self.backward_op(list(grads), needs, *args))

    def _restored_args(self, ctx, tensors: Sequence[torch.Tensor | None]) -> tuple[list[Any], list[bool]]:
        """The op's arguments from a setup_context's ``ctx.constants`` and saved ``tensors``, and per
        differentiable input whether its gradient is needed."""
        args = list(ctx.constants)
        for i, t in zip(self.tensor_slots, tensors, strict=True):
            args[i] = t
        return args, [bool(ctx.needs_input_grad[i]) and args[i] is not None for i in self.grad_slots]

    def _per_argument(self, n_args: int, needs: list[bool], grads: Sequence[torch.Tensor]) -> tuple:
        """A backward op's gradients (one per differentiable input) as autograd's, one per argument."""
        result: list[torch.Tensor | None] = [None] * n_args
        for k, i in enumerate(self.grad_slots):
            if needs[k]:
                result[i] = grads[k]
        return tuple(result)

    def _needs_input_grad(self, needs_grad: Sequence[bool], args: Sequence[Any]) -> list[bool]:
        """``ctx.needs_input_grad`` for a Function driven on a `RecordingCtx`: per argument."""
        result = [False] * len(args)
        for k, i in enumerate(self.grad_slots):
            result[i] = bool(needs_grad[k]) and args[i] is not None
        return result

    def _tensors(self, args: Sequence[Any]) -> list[torch.Tensor | None]:
        return [args[i] for i in self.tensor_slots]

    def _gradients(
        self, needs_grad: Sequence[bool], grads: Sequence[torch.Tensor | None], args: Sequence[Any]
    ) -> list[torch.Tensor]:
        """A backward op's outputs: per differentiable input its gradient in the input's dtype, zeros
        where the backend gave none, an empty placeholder where it was not needed."""
        result = []
        for k, i in enumerate(self.grad_slots):
            g = grads[k]
            if not needs_grad[k]:
                result.append(_nothing(args))
            elif g is None:
                result.append(torch.zeros_like(args[i], memory_format=torch.contiguous_format))
            else:
                result.append(g.to(args[i].dtype))
        return result

    def _backward(self, grad_outputs: list[torch.Tensor | None], needs_grad: list[bool], *args: Any):
        inputs = list(args)
        leaves = []
        for k, i in enumerate(self.grad_slots):
            if needs_grad[k]:
                inputs[i] = args[i].detach().requires_grad_(True)
                leaves.append(inputs[i])
        with torch.enable_grad():
            out = REGISTRY.resolve(self.op.name, self._device(args))(*inputs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        pairs = [
            (o, g)
            for o, g, name in zip(outs, grad_outputs, self.op.outputs, strict=False)
            if g is not None and name not in self.op.no_grad_outputs and o.requires_grad
        ]
        grads = (
            torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True)
            if pairs
            else [None] * len(leaves)
        )
        found = iter(grads)
        result = self._gradients(needs_grad, [next(found) if need else None for need in needs_grad], args)
        # A backend's gradients may alias each other (fused_add_rms_norm returns one tensor for x and the
        # residual) or an incoming gradient (a pass-through); Inductor reuses a custom op's outputs as
        # distinct buffers, so an alias there corrupts the other gradient silently.
        return _unaliased(result, [*grad_outputs, *self._tensors(args)])

    def _fake_backward(self, grad_outputs: list[torch.Tensor | None], needs_grad: list[bool], *args: Any):
        result = []
        for k, i in enumerate(self.grad_slots):
            result.append(
                torch.empty(args[i].shape, dtype=args[i].dtype, device=args[i].device)
                if needs_grad[k]
                else _nothing(args)
            )
        return result


@contextlib.contextmanager
def _autograd_dispatch() -> Iterator[None]:
    """Autograd back on inside a custom op's kernel: the op's own autograd formula runs its kernel
    below the autograd dispatch keys and with grad mode off, so a function differentiated there
    (a reference backend's loss) would record nothing."""
    exclude = torch._C._dispatch_tls_local_exclude_set()
    for key in ("AutogradFunctionality", "AutogradOther", "AutogradNestedTensor", "ADInplaceOrView"):
        exclude = exclude.remove(getattr(torch._C.DispatchKey, key))
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude), torch.enable_grad():
        yield


class RecordingCtx:
    """What an autograd Function's ``forward`` and ``backward`` see as ``ctx`` when compiled code
    drives them directly (not through ``apply``): the saved tensors and attributes stay on this
    object between the two calls, inside one custom op."""

    def __init__(self, needs_input_grad: Sequence[bool]) -> None:
        self.needs_input_grad = tuple(needs_input_grad)
        self.materialize_grads = True
        self._saved: tuple[torch.Tensor | None, ...] = ()

    def save_for_backward(self, *tensors: torch.Tensor | None) -> None:
        self._saved = tensors

    @property
    def saved_tensors(self) -> tuple[torch.Tensor | None, ...]:
        return self._saved

    def mark_non_differentiable(self, *tensors: torch.Tensor) -> None:
        pass

    def mark_dirty(self, *tensors: torch.Tensor) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


def _unaliased(tensors: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor | None]) -> list[torch.Tensor]:
    """``tensors`` as a custom op's outputs: contiguous, none sharing storage with an input or with an
    earlier output (a custom op may not alias; copies only where a backend returned an alias)."""
    taken = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor) and t.numel()}
    result = []
    for t in tensors:
        t = t.contiguous()
        if t.numel():
            ptr = t.untyped_storage().data_ptr()
            if ptr in taken:
                t = t.clone()
            taken.add(t.untyped_storage().data_ptr())
        result.append(t)
    return result


def _nothing(args: Sequence[Any]) -> torch.Tensor:
    """The placeholder for a gradient nobody asked for (a tensor list holds no None)."""
    first = next(a for a in args if isinstance(a, torch.Tensor))
    return first.new_empty((0,))


def _eager_only_reason(op: Op) -> str | None:
    """Why ``op`` cannot be a custom op (an argument no schema type carries), or None."""
    try:
        for param in op.signature.parameters.values():
            schema_type(op, param)
    except TypeError as error:
        return str(error)
    return None


def _eager_call(name: str) -> Callable:
    """``name``'s backend op run eagerly from compiled code: Dynamo breaks the graph around the call."""

    def call(*args: Any) -> Any:
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        return REGISTRY.resolve(name, device)(*args)

    return torch._dynamo.disable(call)


def _build() -> tuple[torch.library.Library, dict[str, CompiledOp], dict[str, str]]:
    library = torch.library.Library(NAMESPACE, "FRAGMENT")
    compiled, eager_only = {}, {}
    for name, op in CATALOGUE.items():
        reason = _eager_only_reason(op)
        if reason is None:
            compiled[name] = CompiledOp(op, library)
        else:
            eager_only[name] = reason
    return library, compiled, eager_only


# Per op, how compiled code runs it: "opaque" (the backend's kernels behind ``torch.ops.liger.<op>``, the
# default) or "decompose" (the declaration's ``math`` traced by Dynamo: Inductor fuses it with its neighbours
# and derives the backward; argument checks are not run). ``LIGER_COMPILE_DECOMPOSE`` overrides it.
# Measured in a compiled LLaMA-3.2-1B training step on an H200 (bench_e2e.py, bf16, batch 8 x 2048,
# checkpointing; benchmarks/results/H200/compile-e2e/): every op opaque 54.8k tokens/s, the first four
# decomposed 58.0k (eager Liger 56.3k). Opaque, rms_norm's backward re-runs its forward and rope's outputs
# are copied out of the transposed q/k views; decomposed, Inductor fuses each into its neighbours' kernels.
# The fused linear losses stay opaque: traced, their math would materialise the logits.
COMPILE_STRATEGY: dict[str, str] = {
    "rms_norm": "decompose",
    "fused_add_rms_norm": "decompose",
    "rope": "decompose",
    "swiglu": "decompose",
    # Gemma-3-1B compiled (H200, same script; benchmarks/results/H200/compile-e2e/, 2026-11-29 17:00): geglu
    # opaque 51.2k tokens/s, 9.42 GiB peak; decomposed 51.4k, 9.22 GiB (the opaque backward's recomputed
    # forward and its copies held two more (tokens, intermediate) buffers at the step's peak).
    "geglu": "decompose",
    # A two-layer model of the family that uses the op, compiled training step (H200, bf16, batch 4 x 2048;
    # benchmarks/probes/compile_strategy.py, results in benchmarks/results/H200/compile-e2e/compile_strategy.json),
    # the op decomposed against this table: Nemotron's layer_norm 0.870x the time, relu_squared 0.956x (same peak);
    # Phi-3's fused_gate_up_swiglu 1.025x (stays opaque); Mixtral's fused_moe 9.2x and 5.3x the peak (the
    # declaration's math loops over the experts; stays opaque).
    "layer_norm": "decompose",
    "relu_squared": "decompose",
    "fused_gate_up_swiglu": "opaque",
    "fused_moe": "opaque",
}
DECOMPOSE_ENV = "LIGER_COMPILE_DECOMPOSE"
# Ops whose liger-core driver gives its autograd Function a ``saved_form`` (liger_core.drivers.fused_moe): their
# compiled backward takes what the forward kept instead of re-running the forward (the grouped GEMMs).
SAVED_STATE_OPS = frozenset({"fused_moe", "fused_moe_clamped_swiglu"})


def decomposed_ops(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The ops compiled code runs as their traced ``math``: `COMPILE_STRATEGY`'s, or those that
    ``LIGER_COMPILE_DECOMPOSE`` names (``rms_norm,rope,swiglu``; ``all``; ``none`` or empty: the table).
    A clear error for an unknown op name."""
    value = (os.environ if environ is None else environ).get(DECOMPOSE_ENV, "").strip()
    if not value:
        return frozenset(name for name, how in COMPILE_STRATEGY.items() if how == "decompose")
    if value == "none":
        return frozenset()
    if value == "all":
        return frozenset(CATALOGUE)
    names = frozenset(n.strip() for n in value.split(",") if n.strip())
    unknown = sorted(names - set(CATALOGUE))
    if unknown:
        raise ValueError(
            f"{DECOMPOSE_ENV}={value!r} names unknown ops {unknown}; expected 'all', 'none' or a comma-separated "
            f"list of catalogue ops (e.g. rms_norm,rope,swiglu)"
        )
    return names


class DecomposedOp:
    """An op as its declaration's ``math``, for Dynamo to trace (same positional arguments and
    arity as the eager call)."""

    def __init__(self, op: Op) -> None:
        self.op = op
        self.names = names = list(op.signature.parameters)
        self.option_slots = {
            k: names.index(f"return_{name}") for k, name in enumerate(op.outputs) if k > 0 and f"return_{name}" in names
        }

    def __call__(self, *args: Any) -> Any:
        out = self.op.math(*args)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        # The contract's dtypes (``math`` may return its compute dtype, as cross_entropy's float32 loss).
        checks = self.op.checks
        dtypes = (
            checks.out_dtypes(dict(zip(self.names, args, strict=True)))
            if checks.out_dtypes
            else (next(a.dtype for a in args if isinstance(a, torch.Tensor)),) * len(outs)
        )
        outs = [
            o.to(d) if isinstance(o, torch.Tensor) and d is not None else o for o, d in zip(outs, dtypes, strict=False)
        ]
        if len(self.op.outputs) == 1:
            return outs[0]
        for k, slot in self.option_slots.items():
            if not args[slot]:
                return outs[0] if k == 1 else tuple(outs[:k])
        return tuple(outs)


_LIBRARY: torch.library.Library | None = None
COMPILED: dict[str, CompiledOp] = {}
# Ops with an argument a custom op cannot take (vocab_parallel_cross_entropy's process group): compiled
# code calls them eagerly, a graph break at each call; op -> why.
EAGER_ONLY: dict[str, str] = {}
_EAGER_CALLS: dict[str, Callable] = {}
_DECOMPOSED: dict[str, DecomposedOp] = {}


def compiled(op: str) -> CompiledOp:
    """The callable compiled code uses for ``op`` (see the module docstring); builds the custom ops
    on first use."""
    install()
    return COMPILED[op]


def install() -> None:
    """Define the ``liger::`` custom ops and make Dynamo trace `Registry.resolve` as `compiled`.

    Idempotent. Runs when ``torch._dynamo`` is imported (`install_when_dynamo_loads`), so neither an
    eager-only program nor an eager call pays for it: eager dispatch runs the same code as before.
    """
    global _LIBRARY
    if _LIBRARY is not None:
        return
    _LIBRARY, built, eager_only = _build()
    COMPILED.update(built)
    EAGER_ONLY.update(eager_only)
    _EAGER_CALLS.update({name: _eager_call(name) for name in eager_only})
    _DECOMPOSED.update({name: DecomposedOp(op) for name, op in CATALOGUE.items()})

    # Which backend serves a device is fixed while a process runs: Dynamo calls vendor_serves
    # while tracing and keeps its answer, instead of tracing the registry (its lock, its imports).
    torch.compiler.assume_constant_result(registry.vendor_serves)

    # Dynamo inlines this in place of Registry.resolve; eager calls still run Registry.resolve.
    @torch.compiler.substitute_in_graph(Registry.resolve)
    def _resolve_while_compiling(self: Registry, op: str, device: str | torch.device) -> Callable:
        if is_decomposed(op):
            return _DECOMPOSED[op]
        return COMPILED[op] if op in COMPILED else _EAGER_CALLS[op]

    # A constant to Dynamo, read while tracing: torch._dynamo.reset() after changing the setting.
    is_decomposed = torch._dynamo.assume_constant_result(lambda op: op in decomposed_ops())


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``callback`` once right after the module ``name`` has been imported (torch._dynamo is
    slow to import, seconds, so liger-core does not import it; it installs when someone else does)."""

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module, callback = spec.loader.exec_module, self.callback

        def exec_then_install(module: types.ModuleType) -> None:
            exec_module(module)
            callback()

        spec.loader.exec_module = exec_then_install
        return spec


def install_when_dynamo_loads() -> None:
    """`install` now if ``torch._dynamo`` is loaded, else right after it is."""
    if "torch._dynamo" in sys.modules:
        install()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport("torch._dynamo", install))
