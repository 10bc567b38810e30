"""KL divergence for Intel GPUs: the elementwise divergence kernels of _divergence.py."""

from __future__ import annotations

import torch
from liger_core.ops.kl_div import check_args

from liger_ops_xpu._divergence import KL, Divergence, LigerDivergenceFunction


def kl_div(
    y_pred: torch.Tensor,
    y_true: torch.Tensor,
    reduction: str = "batchmean",
    log_target: bool = False,
    eps: float = 1e-10,
) -> torch.Tensor:
    """The interface's ``kl_div`` (see ``liger_core.ops.kl_div``) on Intel GPUs."""
    check_args(y_pred, y_true, reduction, log_target, eps)
    n_rows = y_pred.shape[0]
    scale = {"none": None, "sum": 1.0, "batchmean": 1.0 / max(n_rows, 1), "mean": 1.0 / max(y_pred.numel(), 1)}
    div = Divergence(KL, log_target=log_target, eps=float(eps))
    return LigerDivergenceFunction.apply(y_pred, y_true, None, div, scale[reduction], torch.float32)
