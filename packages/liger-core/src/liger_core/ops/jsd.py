"""The `jsd` op (generalised Jensen-Shannon divergence): its contract, argument checks and PyTorch reference."""

from __future__ import annotations

import math as _m

import torch

from liger_core.ops import _losses as L


def jsd(
    student_logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    beta: float = 0.5,
    ignore_index: int = -100,
) -> torch.Tensor:
    """Generalised JSD between a teacher ``P = exp(teacher_logp)`` and a student
    ``Q = exp(student_logp)`` (the semantics of liger-kernel 0.8.5), per element::

        M = beta * P + (1 - beta) * Q
        beta == 0:  P * (log P - log Q)                      (forward KL)
        beta == 1:  Q * (log Q - log P)                      (reverse KL)
        otherwise:  beta * P * (log P - log M) + (1 - beta) * Q * (log Q - log M)

    summed over the vocabulary and over counted rows, divided by the number of counted rows
    (rows whose ``shift_labels`` entry is ``ignore_index`` are skipped; all rows without
    labels). No counted row: 0 and zero gradients.

    Args:
        student_logp: ``(tokens, vocab)`` log-probabilities, float32, bfloat16 or float16.
        teacher_logp: ``(tokens, vocab)`` log-probabilities (a constant: no gradient).
        shift_labels: ``(tokens,)`` integer labels or None.
        beta: in ``[0, 1]``.
        ignore_index: label of rows to skip.

    Returns:
        A scalar in ``student_logp.dtype`` (computed in float32). Backward gives
        ``grad_student_logp`` (its dtype), the exact derivative of the formula.
    """
    raise NotImplementedError("contract only: call liger_core.functional.liger_jsd")


def check_args(student_logp, teacher_logp, shift_labels, beta, ignore_index) -> None:
    try:
        if (
            L.is_float(student_logp)
            and L.is_float(teacher_logp)
            and student_logp.ndim == 2
            and teacher_logp.shape == student_logp.shape
            and teacher_logp.device == student_logp.device
            and (
                shift_labels is None
                or (
                    shift_labels.dtype in L.INDEX_DTYPES
                    and shift_labels.shape == student_logp.shape[:1]
                    and shift_labels.device == student_logp.device
                )
            )
            and 0 <= beta <= 1
            and type(ignore_index) is int
        ):
            return
    except (AttributeError, TypeError):
        pass
    _raise_bad_args(student_logp, teacher_logp, shift_labels, beta, ignore_index)


def _raise_bad_args(student_logp, teacher_logp, shift_labels, beta, ignore_index) -> None:
    op = "jsd"
    L.check_matrix(op, "student_logp", student_logp)
    L.check_matrix(op, "teacher_logp", teacher_logp)
    L.check_same_device(op, student_logp=student_logp, teacher_logp=teacher_logp)
    if teacher_logp.shape != student_logp.shape:
        raise ValueError(
            f"{op}: teacher_logp must have student_logp's shape {tuple(student_logp.shape)}; "
            f"got {tuple(teacher_logp.shape)}"
        )
    if shift_labels is not None:
        L.check_labels(op, "shift_labels", shift_labels, student_logp.shape[0], student_logp.device)
    check_beta(op, "beta", beta)
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{op}: ignore_index must be an int; got {ignore_index!r}")


def check_beta(op: str, name: str, beta) -> None:
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 <= beta <= 1:
        raise ValueError(f"{op}: {name} must be a number in [0, 1]; got {beta!r}")


def elementwise(x: torch.Tensor, y: torch.Tensor, beta: float) -> torch.Tensor:
    """The per-element divergence of student log-probs ``x`` from teacher log-probs ``y``."""
    if beta == 0:
        return torch.exp(y) * (y - x)
    if beta == 1:
        return torch.exp(x) * (x - y)
    log_m = torch.logaddexp(y + _m.log(beta), x + _m.log1p(-beta))
    return beta * torch.exp(y) * (y - log_m) + (1 - beta) * torch.exp(x) * (x - log_m)


def math(student_logp, teacher_logp, shift_labels, beta, ignore_index) -> torch.Tensor:
    """The formula, differentiable in ``student_logp`` (float64 for the oracle, else float32)."""
    compute = torch.float64 if student_logp.dtype == torch.float64 else torch.float32
    x = student_logp.to(compute)
    y = teacher_logp.detach().to(compute)
    loss = elementwise(x, y, beta)
    n = x.shape[0]
    if shift_labels is not None:
        keep = (shift_labels != ignore_index)[:, None]
        loss = torch.where(keep, loss, torch.zeros((), dtype=compute, device=x.device))
        n = int(keep.sum())
    return loss.sum() / max(n, 1)


def reference(
    student_logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    beta: float = 0.5,
    ignore_index: int = -100,
) -> torch.Tensor:
    check_args(student_logp, teacher_logp, shift_labels, beta, ignore_index)
    return math(student_logp, teacher_logp, shift_labels, beta, ignore_index).to(student_logp.dtype)
