"""KL divergence for Ascend NPUs (kernel in `_divergence`)."""

from __future__ import annotations

import torch
from liger_core.ops.kl_div import check_args

from liger_ops_ascend._divergence import KL_DIV, LigerDivergenceFunction


def kl_div(
    y_pred: torch.Tensor,
    y_true: torch.Tensor,
    reduction: str = "batchmean",
    log_target: bool = False,
    eps: float = 1e-10,
) -> torch.Tensor:
    check_args(y_pred, y_true, reduction, log_target, eps)
    n_rows, n_cols = y_pred.shape
    scale = {"batchmean": 1.0 / max(n_rows, 1), "mean": 1.0 / max(n_rows * n_cols, 1)}.get(reduction, 1.0)
    return LigerDivergenceFunction.apply(
        y_pred, y_true, None, KL_DIV, -100, scale, reduction == "none", log_target, float(eps), torch.float32
    )
