"""Fused linear GRPO for NVIDIA GPUs: whole sequences a chunk at a time through
`_cross_entropy`'s kernels, the loss itself from liger-core's shared formula.

Per chunk of sequences (at most ``hardware.FLGRPO_CHUNK_ELEMENTS`` float32 logits): the logits as
float32 products of the inputs (plus the bias, over the temperature), cross-entropy's forward
for the sampled tokens' ``-logp`` and the rows' lse, then liger-core's `chunk_objective` on those
``(sequences, T)`` log-probabilities: the chunk's share of the loss and metrics and, by autograd
on those few values, ``dloss/dlogp``. Cross-entropy's gradient kernel with the per-row upstream
``-dlogp / T`` writes ``dlogp * (onehot - softmax) / T`` over the chunk's logits, then
``grad_x_c = G @ W``, ``grad_W += G^T @ x_c`` and ``grad_b += sum(G)``. A whole sequence per
chunk because sequence-level importance weights and VESPO's gamma weights sum over a sequence;
the normalisers come first from the full masks (`token_weights`). Gradients are computed in the
forward; backward rescales them only if the incoming gradient is not 1.
"""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.ops.fused_linear_grpo import check_args, check_token_ids, chunk_objective, options, token_weights
from liger_ops_cuda import hardware
from liger_ops_cuda._cross_entropy import cross_entropy_backward, cross_entropy_forward
from liger_ops_cuda._tiling import accumulate_weight_grad, scale_unless_one
from liger_ops_cuda.fused_linear_jsd import _logits_fp32

# The kernels' ignore_index: never a token id (every id is checked to be in [0, vocab)).
NO_IGNORED_ID = -1


def plan_sequences(n_seq: int, seq_len: int, vocab: int) -> int:
    """Sequences per chunk: their float32 logits within FLGRPO_CHUNK_ELEMENTS, at least one."""
    return max(1, min(n_seq, hardware.FLGRPO_CHUNK_ELEMENTS // max(seq_len * vocab, 1)))


def _rows(t: torch.Tensor | None, s: int, e: int) -> torch.Tensor | None:
    return None if t is None else t[s:e]


@implements("fused_linear_grpo")
class LigerFusedLinearGRPOFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, input, weight, selected_token_ids, attention_mask, advantages, bias, ref_per_token_logps,
        old_per_token_logps, vllm_is_ratio, num_items_in_batch, beta, epsilon_low, epsilon_high, loss_type,
        max_completion_length, importance_sampling_level, sapo_temperature_pos, sapo_temperature_neg, temperature,
        delta, use_bias_correction_kl, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
    ):  # fmt: skip
        check_args(
            input, weight, selected_token_ids, attention_mask, advantages, bias, ref_per_token_logps,
            old_per_token_logps, vllm_is_ratio, num_items_in_batch, beta, epsilon_low, epsilon_high, loss_type,
            max_completion_length, importance_sampling_level, sapo_temperature_pos, sapo_temperature_neg,
            temperature, delta, use_bias_correction_kl, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
        )  # fmt: skip
        vocab = weight.shape[0]
        check_token_ids(selected_token_ids, vocab)
        opts = options(
            beta, epsilon_low, epsilon_high, loss_type, importance_sampling_level, sapo_temperature_pos,
            sapo_temperature_neg, delta, use_bias_correction_kl, vespo_k_pos, vespo_lambda_pos, vespo_k_neg,
            vespo_lambda_neg,
        )  # fmt: skip
        n_seq, seq_len, hidden = input.shape
        x = input.reshape(n_seq * seq_len, hidden).contiguous()
        w = weight.contiguous()
        ids = selected_token_ids.reshape(-1).contiguous()
        weights, metric_weights, seq_weight = token_weights(
            attention_mask, loss_type, max_completion_length, num_items_in_batch, torch.float32
        )
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = bias is not None and ctx.needs_input_grad[5]
        want = need_x or need_w or need_b
        gx = torch.empty_like(x) if need_x else None
        gw = torch.empty_like(w) if need_w else None
        gb = torch.zeros(vocab, dtype=torch.float32, device=x.device) if need_b else None
        loss = torch.zeros((), dtype=torch.float32, device=x.device)
        metrics = torch.zeros(5, dtype=torch.float32, device=x.device)
        # [scale of the loss terms, of the z-loss terms]: the upstream carries the whole factor.
        scales = torch.tensor([1.0, 0.0], dtype=torch.float32, device=x.device)
        step = plan_sequences(n_seq, seq_len, vocab)
        first = True
        for s in range(0, n_seq, step):
            e = min(s + step, n_seq)
            r0, r1 = s * seq_len, e * seq_len
            logits = _logits_fp32(x[r0:r1], w)
            if bias is not None:
                logits += bias.float()
            if temperature != 1.0:
                logits.div_(temperature)
            target = ids[r0:r1]
            rows = cross_entropy_forward(logits, target, None, None, None, NO_IGNORED_ID, 0.0, 0.0, None, want_z=False)
            with torch.enable_grad():
                logp = rows.loss.neg().view(e - s, seq_len).requires_grad_(want)
                part, part_metrics = chunk_objective(
                    logp, attention_mask[s:e], advantages[s:e], _rows(ref_per_token_logps, s, e),
                    _rows(old_per_token_logps, s, e), _rows(vllm_is_ratio, s, e), weights[s:e],
                    metric_weights[s:e], seq_weight, opts,
                )  # fmt: skip
                d_logp = torch.autograd.grad(part, logp)[0] if want else None
            loss += part.detach()
            metrics += part_metrics
            if want:
                # CE's gradient is upstream * (softmax - onehot); d(loss)/d(logits) is
                # d_logp * (onehot - softmax) / T.
                upstream = d_logp.reshape(-1).div(-temperature).contiguous()
                cross_entropy_backward(
                    logits, target, None, None, None, rows.lse, logits, upstream, NO_IGNORED_ID, 0.0, 0.0, None, scales
                )
                g = logits.to(x.dtype)
                if need_x:
                    torch.mm(g, w, out=gx[r0:r1])
                if need_w:
                    accumulate_weight_grad(gw, g, x[r0:r1], first)
                if need_b:
                    gb += logits.sum(0)
            first = False
        if need_w and first:
            gw.zero_()  # no sequences
        ctx.save_for_backward(gx, gw, gb)
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.input_shape = input.shape
        ctx.mark_non_differentiable(metrics)
        ctx.set_materialize_grads(False)
        return loss, metrics

    @staticmethod
    def backward(ctx, grad_loss, _grad_metrics=None):
        if grad_loss is None:
            return (None,) * 25
        gx, gw, gb = ctx.saved_tensors
        up = grad_loss.float().reshape(1)
        scale_unless_one(gx, up)
        scale_unless_one(gw, up)
        if gb is not None:
            gb = (gb * up).to(ctx.bias_dtype)
        gx = None if gx is None else gx.view(ctx.input_shape)
        return (gx, gw, None, None, None, gb) + (None,) * 19
