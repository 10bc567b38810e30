"""The one conformance check, for every op: a backend's forward and every gradient against the
float64 oracle of the op's declaration, without pytest (the generated cases, vendor tests that
force their own code paths, and ``liger check`` all call it).

    from liger_core.conformance.check import check, make_args
    args = make_args("rms_norm", "cpu", shape=(9, 130), dtype=torch.bfloat16)
    check(BACKEND, "rms_norm", args, casting_mode="gemma")
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from liger_core.conformance import assert_close, loosest
from liger_core.op import Op, Sample


def declaration(op: str | Op) -> Op:
    if isinstance(op, Op):
        return op
    from liger_core.interface import CATALOGUE

    try:
        return CATALOGUE[op]
    except KeyError:
        raise KeyError(f"unknown op {op!r}; the catalogue has {', '.join(CATALOGUE)}") from None


def make_args(op: str | Op, device: str | torch.device, **params: Any) -> dict[str, Any]:
    """The arguments of ``op``'s default sample builder (its first sample's) with ``params``."""
    decl = declaration(op)
    return decl.error_sample.build(device, **params)


def op_callable(backend, op: str):
    """The callable serving ``op`` in ``backend`` (an autograd Function's ``apply``)."""
    fn = backend.op(op) if hasattr(backend, "op") else backend.ops.get(op)
    if fn is None:
        raise KeyError(f"backend {backend.name!r} has no op {op!r}")
    return fn


def _as_tuple(out: Any) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _float64(value: Any, requires_grad: bool) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    t = value.detach().to("cpu")
    if t.is_floating_point():
        t = t.double()
    return t.requires_grad_(requires_grad and t.is_floating_point())


def copy_layout(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with its sizes and strides, so a padded or transposed view reaches the op as
    one (``clone`` would make it dense). Broadcast (stride-0) layouts cannot be written and are
    cloned dense. Differentiable: a copy of a tensor that requires grad stays in its graph."""
    try:
        out = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
        return out.copy_(t)
    except RuntimeError:  # overlapping memory (expand): one element written from several
        return t.clone()


def _upstream(out: torch.Tensor, seed: int, scalar: float) -> torch.Tensor:
    """The gradient fed to backward: ``scalar`` for a scalar output, seeded normal values otherwise."""
    if out.dim() == 0:
        return torch.tensor(scalar, dtype=out.dtype, device=out.device)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return g.to(device=out.device, dtype=out.dtype)


def check(
    backend,
    op: str | Op,
    args: Mapping[str, Any],
    *,
    grad_scalar: float = 1.0,
    unused_outputs: tuple[str, ...] = (),
    frozen: tuple[str, ...] = (),
    forward_only: bool = False,
    seed: int = 0,
    **overrides: Any,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Run ``backend``'s ``op`` forward and backward on ``args`` (plus ``overrides``) and check
    every output and every gradient against the float64 oracle at the stated tolerances, and
    that nothing the caller did not opt in to overwriting changed.

    Returns ``(outputs, grads)`` by name, for further assertions.
    """
    decl = declaration(op)
    name = decl.name
    bound = decl.bind({**args, **overrides})
    checks = decl.checks
    overwritable = set(checks.overwritable(bound)) if checks.overwritable else set()
    differentiable = {
        k
        for k in decl.grads
        if isinstance(bound.get(k), torch.Tensor) and bound[k].is_floating_point() and k not in frozen
    }
    if forward_only:
        differentiable = set()
    tensors = {k: v for k, v in bound.items() if isinstance(v, torch.Tensor)}
    before = {k: v.detach().clone() for k, v in tensors.items()}

    # The call: differentiable inputs are leaves; inputs the op may overwrite reach it as copies.
    leaves = {k: copy_layout(v.detach()).requires_grad_(k in differentiable) for k, v in tensors.items()}
    call = dict(bound)
    for k, leaf in leaves.items():
        call[k] = copy_layout(leaf) if k in overwritable else leaf
    outs = _as_tuple(op_callable(backend, name)(*call.values()))
    if len(outs) > len(decl.outputs):
        raise AssertionError(f"{name}: {len(outs)} outputs, the contract has {len(decl.outputs)}")
    names = decl.outputs[: len(outs)]
    upstream: dict[str, torch.Tensor | None] = {}
    for i, (out_name, out) in enumerate(zip(names, outs)):
        wanted = out_name not in decl.no_grad_outputs and out_name not in unused_outputs
        upstream[out_name] = _upstream(out, seed + 7 + i, grad_scalar) if wanted and differentiable else None
    given = {k: g.clone() for k, g in upstream.items() if g is not None}
    pairs = [(o, g) for o, g in zip(outs, upstream.values()) if g is not None]
    if pairs:
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])

    # The oracle: the same formula in float64 on the CPU, the same upstream gradients.
    args64 = {k: _float64(v, k in differentiable) for k, v in bound.items()}
    outs64 = _as_tuple(decl.math(*args64.values()))[: len(outs)]
    # The upstream gradients as they were before backward (an opted-in op may have overwritten them).
    pairs64 = [(o, given[n].cpu().double()) for n, o in zip(names, outs64) if n in given]
    if pairs64:
        torch.autograd.backward([o for o, _ in pairs64], [g for _, g in pairs64])

    # Nothing the caller did not opt in to may change (checked first: a kernel that writes into its
    # inputs also corrupts what its backward reads): inputs, and upstream gradients.
    for k, leaf in leaves.items():
        assert torch.equal(leaf.detach(), before[k]), f"{name} modified its input {k}"
    for out_name, g in given.items():
        if f"grad_{out_name}" not in overwritable:
            assert torch.equal(upstream[out_name], g), f"{name} modified the incoming gradient of {out_name}"
    detached64 = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in args64.items()}
    up64 = {n: (given[n].cpu().double() if n in given else None) for n in upstream}
    scales = checks.atol_scales(detached64, up64) if checks.atol_scales else {}
    floating = {k: v.dtype for k, v in tensors.items() if v.is_floating_point()}

    def tolerance(what: str) -> torch.dtype:
        inputs = checks.tolerance_from.get(what)
        return loosest(*(floating[k] for k in (inputs if inputs is not None else floating) if k in floating))

    device = next(iter(tensors.values())).device if tensors else None
    dtypes = checks.out_dtypes(bound) if checks.out_dtypes else (next(iter(floating.values())),) * len(outs)
    for out_name, out, out64, dtype in zip(names, outs, outs64, dtypes):
        assert isinstance(out, torch.Tensor), f"{name} {out_name}: not a tensor ({type(out).__name__})"
        assert out.dtype == dtype, f"{name} {out_name}: dtype {out.dtype}, expected {dtype}"
        assert device is None or out.device == device, f"{name} {out_name}: on {out.device}, expected {device}"
        assert_close(out, out64, tolerance(out_name), f"{name} {out_name}", scale=scales.get(out_name))

    grads = {}
    for k in differentiable:
        if not pairs:
            break
        what = f"grad_{k}"
        got, want = leaves[k].grad, args64[k].grad
        if want is None:
            # No output that receives a gradient depends on this input: its gradient is zero, and
            # the op may leave it None.
            if got is None:
                continue
            want = torch.zeros_like(args64[k])
        assert got is not None, f"{name} {what}: missing"
        assert got.dtype == tensors[k].dtype, f"{name} {what}: dtype {got.dtype}, expected {tensors[k].dtype}"
        assert got.shape == tensors[k].shape, f"{name} {what}: shape {tuple(got.shape)}, expected its input's"
        assert_close(got, want, tolerance(what), f"{name} {what}", scale=scales.get(what))
        grads[k] = got

    return dict(zip(names, outs)), grads


def check_sample(backend, op: str | Op, sample: Sample, device: str | torch.device, **overrides: Any):
    """`check` on one declared sample."""
    return check(
        backend,
        op,
        sample.args(device),
        grad_scalar=sample.grad_scalar,
        unused_outputs=sample.unused_outputs,
        frozen=sample.frozen,
        forward_only=sample.forward_only,
        **overrides,
    )
