"""The GRPO loss from logits for NVIDIA GPUs: `_cross_entropy`'s kernels give each completion's
log-probabilities and, in backward, the logits' gradient; the loss between them is liger-core's
shared formula (`grpo_loss.outputs_from_logps`, TRL's terms).

Forward, one completion at a time (its ``L`` rows of the ``(B, L + 1, V)`` logits are one 2-D view):
cross-entropy's forward on the rows (over the temperature: a float32 copy of one completion's
rows when ``temperature != 1``) gives ``-logp`` and the rows' lse; then the outputs from the
``(B, L)`` log-probabilities, by autograd-tracked torch on those few values. Backward:
``dloss/dlogp`` through that small graph, then cross-entropy's gradient kernel with the per-row
upstream ``-dlogp / T`` writes ``dlogp * (onehot - softmax) / T`` into the gradient (the logits'
own memory with ``in_place``); the last position's gradient is 0.
"""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.ops.fused_linear_grpo import check_token_ids
from liger_core.ops.grpo_loss import OP_NAME, check_args, outputs_from_logps
from liger_ops_cuda._cross_entropy import cross_entropy_backward, cross_entropy_forward

# The kernels' ignore_index: never a token id (every id is checked to be in [0, vocab)).
NO_IGNORED_ID = -1


def _scaled(rows: torch.Tensor, temperature: float) -> torch.Tensor:
    """One completion's rows over the temperature (a float32 copy), or the rows themselves at 1."""
    return rows if temperature == 1.0 else rows.float() / temperature


@implements("grpo_loss")
class LigerGRPOLossFunction(torch.autograd.Function):
    @staticmethod
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
        ids = completion_ids.contiguous()
        logp = torch.empty((n_seq, n), dtype=torch.float32, device=x.device)
        lse = torch.empty_like(logp)
        if n:
            for b in range(n_seq):
                rows = cross_entropy_forward(
                    _scaled(x[b, :n], temperature), ids[b], None, None, None, NO_IGNORED_ID, 0.0, 0.0, None,
                    want_z=False,
                )  # fmt: skip
                torch.neg(rows.loss, out=logp[b])
                lse[b] = rows.lse
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

    @staticmethod
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
        # [scale of the loss terms, of the z-loss terms]: the upstream carries the whole factor.
        scales = torch.tensor([1.0, 0.0], dtype=torch.float32, device=x.device)
        if n:
            # CE's gradient is upstream * (softmax - onehot); d(loss)/d(logits) is d_logp * (onehot - softmax) / T.
            upstream = d_logp.float().div(-temperature)
            for b in range(n_seq):
                cross_entropy_backward(
                    _scaled(x[b, :n], temperature), ids[b], None, None, None, lse[b], grad[b, :n],
                    upstream[b].contiguous(), NO_IGNORED_ID, 0.0, 0.0, None, scales,
                )  # fmt: skip
        grad[:, n].zero_()
        if in_place:
            # The kernel overwrote the logits behind autograd's back (see cross_entropy).
            torch.autograd.graph.increment_version(x)
        return (grad,) + (None,) * 24
