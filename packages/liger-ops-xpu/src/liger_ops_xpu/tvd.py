"""Total variation distance for Intel GPUs: the elementwise divergence kernels of _divergence.py."""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.ops._losses import label_count
from liger_core.ops.tvd import check_args

from liger_ops_xpu._divergence import TVD, Divergence, LigerDivergenceFunction


@implements("tvd")
class LigerTVDFunction(LigerDivergenceFunction):
    @staticmethod
    def forward(ctx, p, q, shift_labels, reduction, ignore_index):
        check_args(p, q, shift_labels, reduction, ignore_index)
        n_rows, n_cols = p.shape
        n = label_count("tvd", shift_labels, ignore_index, n_rows) if reduction in ("batchmean", "mean") else 0
        scale = {"none": None, "sum": 1.0, "batchmean": 1.0 / max(n, 1), "mean": 1.0 / max(n * n_cols, 1)}
        labels = None if shift_labels is None else shift_labels.contiguous()
        div = Divergence(TVD, ignore_index=ignore_index)
        return LigerDivergenceFunction.forward_divergence(ctx, p, q, labels, div, scale[reduction], torch.float32)
