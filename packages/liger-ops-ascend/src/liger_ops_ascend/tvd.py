"""Total variation distance for Ascend NPUs (kernel, plan and Function in `_divergence`)."""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.ops import _losses
from liger_core.ops.tvd import check_args

from liger_ops_ascend._divergence import TVD, LigerDivergenceFunction


@implements("tvd")
class LigerTVDFunction(LigerDivergenceFunction):
    @staticmethod
    def forward(ctx, p, q, shift_labels, reduction, ignore_index):
        check_args(p, q, shift_labels, reduction, ignore_index)
        n = _losses.label_count("tvd", shift_labels, ignore_index, p.shape[0])
        scale = {"batchmean": 1.0 / max(n, 1), "mean": 1.0 / max(n * p.shape[1], 1)}.get(reduction, 1.0)
        return LigerDivergenceFunction.forward(
            ctx, p, q, shift_labels, TVD, ignore_index, scale, reduction == "none", False, 0.0, torch.float32
        )
