"""fused_moe's drivers (`liger_core.ops.fused_moe`, `fused_moe_clamped_swiglu`): the two autograd
Functions over a vendor's kernels.

The driver checks the arguments once, routes the selections on the device (`route`: sorted by
expert, cut into tiles of the plan's ``block_m`` rows, bad expert ids clamped) and checks the
deferred bad-id count (`liger_core.ops._losses.PendingBadCount`) only after the forward's kernels
are queued, so the host never idles the device. It saves the inputs as the vendor read them, the
gate-up output ``pre`` and the routing for backward, which may overwrite ``pre`` with its own
gradient when autograd frees the graph (`backward_frees_graph`). The clamped variant's bias
gradients are liger-core's (`gate_up_bias_grad`, `down_bias_backward`).

The vendor provides its launch plan (opaque to the driver but for ``block_m``), the layout its
kernels read the activations and expert weights in, and the grouped forward and backward.

Under torch.compile each Function's `SavedForm` serves `liger_core.compile`'s two custom ops: the
forward returns ``pre`` and the routing beside the output; the backward takes them and re-derives
the rest from the inputs (plan, the kernels' input layout, epilogue: host work, views or the
forward's own copies), so the compiled backward runs the backward kernels only, never the forward's
grouped GEMMs again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.fused_moe import Routing, backward_frees_graph, check_args, max_tiles, route
from liger_core.ops.fused_moe_clamped_swiglu import (
    GPT_OSS_ALPHA,
    GPT_OSS_LIMIT,
    GPT_OSS_UP_OFFSET,
    down_bias_backward,
    epilogue_args,
    gate_up_bias_grad,
)
from liger_core.ops.fused_moe_clamped_swiglu import OP_NAME as CLAMPED_OP
from liger_core.ops.fused_moe_clamped_swiglu import check_args as check_clamped_args

PROTOCOL = 1


class FusedMoEKernels(Protocol):
    """What a vendor provides."""

    protocol: int

    def plan(
        self, hidden_states: torch.Tensor, intermediate: int, gate_up_bias: bool, down_bias: bool, clamped: bool
    ) -> Any:
        """The launch plan for these activations (dtype, device, hidden size), the intermediate
        size, the biases present and the activation: an object with ``block_m`` (the rows of a
        routing tile) that the driver hands back to `forward` and `backward` untouched."""

    def inputs(
        self, hidden_states: torch.Tensor, gate_up_proj: torch.Tensor, down_proj: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(x, w_gate_up, w_down)``: the activations (tokens, H) and the expert weights (E, 2I, H)
        and (E, H, I) as the kernels read them (a copy only where needed); the driver saves them."""

    def forward(
        self,
        x: torch.Tensor,
        w_gate_up: torch.Tensor,
        w_down: torch.Tensor,
        weights: torch.Tensor,
        r: Routing,
        plan: Any,
        epilogue: dict,
        gate_up_bias: torch.Tensor | None,
        down_bias: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(out, pre)``: the op's output (tokens, H) and each sorted row's gate and up (biases
        added), the backward's input. weights: contiguous (tokens, K); biases contiguous;
        ``epilogue``: the activation's kernel arguments (`epilogue_args`)."""

    def backward(
        self,
        dy: torch.Tensor,
        x: torch.Tensor,
        w_gate_up: torch.Tensor,
        w_down: torch.Tensor,
        weights: torch.Tensor,
        pre: torch.Tensor,
        r: Routing,
        plan: Any,
        epilogue: dict,
        overwrite_pre: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(grad_x, grad_gate_up, grad_down, ds, dpre)``: ds the routing weights' float32
        gradient (tokens, K), dpre the gradient of ``pre`` as (rows, 2I) (written over ``pre``
        when ``overwrite_pre``). dy: the incoming gradient as autograd gives it."""


def autograd_functions(kernels: FusedMoEKernels, module: str) -> dict[str, type[torch.autograd.Function]]:
    """``{"fused_moe": LigerFusedMoEFunction, "fused_moe_clamped_swiglu":
    LigerFusedMoEClampedSwiGLUFunction}`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "fused_moe", PROTOCOL)

    def moe_prepare(hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights):
        """Host work and the kernels' view of the inputs: ``(plan, epilogue, x, w_gate_up, w_down, weights)``."""
        intermediate = down_proj.shape[-1]
        plan = kernels.plan(hidden_states, intermediate, False, False, False)
        x, w_gate_up, w_down = kernels.inputs(hidden_states, gate_up_proj, down_proj)
        return plan, epilogue_args(intermediate), x, w_gate_up, w_down, top_k_weights.contiguous()

    def moe_forward(ctx, hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights):
        check_args(hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights)
        plan, ctx.epilogue, x, w_gate_up, w_down, weights = moe_prepare(
            hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights
        )
        r, expert_ids = route(top_k_index, gate_up_proj.shape[0], plan.block_m)
        out, pre = kernels.forward(x, w_gate_up, w_down, weights, r, plan, ctx.epilogue, None, None)
        # The bad-id count reached the host behind the kernels just queued (no idle device).
        expert_ids.check()
        ctx.save_for_backward(x, w_gate_up, w_down, weights, pre, *vars(r).values())
        ctx.plan = plan
        return out

    def moe_backward(ctx, dy):
        x, w_gate_up, w_down, weights, pre, *routing = ctx.saved_tensors
        dx, d_gate_up, d_down, ds, _ = kernels.backward(
            dy, x, w_gate_up, w_down, weights, pre, Routing(*routing), ctx.plan, ctx.epilogue, _overwrite_pre(ctx)
        )
        return dx, d_gate_up, d_down, None, ds.to(weights.dtype)

    def clamped_forward(
        ctx, hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights, gate_up_bias=None, down_bias=None,
        limit=GPT_OSS_LIMIT, alpha=GPT_OSS_ALPHA, up_offset=GPT_OSS_UP_OFFSET, interleaved=True,
    ):  # fmt: skip
        check_clamped_args(
            hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights, gate_up_bias, down_bias,
            limit, alpha, up_offset, interleaved,
        )  # fmt: skip
        plan, ctx.epilogue, x, w_gate_up, w_down, weights, b_gate_up, b_down = clamped_prepare(
            hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights, gate_up_bias, down_bias,
            limit, alpha, up_offset, interleaved,
        )  # fmt: skip
        r, expert_ids = route(top_k_index, gate_up_proj.shape[0], plan.block_m, CLAMPED_OP)
        out, pre = kernels.forward(x, w_gate_up, w_down, weights, r, plan, ctx.epilogue, b_gate_up, b_down)
        expert_ids.check()
        ctx.save_for_backward(x, w_gate_up, w_down, weights, pre, b_gate_up, b_down, *vars(r).values())
        ctx.plan = plan
        return out

    def clamped_prepare(
        hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights, gate_up_bias=None, down_bias=None,
        limit=GPT_OSS_LIMIT, alpha=GPT_OSS_ALPHA, up_offset=GPT_OSS_UP_OFFSET, interleaved=True,
    ):  # fmt: skip
        """As `moe_prepare`, with the biases as the kernels read them: one row per tile (gate-up) or
        per sorted row (the gather-sum)."""
        intermediate = down_proj.shape[-1]
        plan = kernels.plan(hidden_states, intermediate, gate_up_bias is not None, down_bias is not None, True)
        x, w_gate_up, w_down = kernels.inputs(hidden_states, gate_up_proj, down_proj)
        b_gate_up = None if gate_up_bias is None else gate_up_bias.contiguous()
        b_down = None if down_bias is None else down_bias.contiguous()
        epilogue = epilogue_args(intermediate, limit, alpha, up_offset, interleaved, clamped=True)
        return plan, epilogue, x, w_gate_up, w_down, top_k_weights.contiguous(), b_gate_up, b_down

    def clamped_backward(ctx, dy):
        x, w_gate_up, w_down, weights, pre, b_gate_up, b_down, *routing = ctx.saved_tensors
        r = Routing(*routing)
        dx, d_gate_up, d_down, ds, dpre = kernels.backward(
            dy, x, w_gate_up, w_down, weights, pre, r, ctx.plan, ctx.epilogue, _overwrite_pre(ctx)
        )
        d_b_gate_up = d_b_down = None
        if b_gate_up is not None:
            d_b_gate_up = gate_up_bias_grad(dpre, r, b_gate_up)
        if b_down is not None:
            d_b_down, ds_bias = down_bias_backward(dy, b_down, r, weights)
            ds = ds + ds_bias
        return dx, d_gate_up, d_down, None, ds.to(weights.dtype), d_b_gate_up, d_b_down, None, None, None, None

    functions = {
        "fused_moe": build_function("LigerFusedMoEFunction", module, moe_forward, moe_backward),
        "fused_moe_clamped_swiglu": build_function(
            "LigerFusedMoEClampedSwiGLUFunction", module, clamped_forward, clamped_backward
        ),
    }
    functions["fused_moe"].saved_form = SavedForm(functions["fused_moe"], moe_prepare, moe_backward, 0)
    functions["fused_moe_clamped_swiglu"].saved_form = SavedForm(
        functions["fused_moe_clamped_swiglu"], clamped_prepare, clamped_backward, 2
    )
    return functions


def _overwrite_pre(ctx: Any) -> bool:
    """Whether the backward may write dpre over ``pre``: when autograd frees the graph after it, and never
    under `SavedForm` (``pre`` is then a compiled graph's buffer)."""
    return getattr(ctx, "overwrite_pre", None) is not False and backward_frees_graph()


_ROUTING_FIELDS = tuple(f.name for f in dataclasses.fields(Routing))


class SavedForm:
    """A fused_moe Function as compiled code runs it (`liger_core.compile`'s saved-state custom ops).

    ``ctx`` is the caller's stand-in for autograd's (`liger_core.compile.RecordingCtx`).

    - ``forward(ctx, *args) -> (out, saved)``: the Function's own forward; ``saved`` is ``pre`` and the
      routing's tensors (new buffers, so none aliases an input).
    - ``fake_saved(*args)``: their shapes and dtypes from the inputs' alone (``max_tiles`` tiles).
    - ``backward(ctx, dy, saved, *args)``: the Function's own backward on ``ctx`` rebuilt from the inputs
      (the prepare step: plan, epilogue, the inputs as the kernels read them) and ``saved``, with
      ``pre`` never overwritten; the forward's kernels do not run.
    """

    def __init__(self, function: type[torch.autograd.Function], prepare: Any, backward: Any, n_biases: int) -> None:
        self.function, self.prepare, self._backward, self.n_biases = function, prepare, backward, n_biases

    def forward(self, ctx: Any, *args: Any) -> tuple[torch.Tensor, list[torch.Tensor]]:
        out = self.function.forward(ctx, *args)
        pre = ctx.saved_tensors[4]
        routing = list(ctx.saved_tensors[5 + self.n_biases :])
        return out, [pre, *routing]

    def fake_saved(self, *args: Any) -> list[torch.Tensor]:
        hidden_states, gate_up_proj, down_proj, top_k_index = args[:4]
        plan = self.prepare(*args)[0]
        n_slots, n_experts = top_k_index.numel(), gate_up_proj.shape[0]
        tiles = max_tiles(n_slots, n_experts, plan.block_m)
        shapes = {
            "token_of_row": n_slots,
            "slot_of_row": n_slots,
            "row_of_slot": n_slots,
            "expert_offsets": n_experts + 1,
            "tile_expert": tiles,
            "tile_row_start": tiles,
            "n_tiles": 1,
            "expert_of_row": n_slots,
        }
        if set(shapes) != set(_ROUTING_FIELDS):
            raise RuntimeError(f"fused_moe SavedForm: Routing's fields are {_ROUTING_FIELDS}, not {sorted(shapes)}")
        device = hidden_states.device
        pre = torch.empty((n_slots, 2 * down_proj.shape[-1]), dtype=hidden_states.dtype, device=device)
        return [pre, *(torch.empty((shapes[f],), dtype=torch.int32, device=device) for f in _ROUTING_FIELDS)]

    def backward(self, ctx: Any, dy: torch.Tensor, saved: Sequence[torch.Tensor], *args: Any) -> tuple:
        """The Function's backward's return value (one entry per argument)."""
        ctx.plan, ctx.epilogue, x, w_gate_up, w_down, weights, *biases = self.prepare(*args)
        ctx.overwrite_pre = False
        pre, *routing = saved
        ctx.save_for_backward(x, w_gate_up, w_down, weights, pre, *biases, *routing)
        return self._backward(ctx, dy)
