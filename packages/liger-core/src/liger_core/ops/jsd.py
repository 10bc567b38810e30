"""The `jsd` op (generalised Jensen-Shannon divergence, liger-kernel's semantics), declared once."""

from __future__ import annotations

import math as _m

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, sample
from liger_core.ops import _losses as L
from liger_core.ops import _samples as S


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
    check_args(student_logp, teacher_logp, shift_labels, beta, ignore_index)
    return math(student_logp, teacher_logp, shift_labels, beta, ignore_index).to(student_logp.dtype)


def check_args(
    student_logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    shift_labels: torch.Tensor | None,
    beta: float,
    ignore_index: int,
) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if (
            L.distributions_ok(student_logp, teacher_logp)
            and labels_ok(shift_labels, student_logp)
            and 0 <= beta <= 1
            and type(ignore_index) is int
        ):
            return
    except (AttributeError, TypeError):
        pass
    op = "jsd"
    L.check_distributions(op, "student_logp", student_logp, "teacher_logp", teacher_logp)
    if shift_labels is not None:
        L.check_labels(op, "shift_labels", shift_labels, student_logp.shape[0], student_logp.device)
    check_beta(op, "beta", beta)
    check_ignore_index(op, ignore_index)


def labels_ok(labels: torch.Tensor | None, rows: torch.Tensor) -> bool:
    """The fast-path test of optional per-row labels (see `_losses.check_labels`)."""
    return labels is None or (
        labels.dtype in L.INDEX_DTYPES and labels.shape == rows.shape[:1] and labels.device == rows.device
    )


def check_beta(op: str, name: str, beta) -> None:
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 <= beta <= 1:
        raise ValueError(f"{op}: {name} must be a number in [0, 1]; got {beta!r}")


def check_ignore_index(op: str, ignore_index) -> None:
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{op}: ignore_index must be an int; got {ignore_index!r}")


def elementwise(x: torch.Tensor, y: torch.Tensor, beta: float) -> torch.Tensor:
    """The per-element divergence of student log-probs ``x`` from teacher log-probs ``y``."""
    if beta == 0:
        return torch.exp(y) * (y - x)
    if beta == 1:
        return torch.exp(x) * (x - y)
    log_m = torch.logaddexp(y + _m.log(beta), x + _m.log1p(-beta))
    return beta * torch.exp(y) * (y - log_m) + (1 - beta) * torch.exp(x) * (x - log_m)


def math(
    student_logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    shift_labels: torch.Tensor | None,
    beta: float,
    ignore_index: int,
) -> torch.Tensor:
    """The formula, differentiable in ``student_logp`` (float64 for the oracle, else float32)."""
    compute = torch.float64 if student_logp.dtype == torch.float64 else torch.float32
    x = student_logp.to(compute)
    y = teacher_logp.detach().to(compute)
    loss, n = L.drop_ignored_rows(elementwise(x, y, beta), shift_labels, ignore_index)
    return loss.sum() / L.at_least_one(n)


def divergence_scales(x, y, labels, ignore_index, dy, temperature=1.0) -> tuple[float, torch.Tensor]:
    """For log-probabilities ``x`` (student) and ``y`` (teacher), float64: the size of the loss's
    terms before they cancel, and per element the size of the student logits' gradient terms."""
    terms = (y.exp() * (y.abs() + 1) + x.exp() * (x.abs() + 1)).sum(-1)
    n = x.shape[0]
    if labels is not None:
        keep = labels != ignore_index
        terms, n = terms[keep], int(keep.sum())
    dy = abs(float(dy)) if dy is not None else 1.0
    loss = float(terms.sum()) / max(n, 1) * dy
    grad = x.exp() * (x.abs() + y.abs() + 1) / max(n, 1) / abs(temperature) * dy
    return loss, grad


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(4, 10), dtype=torch.float32, seed=0, labels=True, ignored=0.25, **options):
    """Student and teacher log-probabilities; labels with some rows ignored (or none)."""
    n, vocab = shape
    g = S.gen(seed)
    s = S.to(device, dtype, torch.log_softmax(S.normal(shape, g, 2), -1))
    t = S.to(device, dtype, torch.log_softmax(S.normal(shape, g, 2), -1))
    lab = S.labels(n, vocab, seed, options.get("ignore_index", -100), ignored).to(device) if labels else None
    return dict(student_logp=s, teacher_logp=t, shift_labels=lab, **options)


def samples():
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=((1, 1), (4, 7), (9, 33), (33, 130), (3, 40000))))
    yield from S.grid(
        args,
        dict(dtype=S.OPTION_DTYPES, labels=(False, True), beta=(0.0, 0.1, 0.5, 0.9, 1.0)),
        grad_scalar=0.75,
        shape=(17, 300),
        seed=2,
    )
    yield from S.grid(args, dict(beta=(0.0, 0.5, 1.0)), shape=(5, 40), ignored="all")
    yield sample(args, shape=(12, 30), seed=5, ignore_index=7, beta=0.3)


def _scales(a, upstream):
    x, y = a["student_logp"], a["teacher_logp"]
    loss, grad = divergence_scales(x, y, a["shift_labels"], a["ignore_index"], upstream["loss"])
    return {"loss": loss, "grad_student_logp": S.peak(grad)}


def _torch_jsd(student_logp, teacher_logp, shift_labels=None, beta=0.5, ignore_index=-100):
    # Generalised JSD: beta * KL(P || M) + (1 - beta) * KL(Q || M), M = beta * P + (1 - beta) * Q,
    # P the teacher, Q the student; summed over the vocabulary, mean over the tokens.
    q, p = student_logp.float(), teacher_logp.float()
    log_m = torch.logsumexp(torch.stack([p + _m.log(beta), q + _m.log(1 - beta)]), dim=0)
    per_token = beta * (p.exp() * (p - log_m)).sum(-1) + (1 - beta) * (q.exp() * (q - log_m)).sum(-1)
    return per_token.sum() / per_token.shape[0]


OP = Op(
    jsd,
    since=(1, 3),
    math=math,
    outputs=("loss",),
    grads=("student_logp",),
    samples=samples,
    smoke=S.vocab_smoke(args),
    error_sample=sample(args),
    errors=(
        bad(
            "shape",
            ValueError,
            r"teacher_logp must have student_logp's shape \(4, 10\); got \(4, 9\)",
            teacher_logp=lambda t: t[:, :9],
        ),
        bad(
            "labels_shape",
            ValueError,
            r"shift_labels must have shape \(tokens,\) = \(4,\)",
            shift_labels=lambda t: t[:3],
        ),
        bad("beta", ValueError, r"beta must be a number in \[0, 1\]; got 1.5", beta=1.5),
        bad(
            "one_d",
            ValueError,
            r"student_logp must be 2-D",
            student_logp=lambda t: t[0],
            teacher_logp=lambda t: t[0],
            shift_labels=None,
        ),
    ),
    checks=Checks(atol_scales=_scales),
    bench=B.vocab_rows(
        lambda s, dt, dev, gen: dict(
            student_logp=B.log_probs(s.tokens, s.vocab, dt, dev, gen, True),
            teacher_logp=B.log_probs(s.tokens, s.vocab, dt, dev, gen, False),
        ),
        _torch_jsd,
        lambda s, e: (2 * s.tokens * s.vocab * e, 3 * s.tokens * s.vocab * e),
        {
            B.LIGER_KERNEL: B.liger_kernel(
                "liger_jsd", "student_logp", "teacher_logp", "shift_labels", "beta", "ignore_index"
            )
        },
    ),
)
