"""KTO's chunked loss under liger-kernel 0.8.5's module name."""

from __future__ import annotations

import torch
from torch import nn

from liger_core.functional import liger_fused_linear_kto
from liger_core.memory_budget import module_memory_budget


class LigerFusedLinearKTOLoss(nn.Module):
    """lm_head projection + KTO loss without materialising the logits, under liger-kernel 0.8.5's
    name, constructor and ``forward(_input, lin_weight, target, bias=None, preference_labels=None,
    ref_input=None, ref_weight=None, ref_bias=None, kl=None)``; returns liger-kernel's ``(loss,
    (chosen_logps_sum, rejected_logps_sum, chosen_logits_sum, rejected_logits_sum,
    chosen_rewards_sum, rejected_rewards_sum))`` (see `liger_core.ops.fused_linear_kto`; the logits
    sums count the completion tokens only). ``desirable_weight`` and ``undesirable_weight`` are
    TRL's (liger-kernel has neither; default 1). ``compiled`` and ``chunk_size`` are accepted for
    compatibility and change nothing: the backend sizes its chunks and needs no torch.compile."""

    def __init__(
        self,
        ignore_index: int = -100,
        beta: float = 0.1,
        compiled: bool = True,
        use_ref_model: bool = False,
        average_log_prob: bool = False,
        chunk_size: int = 1,
        desirable_weight: float = 1.0,
        undesirable_weight: float = 1.0,
        memory_budget: int | str | None = None,
    ) -> None:
        super().__init__()
        self.memory_budget = module_memory_budget(type(self).__name__, memory_budget)
        from liger_core.ops import _preference as P
        from liger_core.ops import fused_linear_kto as kto

        name = type(self).__name__
        kto.check_options(name, ignore_index, beta, average_log_prob, desirable_weight, undesirable_weight)
        P.check_flag(name, "use_ref_model", use_ref_model)
        self.ignore_index = ignore_index
        self.beta = beta
        self.compiled = compiled
        self.use_ref_model = use_ref_model
        self.average_log_prob = average_log_prob
        self.chunk_size = chunk_size
        self.desirable_weight = desirable_weight
        self.undesirable_weight = undesirable_weight

    def forward(
        self,
        _input: torch.Tensor,
        lin_weight: torch.Tensor,
        target: torch.Tensor,
        bias: torch.Tensor | None = None,
        preference_labels: torch.Tensor | None = None,
        ref_input: torch.Tensor | None = None,
        ref_weight: torch.Tensor | None = None,
        ref_bias: torch.Tensor | None = None,
        kl: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        loss, *metrics = liger_fused_linear_kto(
            _input, lin_weight, target, preference_labels, bias, ref_input, ref_weight, ref_bias, kl,
            self.ignore_index, self.beta, self.use_ref_model, self.average_log_prob, self.desirable_weight,
            self.undesirable_weight,
            memory_budget=self.memory_budget,
        )  # fmt: skip
        return loss, tuple(metrics)

    def extra_repr(self) -> str:
        return (
            f"beta={self.beta}, use_ref_model={self.use_ref_model}, average_log_prob={self.average_log_prob}, "
            f"desirable_weight={self.desirable_weight}, undesirable_weight={self.undesirable_weight}"
        )
