"""Distillation loss modules under liger-kernel's names and constructor arguments."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from liger_core.functional import (
    liger_fused_linear_cosine_similarity,
    liger_fused_linear_jsd_loss,
    liger_fused_linear_kl_div,
)
from liger_core.memory_budget import module_memory_budget
from liger_core.ops import _losses as L
from liger_core.ops import fused_linear_kl_div as KL


class LigerFusedLinearKLDivLoss(nn.Module):
    """The student's lm_head + ``KL(target || softmax(logits / temperature))`` without the logits
    (`liger_core.ops.fused_linear_kl_div.fused_linear_kl_div`), liger-kernel 0.8.5's module:
    ``forward(student_input, student_weight, target, shift_labels=None)``. ``accum_dtype`` is
    accepted for compatibility; only None (the weight's dtype) is offered.
    """

    def __init__(
        self,
        reduction: str = "batchmean",
        ignore_index: int = -100,
        temperature: float = 1.0,
        eps: float = 1e-10,
        accum_dtype: torch.dtype | None = None,
        memory_budget: int | str | None = None,
    ) -> None:
        super().__init__()
        self.memory_budget = module_memory_budget(type(self).__name__, memory_budget)
        name = type(self).__name__
        L.check_reduction(name, reduction, KL.REDUCTIONS)
        if temperature == 0:
            raise ValueError(f"{name}: temperature must be a nonzero number; got 0")
        if accum_dtype is not None:
            raise ValueError(f"{name}: accum_dtype must be None (gradients accumulate in the weight's dtype)")
        self.reduction = reduction
        self.ignore_index = ignore_index
        self.temperature = temperature
        self.eps = eps
        self.accum_dtype = accum_dtype

    def forward(
        self,
        student_input: torch.Tensor,
        student_weight: torch.Tensor,
        target: torch.Tensor,
        shift_labels: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return liger_fused_linear_kl_div(
            student_input, student_weight, target, shift_labels, self.reduction, self.ignore_index, self.temperature,
            self.eps,
            memory_budget=self.memory_budget,
        )  # fmt: skip

    def extra_repr(self) -> str:
        return (
            f"reduction={self.reduction}, ignore_index={self.ignore_index}, temperature={self.temperature}, "
            f"eps={self.eps}"
        )


class _ChunkedDistillationLoss(nn.Module):
    """liger-kernel's chunked distillation modules' constructor and ``forward`` (``_loss`` says
    which op); ``compiled`` and ``chunk_size`` are accepted and do nothing (the backend chunks by
    its memory budget, without torch.compile)."""

    _loss: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]

    def __init__(
        self,
        weight_hard_loss: float = 0.5,
        weight_soft_loss: float = 0.5,
        beta: float = 0.5,
        ignore_index: int = -100,
        temperature: float = 1.0,
        compiled: bool = True,
        chunk_size: int = 1024,
        return_soft_hard_loss: bool = False,
        memory_budget: int | str | None = None,
    ) -> None:
        super().__init__()
        self.memory_budget = module_memory_budget(type(self).__name__, memory_budget)
        if temperature == 0:
            raise ValueError(f"{type(self).__name__}: temperature must be a nonzero number; got 0")
        self.weight_hard_loss = weight_hard_loss
        self.weight_soft_loss = weight_soft_loss
        self.beta = beta
        self.ignore_index = ignore_index
        self.temperature = temperature
        self.compiled = compiled
        self.chunk_size = chunk_size
        self.return_soft_hard_loss = return_soft_hard_loss

    def forward(
        self,
        student_input: torch.Tensor,
        student_weight: torch.Tensor,
        teacher_input: torch.Tensor,
        teacher_weight: torch.Tensor,
        true_labels: torch.Tensor,
        student_bias: torch.Tensor | None = None,
        teacher_bias: torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        loss, soft, hard = self._loss(
            student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias, teacher_bias,
            self.weight_hard_loss, self.weight_soft_loss, self.beta, self.ignore_index, self.temperature,
            memory_budget=self.memory_budget,
        )  # fmt: skip
        return (loss, soft, hard) if self.return_soft_hard_loss else loss


class LigerFusedLinearJSDLoss(_ChunkedDistillationLoss):
    """Student and teacher lm_heads + generalised JSD at a temperature with a hard cross-entropy
    term (`liger_core.ops.fused_linear_jsd_loss`), liger-kernel 0.8.5's chunked module: returns the
    loss, or ``(loss, soft_loss, hard_loss)`` with ``return_soft_hard_loss``."""

    _loss = staticmethod(liger_fused_linear_jsd_loss)


class LigerFusedLinearCosineSimilarityLoss(_ChunkedDistillationLoss):
    """Student and teacher lm_heads + cosine-similarity distillation with a hard cross-entropy term
    (`liger_core.ops.fused_linear_cosine_similarity`), liger-kernel 0.8.5's module:
    ``forward(student_input, student_weight, teacher_input, teacher_weight, true_labels,
    student_bias=None, teacher_bias=None)`` returns the loss, or ``(loss, soft_loss, hard_loss)``
    with ``return_soft_hard_loss``.
    """

    _loss = staticmethod(liger_fused_linear_cosine_similarity)
