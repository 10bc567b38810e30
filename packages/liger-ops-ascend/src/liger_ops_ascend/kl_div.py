"""KL divergence for Ascend NPUs (kernel, plan and Function in `_divergence`)."""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.ops.kl_div import check_args

from liger_ops_ascend._divergence import KL_DIV, LigerDivergenceFunction


@implements("kl_div")
class LigerKLDivFunction(LigerDivergenceFunction):
    @staticmethod
    def forward(ctx, y_pred, y_true, reduction, log_target, eps):
        check_args(y_pred, y_true, reduction, log_target, eps)
        n_rows, n_cols = y_pred.shape
        scale = {"batchmean": 1.0 / max(n_rows, 1), "mean": 1.0 / max(n_rows * n_cols, 1)}.get(reduction, 1.0)
        return LigerDivergenceFunction.forward(
            ctx, y_pred, y_true, None, KL_DIV, -100, scale, reduction == "none", log_target, float(eps), torch.float32
        )
