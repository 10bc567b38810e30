"""Total variation distance for Intel GPUs: the elementwise divergence kernels of _divergence.py."""

from __future__ import annotations

import torch
from liger_core.ops import _losses
from liger_core.ops.tvd import check_args

from liger_ops_xpu._divergence import TVD, Divergence, LigerDivergenceFunction


def tvd(
    p: torch.Tensor,
    q: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    reduction: str = "batchmean",
    ignore_index: int = -100,
) -> torch.Tensor:
    """The interface's ``tvd`` (see ``liger_core.ops.tvd``) on Intel GPUs."""
    check_args(p, q, shift_labels, reduction, ignore_index)
    n_rows, n_cols = p.shape
    n = _losses.label_count("tvd", shift_labels, ignore_index, n_rows) if reduction in ("batchmean", "mean") else 0
    scale = {"none": None, "sum": 1.0, "batchmean": 1.0 / max(n, 1), "mean": 1.0 / max(n * n_cols, 1)}
    labels = None if shift_labels is None else shift_labels.contiguous()
    div = Divergence(TVD, ignore_index=ignore_index)
    return LigerDivergenceFunction.apply(p, q, labels, div, scale[reduction], torch.float32)
