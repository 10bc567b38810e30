"""Shared check for vendor backends: fused_moe and fused_moe_clamped_swiglu (GPT-OSS's experts,
stored transposed like Llama 4's) read their expert weights where they are. A
contiguous ``gate_up_proj`` / ``down_proj``, or the transpose of a contiguous tensor (Llama 4
stores ``(E, H, 2I)`` and ``(E, I, H)`` and hands over transposed views), is saved for the
backward as itself, never as a copy (a Llama-4-Scout layer's experts are about 4 GB in bf16), and
its gradient comes back in the weight's own strides, so autograd copies nothing either.

The backward may also write the gate-up output's gradient over the buffer the op saved, but only
when autograd frees the graph after it: under ``retain_graph`` a second backward must give the
first one's gradients, bit for bit (`test_fused_moe_backward_twice_with_retained_graph`).

The values are the conformance suite's business (its fused_moe samples include both layouts);
this checks the memory behaviour, which the contract promises but the values cannot show. Widths
are whole 32-byte units, so no backend needs padded rows. A vendor package runs it from its tests:

    # tests/test_fused_moe.py
    from liger_core.conformance.weights_in_place import *  # noqa: F403
"""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance.check import make_args, op_callable
from liger_core.interface import CATALOGUE

__all__ = ["test_fused_moe_backward_twice_with_retained_graph", "test_fused_moe_reads_weights_in_place"]

WEIGHTS = ("gate_up_proj", "down_proj")


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def check_weights_in_place(backend, args: dict, op: str = "fused_moe") -> None:
    """One ``op`` call on ``args`` (weights requiring grad): every saved tensor shaped like a
    weight (or like its transpose) is that weight's storage, and each weight's incoming gradient
    has the weight's strides."""
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    grad_strides: dict[str, tuple[int, ...]] = {}
    for name in WEIGHTS:
        args[name].register_hook(lambda g, name=name: grad_strides.__setitem__(name, g.stride()))
    call = op_callable(backend, op)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = call(*CATALOGUE[op].bind(args).values())
    out.sum().backward()
    for name in WEIGHTS:
        w = args[name]
        shapes = (w.shape, w.transpose(1, 2).shape)
        copies = [t for t in saved if t.shape in shapes and _storage(t) != _storage(w)]
        assert not copies, (
            f"{op} saved {len(copies)} copy(ies) of {name} (strides {w.stride()}) for the backward; "
            "it must save the weight itself"
        )
        assert grad_strides.get(name) == w.stride(), (
            f"{op}'s gradient of {name} has strides {grad_strides.get(name)}; the weight's are {w.stride()} "
            "(autograd then copies it into the weight's layout)"
        )


@pytest.mark.parametrize("op", ("fused_moe", "fused_moe_clamped_swiglu"))
@pytest.mark.parametrize("transposed_weights", (False, True), ids=("contiguous", "transposed"))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_fused_moe_reads_weights_in_place(conformance_backend, conformance_device, transposed_weights, dtype, op):
    # Weights far larger than any activation: 4 experts of 64 x 64 and 64 x 32 against 7 tokens.
    args = make_args(
        op, conformance_device, tokens=7, hidden=64, intermediate=32, experts=4, top_k=2, dtype=dtype,
        transposed_weights=transposed_weights, seed=11,
    )  # fmt: skip
    for name in WEIGHTS:
        assert args[name].transpose(1, 2).is_contiguous() == transposed_weights
        args[name].requires_grad_(True)
    args["hidden_states"].requires_grad_(True)
    check_weights_in_place(conformance_backend, args, op)


@pytest.mark.parametrize("op", ("fused_moe", "fused_moe_clamped_swiglu"))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_fused_moe_backward_twice_with_retained_graph(conformance_backend, conformance_device, dtype, op):
    """Two backwards of one graph (``retain_graph=True``), then a third that frees it: the same
    gradients each time, so no backward overwrote a saved buffer another one still reads."""
    args = make_args(
        op, conformance_device, tokens=9, hidden=40, intermediate=24, experts=3, top_k=2, dtype=dtype, seed=12
    )
    inputs = [args[name] for name in ("hidden_states", *WEIGHTS, "top_k_weights")]
    inputs += [args[name] for name in ("gate_up_bias", "down_bias") if args.get(name) is not None]
    for t in inputs:
        t.requires_grad_(True)
    out = op_callable(conformance_backend, op)(*CATALOGUE[op].bind(args).values())
    dy = torch.randn(out.shape, generator=torch.Generator().manual_seed(13)).to(out.device, out.dtype)
    runs = [torch.autograd.grad(out, inputs, dy, retain_graph=retain) for retain in (True, True, False)]
    for run in runs[1:]:
        for first, again in zip(runs[0], run, strict=True):
            assert torch.equal(first, again), f"{op}: a backward of a retained graph changed the gradients"
