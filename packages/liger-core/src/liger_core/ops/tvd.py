"""The `tvd` op (total variation distance, liger-kernel's semantics), declared once."""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, sample
from liger_core.ops import _losses as L
from liger_core.ops import _samples as S
from liger_core.ops.jsd import check_ignore_index, labels_ok

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
    check_args(p, q, shift_labels, reduction, ignore_index)
    return math(p, q, shift_labels, reduction, ignore_index).float()


def check_args(
    p: torch.Tensor, q: torch.Tensor, shift_labels: torch.Tensor | None, reduction: str, ignore_index: int
) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if (
            L.distributions_ok(p, q)
            and labels_ok(shift_labels, p)
            and reduction in REDUCTIONS
            and type(ignore_index) is int
        ):
            return
    except (AttributeError, TypeError):
        pass
    op = "tvd"
    L.check_distributions(op, "p", p, "q", q)
    if shift_labels is not None:
        L.check_labels(op, "shift_labels", shift_labels, p.shape[0], p.device)
    L.check_reduction(op, reduction, REDUCTIONS)
    check_ignore_index(op, ignore_index)


def math(
    p: torch.Tensor, q: torch.Tensor, shift_labels: torch.Tensor | None, reduction: str, ignore_index: int
) -> torch.Tensor:
    """The formula, differentiable in ``p`` (float64 for the oracle, else float32)."""
    compute = torch.float64 if p.dtype == torch.float64 else torch.float32
    x = p.to(compute)
    loss = 0.5 * (x - q.detach().to(compute)).abs()
    loss, n = L.drop_ignored_rows(loss, shift_labels, ignore_index)
    return L.reduce_divergence(loss, reduction, n)


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(4, 10), dtype=torch.float32, seed=0, labels=True, ignored=0.25, **options):
    """Two rows of probabilities with a tie in the first column (where |p - q|'s gradient is 0)."""
    n, vocab = shape
    g = S.gen(seed)
    p = torch.softmax(S.normal(shape, g, 2), -1).to(dtype)
    q = torch.softmax(S.normal(shape, g, 2), -1).to(dtype)
    q[:, :1] = p[:, :1]
    lab = S.labels(n, vocab, seed, options.get("ignore_index", -100), ignored).to(device) if labels else None
    return dict(p=p.to(device), q=q.to(device), shift_labels=lab, **options)


def samples():
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=((1, 1), (4, 7), (9, 33), (33, 130), (3, 40000))))
    yield from S.grid(
        args,
        dict(dtype=S.OPTION_DTYPES, labels=(False, True), reduction=REDUCTIONS),
        grad_scalar=2.0,
        shape=(21, 300),
        seed=3,
    )
    yield from S.grid(args, dict(reduction=REDUCTIONS), shape=(5, 40), ignored="all")
    yield sample(args, shape=(12, 30), seed=5, ignore_index=3, reduction="mean")


OP = Op(
    tvd,
    since=(1, 3),
    math=math,
    outputs=("loss",),
    grads=("p",),
    samples=samples,
    smoke=S.vocab_smoke(args),
    error_sample=sample(args),
    errors=(
        bad("shape", ValueError, r"q must have p's shape \(4, 10\); got \(4, 9\)", q=lambda q: q[:, :9]),
        bad(
            "labels_shape",
            ValueError,
            r"shift_labels must have shape \(tokens,\) = \(4,\); got \(3,\)",
            shift_labels=lambda t: t[:3],
        ),
        bad("labels_float", TypeError, r"shift_labels must have an integer dtype", shift_labels=lambda t: t.float()),
        bad("reduction", ValueError, r"reduction must be one of", reduction="avg"),
        bad("p_int", TypeError, r"p must have dtype", p=lambda p: p.long()),
    ),
    checks=Checks(out_dtypes=lambda a: (torch.float32,)),
    bench=B.vocab_rows(
        lambda s, dt, dev, gen: dict(
            p=B.probs(s.tokens, s.vocab, dt, dev, gen, True),
            q=B.probs(s.tokens, s.vocab, dt, dev, gen, False),
        ),
        lambda p, q, shift_labels=None, reduction="batchmean", ignore_index=-100: (
            0.5 * (p.float() - q.float()).abs().sum() / p.shape[0]
        ),
        lambda s, e: (2 * s.tokens * s.vocab * e, 3 * s.tokens * s.vocab * e),
        {B.LIGER_KERNEL: B.liger_kernel("liger_tvd", "p", "q", "shift_labels", "reduction", "ignore_index")},
    ),
)
