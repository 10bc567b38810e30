"""Fused linear preference losses (fused_linear_dpo, fused_linear_orpo, fused_linear_cpo,
fused_linear_simpo) for NVIDIA GPUs: liger-core's chunked orchestration
(`liger_core.ops._preference.fused_linear_pairs`: one pass over chunks of whole pairs, the logits
matmul never recomputed) over `_cross_entropy`'s row kernels.

Per chunk, the forward kernel gives each token's ``-log p(target)`` (cross-entropy without
z-loss or smoothing) and lse; once the pair formula has turned the sequences' sums into per-token
coefficients ``c_t``, cross-entropy's gradient kernel with per-row upstream ``-c_t`` overwrites the
chunk's logits with ``c_t (onehot - softmax)``, the gradient of the loss w.r.t. the logits.
"""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.ops import _preference as P
from liger_core.ops import fused_linear_cpo as cpo
from liger_core.ops import fused_linear_dpo as dpo
from liger_core.ops import fused_linear_orpo as orpo
from liger_core.ops import fused_linear_simpo as simpo
from liger_ops_cuda import hardware
from liger_ops_cuda._cross_entropy import cross_entropy_backward, cross_entropy_forward


class TokenLogps:
    """`_preference.TokenLogpKernels` on the cross-entropy kernels."""

    def forward(self, logits, target, ignore_index):
        rows = cross_entropy_forward(logits, target, None, None, None, ignore_index, 0.0, 0.0, None, want_z=False)
        return rows.loss.neg_(), rows.lse

    def backward(self, logits, target, lse, coef, ignore_index):
        # Unit reduction scales: the coefficients already hold the pair formula's derivative.
        scales = torch.ones(2, dtype=torch.float32, device=logits.device)
        cross_entropy_backward(
            logits, target, None, None, None, lse, logits, coef.neg(), ignore_index, 0.0, 0.0, None, scales
        )


KERNELS = TokenLogps()


@implements("fused_linear_dpo")
class LigerFusedLinearDPOFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, input, weight, target, bias, ref_input, ref_weight, ref_bias, ignore_index, beta, compute_nll_loss,
        use_ref_model, average_log_prob, loss_type, label_smoothing, discopop_tau, alpha,
    ):  # fmt: skip
        dpo.check_args(
            input, weight, target, bias, ref_input, ref_weight, ref_bias, ignore_index, beta, compute_nll_loss,
            use_ref_model, average_log_prob, loss_type, label_smoothing, discopop_tau, alpha,
        )  # fmt: skip
        result, *grads = P.fused_linear_pairs(
            KERNELS, input, weight, target, bias, ref_input, ref_weight, ref_bias, ignore_index,
            dpo.dpo_pair_loss(loss_type, beta, label_smoothing, discopop_tau), average_log_prob,
            alpha if compute_nll_loss else 0.0, use_ref_model, hardware.PREFERENCE_CHUNK_ELEMENTS,
            *P.needs_grads(ctx, bias), dpo.OP_NAME,
        )  # fmt: skip
        return P.function_outputs(ctx, result, grads)

    @staticmethod
    def backward(ctx, grad_loss, *unused):
        grad_x, grad_w, grad_b = P.function_grads(ctx, grad_loss)
        return (grad_x, grad_w, None, grad_b) + (None,) * 12


@implements("fused_linear_orpo")
class LigerFusedLinearORPOFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, target, bias, ignore_index, beta, compute_nll_loss):
        orpo.check_args(input, weight, target, bias, ignore_index, beta, compute_nll_loss)
        result, *grads = P.fused_linear_pairs(
            KERNELS, input, weight, target, bias, None, None, None, ignore_index, orpo.orpo_pair_loss(beta), True,
            1.0 if compute_nll_loss else 0.0, False, hardware.PREFERENCE_CHUNK_ELEMENTS, *P.needs_grads(ctx, bias),
            orpo.OP_NAME,
        )  # fmt: skip
        return P.function_outputs(ctx, result, grads)

    @staticmethod
    def backward(ctx, grad_loss, *unused):
        grad_x, grad_w, grad_b = P.function_grads(ctx, grad_loss)
        return (grad_x, grad_w, None, grad_b) + (None,) * 3


@implements("fused_linear_cpo")
class LigerFusedLinearCPOFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, input, weight, target, bias, ignore_index, beta, alpha, label_smoothing, compute_nll_loss,
        average_log_prob, loss_type, simpo_gamma,
    ):  # fmt: skip
        cpo.check_args(
            input, weight, target, bias, ignore_index, beta, alpha, label_smoothing, compute_nll_loss,
            average_log_prob, loss_type, simpo_gamma,
        )  # fmt: skip
        result, *grads = P.fused_linear_pairs(
            KERNELS, input, weight, target, bias, None, None, None, ignore_index,
            cpo.cpo_pair_loss(loss_type, beta, label_smoothing, simpo_gamma), average_log_prob,
            alpha if compute_nll_loss else 0.0, False, hardware.PREFERENCE_CHUNK_ELEMENTS,
            *P.needs_grads(ctx, bias), cpo.OP_NAME,
        )  # fmt: skip
        return P.function_outputs(ctx, result, grads)

    @staticmethod
    def backward(ctx, grad_loss, *unused):
        grad_x, grad_w, grad_b = P.function_grads(ctx, grad_loss)
        return (grad_x, grad_w, None, grad_b) + (None,) * 8


@implements("fused_linear_simpo")
class LigerFusedLinearSimPOFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, target, bias, ignore_index, beta, alpha, label_smoothing, compute_nll_loss, gamma):
        simpo.check_args(
            input, weight, target, bias, ignore_index, beta, alpha, label_smoothing, compute_nll_loss, gamma
        )
        result, *grads = P.fused_linear_pairs(
            KERNELS, input, weight, target, bias, None, None, None, ignore_index,
            cpo.cpo_pair_loss("simpo", beta, label_smoothing, gamma), True, alpha if compute_nll_loss else 0.0,
            False, hardware.PREFERENCE_CHUNK_ELEMENTS, *P.needs_grads(ctx, bias), simpo.OP_NAME,
        )  # fmt: skip
        return P.function_outputs(ctx, result, grads)

    @staticmethod
    def backward(ctx, grad_loss, *unused):
        grad_x, grad_w, grad_b = P.function_grads(ctx, grad_loss)
        return (grad_x, grad_w, None, grad_b) + (None,) * 6


# -- fused_linear_kto: the unpaired loss (liger-core's `_preference.fused_linear_unpaired`) -------


@implements("fused_linear_kto")
class LigerFusedLinearKTOFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, input, weight, target, preference_labels, bias, ref_input, ref_weight, ref_bias, kl, ignore_index, beta,
        use_ref_model, average_log_prob, desirable_weight, undesirable_weight,
    ):  # fmt: skip
        # Imported here so that this op's block stays self-contained at the end of the module.
        from liger_core.ops import fused_linear_kto as kto

        args = (
            input, weight, target, preference_labels, bias, ref_input, ref_weight, ref_bias, kl, ignore_index, beta,
            use_ref_model, average_log_prob, desirable_weight, undesirable_weight,
        )  # fmt: skip
        kto.check_args(*args)
        outs, *grads = kto.fused(KERNELS, hardware.PREFERENCE_CHUNK_ELEMENTS, *P.unpaired_needs_grads(ctx, bias), *args)
        return P.unpaired_function_outputs(ctx, outs, grads)

    @staticmethod
    def backward(ctx, grad_loss, *unused):
        grad_x, grad_w, grad_b = P.function_grads(ctx, grad_loss)
        return (grad_x, grad_w, None, None, grad_b) + (None,) * 10
