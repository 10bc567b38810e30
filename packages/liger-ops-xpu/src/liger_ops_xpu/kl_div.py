"""KL divergence for Intel GPUs: the elementwise divergence kernels of _divergence.py."""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.ops.kl_div import check_args

from liger_ops_xpu._divergence import KL, Divergence, LigerDivergenceFunction


@implements("kl_div")
class LigerKLDivFunction(LigerDivergenceFunction):
    @staticmethod
    def forward(ctx, y_pred, y_true, reduction, log_target, eps):
        check_args(y_pred, y_true, reduction, log_target, eps)
        n_rows = y_pred.shape[0]
        scale = {"none": None, "sum": 1.0, "batchmean": 1.0 / max(n_rows, 1), "mean": 1.0 / max(y_pred.numel(), 1)}
        div = Divergence(KL, log_target=log_target, eps=float(eps))
        return LigerDivergenceFunction.forward_divergence(
            ctx, y_pred, y_true, None, div, scale[reduction], torch.float32
        )
