"""Distillation loss modules under liger-kernel's names and constructor arguments."""

from __future__ import annotations

import torch
from torch import nn

from liger_core.functional import liger_fused_linear_kl_div
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
    ) -> None:
        super().__init__()
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
        )  # fmt: skip

    def extra_repr(self) -> str:
        return (
            f"reduction={self.reduction}, ignore_index={self.ignore_index}, temperature={self.temperature}, "
            f"eps={self.eps}"
        )
