"""Generalised Jensen-Shannon divergence for Ascend NPUs (kernel in `_divergence`)."""

from __future__ import annotations

import torch
from liger_core.ops import _losses
from liger_core.ops.jsd import check_args

from liger_ops_ascend._divergence import JSD, LigerDivergenceFunction


def jsd(
    student_logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    beta: float = 0.5,
    ignore_index: int = -100,
) -> torch.Tensor:
    check_args(student_logp, teacher_logp, shift_labels, beta, ignore_index)
    n = _losses.label_count("jsd", shift_labels, ignore_index, student_logp.shape[0])
    return LigerDivergenceFunction.apply(
        student_logp, teacher_logp, shift_labels, JSD, ignore_index, 1.0 / max(n, 1), False, False, float(beta),
        student_logp.dtype,
    )  # fmt: skip
