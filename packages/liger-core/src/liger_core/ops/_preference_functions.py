"""The preference losses' autograd Functions (fused_linear_dpo, orpo, cpo, simpo, kto), built over
one backend's kernel adapter (`liger_core.ops._preference.TokenLogpKernels`).

Apart from `liger_core.ops._preference` (the chunk loops and pair losses the op modules build
on): the Functions check each op's arguments with its module's ``check_args``, so this module
sits above the op modules, which sit above `_preference`; no circle.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from liger_core.ops import _losses as L
from liger_core.ops import _preference as P
from liger_core.ops import fused_linear_cpo as cpo
from liger_core.ops import fused_linear_dpo as dpo
from liger_core.ops import fused_linear_kto as kto
from liger_core.ops import fused_linear_orpo as orpo
from liger_core.ops import fused_linear_simpo as simpo


def autograd_functions(
    kernels: P.TokenLogpKernels, chunk_elements: Callable[[], int], module: str
) -> dict[str, type[torch.autograd.Function]]:
    """The preference losses' autograd Functions over one backend's kernels, by op name
    (``LigerFusedLinearDPOFunction`` for fused_linear_dpo, ...; the backend marks each with
    ``implements``). Each ``forward`` takes its contract's parameters, checks them and runs
    `fused_linear_pairs`; ``backward`` scales the gradients computed there.

    ``chunk_elements`` gives the logits elements per chunk (the backend's hardware value), read
    on every call so that tuning and tests may change it; ``module``: the backend module that
    registers the Functions (see `_losses.autograd_function`)."""

    def backward_with(n_options: int) -> Callable:
        """backward for a contract of (input, weight, target, bias, ``n_options`` more)."""

        def backward(ctx, grad_loss, *unused):
            grad_x, grad_w, grad_b = P.function_grads(ctx, grad_loss, kernels)
            return (grad_x, grad_w, None, grad_b) + (None,) * n_options

        return backward

    def dpo_forward(
        ctx, input, weight, target, bias, ref_input, ref_weight, ref_bias, ignore_index, beta, compute_nll_loss,
        use_ref_model, average_log_prob, loss_type, label_smoothing, discopop_tau, alpha,
    ):  # fmt: skip
        dpo.check_args(
            input, weight, target, bias, ref_input, ref_weight, ref_bias, ignore_index, beta, compute_nll_loss,
            use_ref_model, average_log_prob, loss_type, label_smoothing, discopop_tau, alpha,
        )  # fmt: skip
        result, *grads = P.fused_linear_pairs(
            kernels, input, weight, target, bias, ref_input, ref_weight, ref_bias, ignore_index,
            dpo.dpo_pair_loss(loss_type, beta, label_smoothing, discopop_tau), average_log_prob,
            alpha if compute_nll_loss else 0.0, use_ref_model, chunk_elements(), *P.needs_grads(ctx, bias), dpo.OP_NAME,
        )  # fmt: skip
        return P.function_outputs(ctx, result, grads)

    def orpo_forward(ctx, input, weight, target, bias, ignore_index, beta, compute_nll_loss):
        orpo.check_args(input, weight, target, bias, ignore_index, beta, compute_nll_loss)
        result, *grads = P.fused_linear_pairs(
            kernels, input, weight, target, bias, None, None, None, ignore_index, orpo.orpo_pair_loss(beta), True,
            1.0 if compute_nll_loss else 0.0, False, chunk_elements(), *P.needs_grads(ctx, bias), orpo.OP_NAME,
        )  # fmt: skip
        return P.function_outputs(ctx, result, grads)

    def cpo_forward(
        ctx, input, weight, target, bias, ignore_index, beta, alpha, label_smoothing, compute_nll_loss,
        average_log_prob, loss_type, simpo_gamma,
    ):  # fmt: skip
        cpo.check_args(
            input, weight, target, bias, ignore_index, beta, alpha, label_smoothing, compute_nll_loss,
            average_log_prob, loss_type, simpo_gamma,
        )  # fmt: skip
        result, *grads = P.fused_linear_pairs(
            kernels, input, weight, target, bias, None, None, None, ignore_index,
            cpo.cpo_pair_loss(loss_type, beta, label_smoothing, simpo_gamma), average_log_prob,
            alpha if compute_nll_loss else 0.0, False, chunk_elements(), *P.needs_grads(ctx, bias), cpo.OP_NAME,
        )  # fmt: skip
        return P.function_outputs(ctx, result, grads)

    def simpo_forward(
        ctx, input, weight, target, bias, ignore_index, beta, alpha, label_smoothing, compute_nll_loss, gamma
    ):
        simpo.check_args(
            input, weight, target, bias, ignore_index, beta, alpha, label_smoothing, compute_nll_loss, gamma
        )
        result, *grads = P.fused_linear_pairs(
            kernels, input, weight, target, bias, None, None, None, ignore_index,
            cpo.cpo_pair_loss("simpo", beta, label_smoothing, gamma), True, alpha if compute_nll_loss else 0.0,
            False, chunk_elements(), *P.needs_grads(ctx, bias), simpo.OP_NAME,
        )  # fmt: skip
        return P.function_outputs(ctx, result, grads)

    def kto_forward(
        ctx, input, weight, target, preference_labels, bias, ref_input, ref_weight, ref_bias, kl, ignore_index, beta,
        use_ref_model, average_log_prob, desirable_weight, undesirable_weight,
    ):  # fmt: skip
        args = (
            input, weight, target, preference_labels, bias, ref_input, ref_weight, ref_bias, kl, ignore_index, beta,
            use_ref_model, average_log_prob, desirable_weight, undesirable_weight,
        )  # fmt: skip
        kto.check_args(*args)
        outs, *grads = kto.fused(kernels, chunk_elements(), *P.unpaired_needs_grads(ctx, bias), *args)
        return P.unpaired_function_outputs(ctx, outs, grads)

    def kto_backward(ctx, grad_loss, *unused):
        # KTO's contract puts preference_labels before the bias (liger-kernel's order).
        grad_x, grad_w, grad_b = P.function_grads(ctx, grad_loss, kernels)
        return (grad_x, grad_w, None, None, grad_b) + (None,) * 10

    def build(name: str, forward: Callable, n_options: int) -> type[torch.autograd.Function]:
        return L.autograd_function(name, module, forward, backward_with(n_options))

    return {
        dpo.OP_NAME: build("LigerFusedLinearDPOFunction", dpo_forward, 12),
        orpo.OP_NAME: build("LigerFusedLinearORPOFunction", orpo_forward, 3),
        cpo.OP_NAME: build("LigerFusedLinearCPOFunction", cpo_forward, 8),
        simpo.OP_NAME: build("LigerFusedLinearSimPOFunction", simpo_forward, 6),
        kto.OP_NAME: L.autograd_function("LigerFusedLinearKTOFunction", module, kto_forward, kto_backward),
    }
