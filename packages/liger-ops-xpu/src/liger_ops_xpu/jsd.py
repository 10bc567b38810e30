"""Generalised Jensen-Shannon divergence for Intel GPUs: the elementwise divergence kernels of
_divergence.py (forward KL at beta 0, reverse KL at beta 1, the mixture otherwise)."""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.ops._losses import label_count
from liger_core.ops.jsd import check_args

from liger_ops_xpu._divergence import LigerDivergenceFunction, jsd_divergence


@implements("jsd")
class LigerJSDFunction(LigerDivergenceFunction):
    @staticmethod
    def forward(ctx, student_logp, teacher_logp, shift_labels, beta, ignore_index):
        check_args(student_logp, teacher_logp, shift_labels, beta, ignore_index)
        n = label_count("jsd", shift_labels, ignore_index, student_logp.shape[0])
        labels = None if shift_labels is None else shift_labels.contiguous()
        div = jsd_divergence(beta, ignore_index)
        return LigerDivergenceFunction.forward_divergence(
            ctx, student_logp, teacher_logp, labels, div, 1.0 / max(n, 1), student_logp.dtype
        )
