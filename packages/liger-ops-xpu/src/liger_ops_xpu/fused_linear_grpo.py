"""Fused linear GRPO for Intel GPUs: whole sequences a chunk at a time through
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

from liger_ops_xpu import hardware
from liger_ops_xpu._cross_entropy import CEOptions, cross_entropy_backward, cross_entropy_forward
from liger_ops_xpu._matmul import matmul_nt_f32

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
        gw = torch.zeros_like(w) if need_w else None
        gb = torch.zeros(vocab, dtype=torch.float32, device=x.device) if need_b else None
        loss = torch.zeros((), dtype=torch.float32, device=x.device)
        metrics = torch.zeros(5, dtype=torch.float32, device=x.device)
        ce = CEOptions(NO_IGNORED_ID, 0.0, 0.0, "none", None)
        step = plan_sequences(n_seq, seq_len, vocab)
        for s in range(0, n_seq, step):
            e = min(s + step, n_seq)
            r0, r1 = s * seq_len, e * seq_len
            logits = matmul_nt_f32(x[r0:r1], w)
            if bias is not None:
                logits += bias.float()
            if temperature != 1.0:
                logits.div_(temperature)
            target = ids[r0:r1]
            row_loss, _, lse = cross_entropy_forward(logits, target, None, ce, float(vocab))
            with torch.enable_grad():
                logp = row_loss.neg().view(e - s, seq_len).requires_grad_(want)
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
                # Loss scale 1 (the upstream carries the whole factor), no z-loss.
                cross_entropy_backward(logits, target, None, lse, upstream, logits, ce, float(vocab), 1.0, 0.0)
                g = logits.to(x.dtype)
                if need_x:
                    torch.mm(g, w, out=gx[r0:r1])
                if need_w:
                    gw += g.t() @ x[r0:r1]
                if need_b:
                    gb += logits.sum(0)
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
        up = grad_loss.float()
        gx = None if gx is None else (gx * up).to(gx.dtype).view(ctx.input_shape)
        gw = None if gw is None else (gw * up).to(gw.dtype)
        gb = None if gb is None else (gb * up).to(ctx.bias_dtype)
        return (gx, gw, None, None, None, gb) + (None,) * 19
