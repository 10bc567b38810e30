"""Liger ops on DTensor inputs (tensor and sequence parallelism).

A parallel plan (``torch.distributed.tensor.parallel.parallelize_module``) hands an op DTensors:
a norm under ``SequenceParallel`` gets its input sharded on the sequence dim and its weight
replicated; a gated activation after a colwise gate/up projection (``use_local_output=False``)
gets both inputs sharded on the last dim. The kernels take plain tensors, so `call` runs the op
on each rank's local shards and wraps the outputs back, where the op's declaration
(`liger_core.op.Sharding`) says its math is local along the sharded dims.

Where it is not (a norm's input sharded on the normalised dim, a sharded or ``Partial`` input, a
sharded norm weight), `call` raises an error naming the argument and its placement rather than
redistributing: a hidden all-gather would cost more than the kernel saves, and the fix belongs in
the plan (or an explicit ``redistribute``).

Gradients: each input's gradient has the input's placements; a replicated parameter's gradient
is a sum over rows that each rank holds only some of, so it is ``Partial(sum)`` along every mesh
dim that shards an input, as torch's own ops return it (reduced when the optimizer or
``full_tensor()`` reads it), and ``Replicate`` along the others.

torch.distributed.tensor is imported on the first DTensor call only; plain tensors never get here
(`liger_core.functional` checks the first argument's type and nothing more).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from liger_core.interface import CATALOGUE
from liger_core.registry import resolve


def _contiguous_stride(shape: torch.Size) -> tuple[int, ...]:
    stride, acc = [], 1
    for n in reversed(shape):
        stride.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(stride))


@functools.cache
def _parameters(op: str) -> tuple[str, ...]:
    return tuple(CATALOGUE[op].signature.parameters)


def _waited(t: torch.Tensor) -> torch.Tensor:
    """A plain tensor for the kernels: a DTensor fresh from a collective (an embedding's
    reduce-scatter) holds an AsyncCollectiveTensor, a wrapper without storage of its own.
    ``wait_tensor`` on the wrapper itself keeps the autograd graph (its backward is the identity)."""
    from torch.distributed._functional_collectives import AsyncCollectiveTensor, wait_tensor

    return wait_tensor(t) if isinstance(t, AsyncCollectiveTensor) else t


class _WaitGrad(torch.autograd.Function):
    """The identity, whose backward hands the kernels a plain gradient: the gradient of an
    output comes back through the DTensor's redistribution, an AsyncCollectiveTensor too."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor) -> torch.Tensor:
        return t.view_as(t)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return _waited(grad)


class _LocalShard(torch.autograd.Function):
    """A DTensor's local tensor (``to_local``), whose backward hands back a gradient DTensor with
    ``grad_placements`` and the DTensor's own global shape and strides. ``to_local``'s backward
    derives the strides from the local shard, which for a shard of uneven size (7 rows over 2
    ranks) differ from the tensor's; AccumulateGrad in torch 2.11 then copies the gradient into a
    tensor of the parameter's layout, which comes back Replicate (an all-gather per backward)."""

    @staticmethod
    def forward(ctx: Any, t: Any, grad_placements: tuple) -> torch.Tensor:
        ctx.mesh, ctx.grad_placements, ctx.shape, ctx.stride = t.device_mesh, grad_placements, t.shape, t.stride()
        local = _waited(t.to_local())
        return local.view_as(local)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, None]:
        from torch.distributed.tensor import DTensor

        grad = DTensor.from_local(
            _waited(grad), ctx.mesh, ctx.grad_placements, run_check=False, shape=ctx.shape, stride=ctx.stride
        )
        return grad, None


def call(op: str, args: tuple) -> Any:
    """Run ``op`` on its contract arguments ``args`` (positional, every one given), some of which
    may be DTensors: locally on each rank's shards where the declaration allows it."""
    from torch.distributed.tensor import DTensor, Partial, Replicate

    spec = CATALOGUE[op]
    named = dict(zip(_parameters(op), args))
    dtensors = {n: v for n, v in named.items() if isinstance(v, DTensor)}
    if not dtensors:  # another tensor subclass (a Parameter): the ordinary path
        if not isinstance(args[0], torch.Tensor):
            raise TypeError(f"{op}: {_parameters(op)[0]} must be a torch.Tensor; got {type(args[0]).__name__}")
        return resolve(op, args[0].device)(*args)
    sharding = spec.sharding
    if sharding is None:
        raise TypeError(
            f"{op}: does not take DTensor arguments (its declaration has no sharding); got DTensor "
            f"{', '.join(dtensors)}. Pass local tensors (DTensor.to_local()) or full ones (full_tensor())"
        )
    meshes = {v.device_mesh for v in dtensors.values()}
    if len(meshes) > 1:
        raise ValueError(f"{op}: DTensor arguments {', '.join(dtensors)} must share one device mesh; got {len(meshes)}")
    (mesh,) = meshes
    for name in dtensors:
        if name not in sharding.inputs and name not in sharding.replicated:
            raise TypeError(f"{op}: {name} must not be a DTensor (only {sharding.inputs + sharding.replicated} may be)")

    ref = next(iter(dtensors))
    across = sharding.across(named)
    sharded_mesh_dims: set[int] = set()
    for name in sharding.inputs:
        t = named[name]
        if not isinstance(t, DTensor):
            raise TypeError(
                f"{op}: {name} is a plain tensor while {ref} is a DTensor; pass every input of "
                f"{sharding.inputs} as a DTensor on one mesh (DTensor.from_local)"
            )
        whole = {d % t.ndim for d in across}
        for i, p in enumerate(t.placements):
            if p.is_replicate():
                continue
            if p.is_shard() and p.dim % t.ndim not in whole:
                sharded_mesh_dims.add(i)
                continue
            why = (
                "pending a reduction (the op is not linear)"
                if p.is_partial()
                else f"along dim {p.dim % t.ndim}, which the op computes across (dims {sorted(whole)} must be whole)"
                if p.is_shard()
                else "in a placement the op cannot run locally"
            )
            raise ValueError(
                f"{op}: {name} is {p!r} on mesh dim {i}, {why}; redistribute it first "
                f"({name}.redistribute(placements=...) with Replicate() or a Shard of another dim)"
            )
    if sharding.aligned:
        placements = {name: tuple(named[name].placements) for name in sharding.inputs}
        if len(set(placements.values())) > 1:
            got = ", ".join(f"{n}.placements={p}" for n, p in placements.items())
            raise ValueError(
                f"{op}: {' and '.join(sharding.inputs)} combine elementwise and must be sharded alike; got {got}"
            )

    local = list(args)
    names = _parameters(op)
    for name in sharding.replicated:
        t = named[name]
        if isinstance(t, DTensor):
            if not all(p.is_replicate() for p in t.placements):
                raise ValueError(
                    f"{op}: {name} must be replicated on every rank (a norm weight under SequenceParallel is); "
                    f"got placements {tuple(t.placements)}"
                )
            grad = tuple(Partial() if i in sharded_mesh_dims else Replicate() for i in range(mesh.ndim))
            local[names.index(name)] = _LocalShard.apply(t, grad)
        elif isinstance(t, torch.Tensor) and t.requires_grad and sharded_mesh_dims:
            # Its gradient would hold only this rank's rows' share, silently.
            raise TypeError(
                f"{op}: {name} requires grad but is a plain tensor while the inputs are sharded; make it a "
                f"replicated DTensor (distribute_tensor(..., placements=[Replicate()]), as SequenceParallel does)"
            )
    for name in sharding.inputs:
        t = named[name]
        local[names.index(name)] = _LocalShard.apply(t, tuple(t.placements))

    out = resolve(op, local[names.index(sharding.inputs[0])].device)(*local)
    outs = out if isinstance(out, tuple) else (out,)
    wrapped = []
    for o, source in zip(outs, sharding.outputs):
        like = named[source]
        if o.requires_grad:
            o = _WaitGrad.apply(o)
        if o.is_contiguous():
            stride = _contiguous_stride(like.shape)
        else:
            from torch.distributed.tensor._utils import compute_global_tensor_info

            stride = tuple(compute_global_tensor_info(o, mesh, like.placements)[1])
        wrapped.append(DTensor.from_local(o, mesh, like.placements, run_check=False, shape=like.shape, stride=stride))
    return tuple(wrapped) if isinstance(out, tuple) else wrapped[0]
