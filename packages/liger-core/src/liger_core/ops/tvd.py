"""The `tvd` op (total variation distance): its contract, argument checks and PyTorch reference."""

from __future__ import annotations

import torch

from liger_core.ops import _losses as L

REDUCTIONS = L.DIV_REDUCTIONS


def tvd(
    p: torch.Tensor,
    q: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    reduction: str = "batchmean",
    ignore_index: int = -100,
) -> torch.Tensor:
    """Total variation distance ``0.5 * |p - q|`` per element (the semantics of liger-kernel 0.8.5).

    Rows whose ``shift_labels`` entry is ``ignore_index`` contribute nothing. With ``n`` the
    counted rows (all rows without labels) and ``V`` the vocabulary: ``"batchmean"`` is the sum
    over counted rows / ``n``, ``"mean"`` the sum / ``(n * V)``, ``"sum"`` the sum, ``"none"``
    per element (0 on ignored rows). No counted row: 0 and zero gradients.

    Args:
        p: ``(tokens, vocab)`` probabilities, float32, bfloat16 or float16 (receives the gradient).
        q: ``(tokens, vocab)`` probabilities of any of those dtypes (a constant: no gradient).
        shift_labels: ``(tokens,)`` integer labels or None.
        reduction: ``"batchmean"``, ``"sum"``, ``"mean"`` or ``"none"``.
        ignore_index: label of rows to skip.

    Returns:
        float32: a scalar, or ``(tokens, vocab)`` for ``"none"``. Backward gives ``grad_p``
        (``p.dtype``): ``0.5 * sign(p - q)`` scaled like the loss.
    """
    raise NotImplementedError("contract only: call liger_core.functional.liger_tvd")


def check_args(p, q, shift_labels, reduction, ignore_index) -> None:
    try:
        if (
            L.is_float(p)
            and L.is_float(q)
            and p.ndim == 2
            and q.shape == p.shape
            and q.device == p.device
            and (
                shift_labels is None
                or (
                    shift_labels.dtype in L.INDEX_DTYPES
                    and shift_labels.shape == p.shape[:1]
                    and shift_labels.device == p.device
                )
            )
            and reduction in REDUCTIONS
            and type(ignore_index) is int
        ):
            return
    except (AttributeError, TypeError):
        pass
    _raise_bad_args(p, q, shift_labels, reduction, ignore_index)


def _raise_bad_args(p, q, shift_labels, reduction, ignore_index) -> None:
    op = "tvd"
    L.check_matrix(op, "p", p)
    L.check_matrix(op, "q", q)
    L.check_same_device(op, p=p, q=q)
    if q.shape != p.shape:
        raise ValueError(f"{op}: q must have p's shape {tuple(p.shape)}; got {tuple(q.shape)}")
    if shift_labels is not None:
        L.check_labels(op, "shift_labels", shift_labels, p.shape[0], p.device)
    L.check_reduction(op, reduction, REDUCTIONS)
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{op}: ignore_index must be an int; got {ignore_index!r}")


def math(p, q, shift_labels, reduction, ignore_index) -> torch.Tensor:
    """The formula, differentiable in ``p`` (float64 for the oracle, else float32)."""
    compute = torch.float64 if p.dtype == torch.float64 else torch.float32
    x = p.to(compute)
    loss = 0.5 * (x - q.detach().to(compute)).abs()
    n_rows, n_cols = x.shape
    if shift_labels is not None:
        keep = (shift_labels != ignore_index)[:, None]
        loss = torch.where(keep, loss, torch.zeros((), dtype=compute, device=x.device))
        n = int(keep.sum())
    else:
        n = n_rows
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "batchmean":
        return total / max(n, 1)
    if reduction == "mean":
        return total / max(n * n_cols, 1)
    return total


def reference(
    p: torch.Tensor,
    q: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    reduction: str = "batchmean",
    ignore_index: int = -100,
) -> torch.Tensor:
    check_args(p, q, shift_labels, reduction, ignore_index)
    return math(p, q, shift_labels, reduction, ignore_index).float()
