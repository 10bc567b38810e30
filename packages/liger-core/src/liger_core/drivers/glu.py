"""The gated activations' driver (`liger_core.ops.swiglu`, `.geglu`, `.fused_gate_up_swiglu`): their
autograd Functions over a vendor's kernels.

swiglu and geglu share one kernel pair (the activation a code, `SILU` or `GELU_TANH`);
fused_gate_up_swiglu reads both halves from one ``(rows, 2 * n_cols)`` tensor. Policies where the
vendors differed: inputs are made contiguous and keep their shape (XPU's and Ascend's; CUDA
flattened them, the same memory); after an in-place backward the overwritten tensors' version
counters are bumped (CUDA's), so a node that also saved them raises instead of reading gradients
as activations; fused_gate_up_swiglu goes in place only over a buffer of its own layout, saved as a
detached alias (all three). Ascend's hardware facts are the forwards' opaque ``state``.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.drivers._rows import as_rows
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.fused_gate_up_swiglu import check_args as check_fused_gate_up_swiglu_args
from liger_core.ops.geglu import check_args as check_geglu_args
from liger_core.ops.swiglu import check_args as check_swiglu_args

PROTOCOL = 1

# The activation codes the driver passes (a kernel may take them as its constexpr as they are).
SILU = 0
GELU_TANH = 1


class GLUKernels(Protocol):
    """What a vendor provides. ``activation`` is `SILU` or `GELU_TANH`; tensors may be empty."""

    protocol: int

    def forward(self, a: torch.Tensor, b: torch.Tensor, activation: int) -> tuple[torch.Tensor, Any]:
        """``(c, state)``: ``act(a) * b`` (act in float32, rounded to a's dtype before the
        multiply) for contiguous ``a`` and ``b`` of one shape and dtype, a new tensor of that
        shape; ``state``: whatever `backward` needs besides a and b (None if nothing)."""

    def backward(
        self, dc: torch.Tensor, a: torch.Tensor, b: torch.Tensor, activation: int, in_place: bool, state: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(grad_a, grad_b)`` of a's shape for contiguous ``dc``, ``a`` and ``b`` (the forward's);
        with ``in_place`` they are written over ``a`` and ``b`` and are those tensors."""

    def gate_up_forward(self, gate_up: torch.Tensor, activation: int) -> tuple[torch.Tensor, Any]:
        """``(c, state)``: ``act(gate) * up`` of ``(rows, 2 * n_cols)`` ``gate_up`` (unit column
        stride, any row stride; the gate half first), a new contiguous ``(rows, n_cols)`` tensor."""

    def gate_up_backward(
        self, dc: torch.Tensor, gate_up: torch.Tensor, activation: int, in_place: bool, state: Any
    ) -> torch.Tensor:
        """The gradient of ``gate_up`` (the forward's) for contiguous ``(rows, n_cols)`` ``dc``, one
        ``(rows, 2 * n_cols)`` tensor; with ``in_place`` (only asked of a contiguous gate_up)
        written over ``gate_up``, which it then is."""


def autograd_functions(kernels: GLUKernels, module: str) -> dict[str, type[torch.autograd.Function]]:
    """``{"swiglu": LigerSwiGLUFunction, "geglu": LigerGEGLUFunction, "fused_gate_up_swiglu":
    LigerFusedGateUpSwiGLUFunction}`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "glu", PROTOCOL)

    def glu_forward(ctx, a, b, in_place, activation):
        a_c, b_c = a.contiguous(), b.contiguous()
        c, ctx.state = kernels.forward(a_c, b_c, activation)
        ctx.save_for_backward(a_c, b_c)
        ctx.activation, ctx.in_place = activation, in_place
        return c.view(a.shape)

    def glu_backward(ctx, dc):
        a_c, b_c = ctx.saved_tensors
        da, db = kernels.backward(dc.contiguous(), a_c, b_c, ctx.activation, ctx.in_place, ctx.state)
        if ctx.in_place:
            # The kernel overwrote a and b behind autograd's back.
            torch.autograd.graph.increment_version((a_c, b_c))
        return da.view(a_c.shape), db.view(a_c.shape), None

    def swiglu_forward(ctx, a, b, in_place):
        check_swiglu_args(a, b, in_place)
        return glu_forward(ctx, a, b, in_place, SILU)

    def geglu_forward(ctx, a, b, in_place):
        check_geglu_args(a, b, in_place)
        return glu_forward(ctx, a, b, in_place, GELU_TANH)

    def gate_up_forward(ctx, gate_up, in_place):
        check_fused_gate_up_swiglu_args(gate_up, in_place)
        gu = as_rows(gate_up)
        c, ctx.state = kernels.gate_up_forward(gu, SILU)
        # In place only over a buffer of our own layout; saved as a detached alias, so the gradient
        # returned in its memory is a tensor of its own.
        in_place = in_place and gu.is_contiguous()
        ctx.save_for_backward(gu.detach() if in_place else gu)
        ctx.in_place, ctx.shape = in_place, gate_up.shape
        return c.view(*gate_up.shape[:-1], gu.shape[1] // 2)

    def gate_up_backward(ctx, dc):
        (gu,) = ctx.saved_tensors
        dc2d = dc.contiguous().view(gu.shape[0], gu.shape[1] // 2)
        dgu = kernels.gate_up_backward(dc2d, gu, SILU, ctx.in_place, ctx.state)
        if ctx.in_place:
            torch.autograd.graph.increment_version(gu)  # overwritten behind autograd's back
        return dgu.view(ctx.shape), None

    return {
        "swiglu": build_function("LigerSwiGLUFunction", module, swiglu_forward, glu_backward),
        "geglu": build_function("LigerGEGLUFunction", module, geglu_forward, glu_backward),
        "fused_gate_up_swiglu": build_function(
            "LigerFusedGateUpSwiGLUFunction", module, gate_up_forward, gate_up_backward
        ),
    }
