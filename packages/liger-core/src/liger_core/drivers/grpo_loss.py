"""grpo_loss's driver (`liger_core.ops.grpo_loss`): the autograd Function over a vendor's
cross-entropy kernels.

Forward, one completion at a time (its ``L`` rows of the ``(B, L + 1, V)`` logits are one 2-D
view): the vendor's cross-entropy rows (over the temperature: a float32 copy of one completion's
rows when ``temperature != 1``) give ``-logp`` and the rows' lse; then the outputs from the
``(B, L)`` log-probabilities, by autograd-tracked torch on those few values
(`grpo_loss.outputs_from_logps`, TRL's terms). Backward: ``dloss/dlogp`` through that small
graph, then the vendor's cross-entropy gradient with the per-row upstream ``-dlogp / T`` writes
``dlogp * (onehot - softmax) / T`` into the gradient (the logits' own memory with ``in_place``);
the last position's gradient is 0.
"""

from __future__ import annotations

from typing import Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.fused_linear_grpo import check_token_ids
from liger_core.ops.grpo_loss import OP_NAME, check_args, outputs_from_logps

PROTOCOL = 1


class GRPOLossKernels(Protocol):
    """What a vendor provides: cross-entropy over one completion's rows, no ignored id (every
    token id is checked to be in ``[0, vocab)`` before any launch)."""

    protocol: int

    def token_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """The contiguous ``(B, L)`` completion ids as the kernels read them (once per call)."""

    def plan(self, device: torch.device, backward: bool) -> object:
        """The vendor's state for one forward (``backward`` False) or backward pass on ``device``
        (its hardware facts, constant operands), handed to each kernel call of that pass; opaque
        to the driver."""

    def cross_entropy_rows(
        self, plan: object, logits: torch.Tensor, ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, lse)``, float32 per row, of ``(L, V)`` logits with unit column stride (float32
        when the temperature is not 1) and one completion's ``(L,)`` ids (a row of `token_ids`)."""

    def cross_entropy_grad(
        self,
        plan: object,
        logits: torch.Tensor,
        ids: torch.Tensor,
        lse: torch.Tensor,
        upstream: torch.Tensor,
        out: torch.Tensor,
    ) -> None:
        """Writes ``upstream * (softmax(logits) - onehot(ids))`` into ``out`` (``(L, V)``, unit
        column stride; it may be ``logits``' own memory): ``lse`` from `cross_entropy_rows`,
        ``upstream`` a contiguous float32 ``(L,)``."""


def _scaled(rows: torch.Tensor, temperature: float) -> torch.Tensor:
    """One completion's rows over the temperature (a float32 copy), or the rows themselves at 1."""
    return rows if temperature == 1.0 else rows.float() / temperature


def autograd_function(kernels: GRPOLossKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerGRPOLossFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "grpo_loss", PROTOCOL)

    def forward(
        ctx, logits, old_logp, ref_logp, completion_ids, advantages, completion_mask, temperature, beta, eps_low,
        eps_high, in_place, loss_type, max_completion_length, importance_sampling_level, reduce, sapo_temperature_pos,
        sapo_temperature_neg, vllm_is_ratio, delta, use_bias_correction_kl, num_items_in_batch, vespo_k_pos,
        vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
    ):  # fmt: skip
        check_args(
            logits, old_logp, ref_logp, completion_ids, advantages, completion_mask, temperature, beta, eps_low,
            eps_high, in_place, loss_type, max_completion_length, importance_sampling_level, reduce,
            sapo_temperature_pos, sapo_temperature_neg, vllm_is_ratio, delta, use_bias_correction_kl,
            num_items_in_batch, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
        )  # fmt: skip
        check_token_ids(completion_ids, logits.shape[-1], OP_NAME, "completion_ids")
        x = logits if logits.stride(-1) == 1 else logits.contiguous()
        n_seq, n = x.shape[0], x.shape[1] - 1
        ids = kernels.token_ids(completion_ids.contiguous())
        logp = torch.empty((n_seq, n), dtype=torch.float32, device=x.device)
        lse = torch.empty_like(logp)
        if n:
            plan = kernels.plan(x.device, False)
            for b in range(n_seq):
                row_loss, row_lse = kernels.cross_entropy_rows(plan, _scaled(x[b, :n], temperature), ids[b])
                torch.neg(row_loss, out=logp[b])
                lse[b] = row_lse
        need = ctx.needs_input_grad[0]
        with torch.enable_grad():
            leaf = logp.requires_grad_(need)
            loss, kl, clipped = outputs_from_logps(
                leaf, old_logp, ref_logp, advantages, completion_mask, eps_low, eps_high, beta, loss_type,
                max_completion_length, importance_sampling_level, reduce, sapo_temperature_pos, sapo_temperature_neg,
                vllm_is_ratio, delta, use_bias_correction_kl, num_items_in_batch, vespo_k_pos, vespo_lambda_pos,
                vespo_k_neg, vespo_lambda_neg,
            )  # fmt: skip
        # The small graph from the log-probabilities to the loss, replayed in backward.
        ctx.graph = (leaf, loss) if need else None
        # In place: a detached alias, so the gradient returned in its memory is a tensor of its own.
        ctx.save_for_backward(x.detach() if in_place else x, ids, lse)
        ctx.in_place, ctx.temperature = in_place, float(temperature)
        ctx.mark_non_differentiable(kl, clipped)
        ctx.set_materialize_grads(False)
        return loss.detach(), kl, clipped

    def backward(ctx, grad_loss, _grad_kl=None, _grad_clipped=None):
        if grad_loss is None or ctx.graph is None:
            return (None,) * 25
        leaf, loss = ctx.graph
        ctx.graph = None
        (d_logp,) = torch.autograd.grad(loss, leaf, grad_loss)
        x, ids, lse = ctx.saved_tensors
        n_seq, n = x.shape[0], x.shape[1] - 1
        temperature = ctx.temperature
        in_place = ctx.in_place and x.is_contiguous()
        grad = x if in_place else torch.empty_like(x, memory_format=torch.contiguous_format)
        if n:
            # CE's gradient is upstream * (softmax - onehot); d(loss)/d(logits) is d_logp * (onehot - softmax) / T.
            upstream = d_logp.float().div(-temperature)
            plan = kernels.plan(x.device, True)
            for b in range(n_seq):
                kernels.cross_entropy_grad(
                    plan, _scaled(x[b, :n], temperature), ids[b], lse[b], upstream[b].contiguous(), grad[b, :n]
                )
        grad[:, n].zero_()
        if in_place:
            # The kernel overwrote the logits behind autograd's back (see cross_entropy).
            torch.autograd.graph.increment_version(x)
        return (grad,) + (None,) * 24

    return build_function("LigerGRPOLossFunction", module, forward, backward)
