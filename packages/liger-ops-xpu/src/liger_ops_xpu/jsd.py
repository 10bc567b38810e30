"""Generalised Jensen-Shannon divergence for Intel GPUs: the elementwise divergence kernels of
_divergence.py (forward KL at beta 0, reverse KL at beta 1, the mixture otherwise)."""

from __future__ import annotations

import torch
from liger_core.ops import _losses
from liger_core.ops.jsd import check_args

from liger_ops_xpu._divergence import JSD, JSD_FORWARD_KL, JSD_REVERSE_KL, Divergence, LigerDivergenceFunction


def jsd_divergence(beta: float, ignore_index: int) -> Divergence:
    kind = JSD_FORWARD_KL if beta == 0 else JSD_REVERSE_KL if beta == 1 else JSD
    return Divergence(kind, beta=float(beta), ignore_index=ignore_index)


def jsd(
    student_logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    beta: float = 0.5,
    ignore_index: int = -100,
) -> torch.Tensor:
    """The interface's ``jsd`` (see ``liger_core.ops.jsd``) on Intel GPUs."""
    check_args(student_logp, teacher_logp, shift_labels, beta, ignore_index)
    n = _losses.label_count("jsd", shift_labels, ignore_index, student_logp.shape[0])
    labels = None if shift_labels is None else shift_labels.contiguous()
    div = jsd_divergence(beta, ignore_index)
    return LigerDivergenceFunction.apply(student_logp, teacher_logp, labels, div, 1.0 / max(n, 1), student_logp.dtype)
