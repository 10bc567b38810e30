"""The GRPO loss module under liger-kernel's name and constructor arguments."""

from __future__ import annotations

import torch
from torch import nn

from liger_core.functional import liger_fused_linear_grpo
from liger_core.memory_budget import module_memory_budget
from liger_core.ops import fused_linear_grpo as G


class LigerFusedLinearGRPOLoss(nn.Module):
    """lm_head + GRPO loss (`liger_core.ops.fused_linear_grpo.fused_linear_grpo`), with
    liger-kernel 0.8.5's ``LigerFusedLinearGRPOLoss`` constructor and ``forward`` arguments and
    return value: ``(loss, [kl (when beta != 0), clip_ratio])``, ``clip_ratio`` being TRL's
    ``clip_ratio/region_mean`` (``cispo_clip_ratio`` for cispo, 0 for sapo and vespo). The
    ``metrics`` attribute keeps the last call's full metrics tensor (`fused_linear_grpo.METRICS`).

    ``compiled`` and ``chunk_size`` are accepted for compatibility and do nothing: the op chunks
    by its backend's memory budget and needs no torch.compile. ``use_ref_model=False`` (or no
    reference log-probabilities) makes the KL term 0, as liger-kernel's. The reference model's
    log-probabilities come as ``ref_per_token_logps``; ``ref_input``/``ref_weight`` are refused
    (a ValueError), since computing them here would materialise the reference's logits.
    """

    def __init__(
        self,
        beta: float = 0.04,
        compiled: bool = True,
        use_ref_model: bool = True,
        chunk_size: int = 1,
        epsilon_low: float = 0.2,
        epsilon_high: float = 0.2,
        loss_type: str = "dapo",
        max_completion_length: int | None = None,
        importance_sampling_level: str = "token",
        sapo_temperature_pos: float = 1.0,
        sapo_temperature_neg: float = 1.05,
        temperature: float = 1.0,
        delta: float | None = None,
        use_bias_correction_kl: bool = False,
        vespo_k_pos: float = 2.0,
        vespo_lambda_pos: float = 3.0,
        vespo_k_neg: float = 3.0,
        vespo_lambda_neg: float = 2.0,
        memory_budget: int | str | None = None,
    ) -> None:
        super().__init__()
        self.memory_budget = module_memory_budget(type(self).__name__, memory_budget)
        name = type(self).__name__
        if loss_type not in G.LOSS_TYPES:
            raise ValueError(f"{name}: loss_type must be one of {G.LOSS_TYPES}; got {loss_type!r}")
        if importance_sampling_level not in G.IMPORTANCE_SAMPLING_LEVELS:
            raise ValueError(
                f"{name}: importance_sampling_level must be one of {G.IMPORTANCE_SAMPLING_LEVELS}; "
                f"got {importance_sampling_level!r}"
            )
        for arg, value in (
            ("sapo_temperature_pos", sapo_temperature_pos),
            ("sapo_temperature_neg", sapo_temperature_neg),
        ):
            if not value > 0:
                raise ValueError(f"{name}: {arg} must be > 0; got {value!r}")
        if delta is not None and not delta > 0:
            raise ValueError(f"{name}: delta must be None or > 0; got {delta!r}")
        if loss_type == "dr_grpo" and max_completion_length is None:
            raise ValueError(f"{name}: max_completion_length is required for loss_type 'dr_grpo'")
        self.beta = beta
        self.compiled = compiled
        self.use_ref_model = use_ref_model
        self.chunk_size = chunk_size
        self.epsilon_low = epsilon_low
        self.epsilon_high = epsilon_high
        self.loss_type = loss_type
        self.max_completion_length = max_completion_length
        self.importance_sampling_level = importance_sampling_level
        self.sapo_temperature_pos = sapo_temperature_pos
        self.sapo_temperature_neg = sapo_temperature_neg
        self.temperature = temperature
        self.delta = delta
        self.use_bias_correction_kl = use_bias_correction_kl
        self.vespo_k_pos = vespo_k_pos
        self.vespo_lambda_pos = vespo_lambda_pos
        self.vespo_k_neg = vespo_k_neg
        self.vespo_lambda_neg = vespo_lambda_neg
        self.metrics: torch.Tensor | None = None

    def forward(
        self,
        _input: torch.Tensor,
        lin_weight: torch.Tensor,
        selected_token_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        advantages: torch.Tensor,
        bias: torch.Tensor | None = None,
        ref_per_token_logps: torch.Tensor | None = None,
        old_per_token_logps: torch.Tensor | None = None,
        ref_input: torch.Tensor | None = None,
        ref_weight: torch.Tensor | None = None,
        ref_bias: torch.Tensor | None = None,
        vllm_is_ratio: torch.Tensor | None = None,
        num_items_in_batch: float | torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        name = type(self).__name__
        if ref_input is not None or ref_weight is not None or ref_bias is not None:
            raise ValueError(
                f"{name}: ref_input/ref_weight/ref_bias are not supported; pass the reference model's "
                "ref_per_token_logps (computed under torch.no_grad)"
            )
        ref = ref_per_token_logps if self.use_ref_model else None
        # Without reference log-probabilities the KL term is exp(0) - 0 - 1 = 0 with zero gradient.
        beta = self.beta if ref is not None else 0.0
        if isinstance(num_items_in_batch, torch.Tensor):
            num_items_in_batch = float(num_items_in_batch)
        loss, metrics = liger_fused_linear_grpo(
            _input, lin_weight, selected_token_ids, attention_mask, advantages, bias, ref, old_per_token_logps,
            vllm_is_ratio, num_items_in_batch, beta, self.epsilon_low, self.epsilon_high, self.loss_type,
            self.max_completion_length, self.importance_sampling_level, self.sapo_temperature_pos,
            self.sapo_temperature_neg, self.temperature, self.delta, self.use_bias_correction_kl, self.vespo_k_pos,
            self.vespo_lambda_pos, self.vespo_k_neg, self.vespo_lambda_neg,
            memory_budget=self.memory_budget,
        )  # fmt: skip
        self.metrics = metrics
        logged = [metrics[0]] if self.beta != 0.0 else []
        return loss, [*logged, metrics[3]]

    def extra_repr(self) -> str:
        level = self.importance_sampling_level
        return f"loss_type={self.loss_type!r}, beta={self.beta}, importance_sampling_level={level!r}"
