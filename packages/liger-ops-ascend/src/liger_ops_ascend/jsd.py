"""Generalised Jensen-Shannon divergence for Ascend NPUs (kernel, plan and Function in `_divergence`)."""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.ops import _losses
from liger_core.ops.jsd import check_args

from liger_ops_ascend._divergence import JSD, LigerDivergenceFunction


@implements("jsd")
class LigerJSDFunction(LigerDivergenceFunction):
    @staticmethod
    def forward(ctx, student_logp, teacher_logp, shift_labels, beta, ignore_index):
        check_args(student_logp, teacher_logp, shift_labels, beta, ignore_index)
        n = _losses.label_count("jsd", shift_labels, ignore_index, student_logp.shape[0])
        return LigerDivergenceFunction.forward(
            ctx, student_logp, teacher_logp, shift_labels, JSD, ignore_index, 1.0 / max(n, 1), False, False,
            float(beta), student_logp.dtype,
        )  # fmt: skip
