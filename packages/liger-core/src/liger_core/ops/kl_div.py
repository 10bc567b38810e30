"""The `kl_div` op: the KL divergence of ``torch.nn.functional.kl_div``, declared once."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, sample
from liger_core.ops import _losses as L
from liger_core.ops import _samples as S
from liger_core.ops._checks import check_eps, check_flag

REDUCTIONS = L.DIV_REDUCTIONS


def kl_div(
    y_pred: torch.Tensor,
    y_true: torch.Tensor,
    reduction: str = "batchmean",
    log_target: bool = False,
    eps: float = 1e-10,
) -> torch.Tensor:
    """Kullback-Leibler divergence ``KL(y_true || exp(y_pred))`` per element, as
    ``torch.nn.functional.kl_div`` (the semantics of liger-kernel 0.8.5)::

        log_target=False: loss = y_true * (log(max(y_true, eps)) - y_pred)
        log_target=True:  loss = exp(y_true) * (y_true - y_pred)

    Args:
        y_pred: ``(tokens, vocab)`` log-probabilities, float32, bfloat16 or float16.
        y_true: ``(tokens, vocab)`` probabilities (log-probabilities with ``log_target``), any
            of those dtypes. A constant: it gets no gradient.
        reduction: ``"batchmean"`` (sum / tokens), ``"sum"``, ``"mean"`` (sum / elements) or
            ``"none"`` (per element).
        log_target: whether ``y_true`` holds log-probabilities.
        eps: floor of ``y_true`` inside the log (so ``y_true = 0`` gives 0), ``>= 0``.

    Returns:
        float32: a scalar, or ``(tokens, vocab)`` for ``"none"``. Backward gives ``grad_y_pred``
        (``y_pred.dtype``): ``-y_true`` (``-exp(y_true)``) times the incoming gradient, divided
        by tokens (``batchmean``) or elements (``mean``). An empty batch gives 0.
    """
    check_args(y_pred, y_true, reduction, log_target, eps)
    return math(y_pred, y_true, reduction, log_target, eps).float()


def check_args(y_pred: torch.Tensor, y_true: torch.Tensor, reduction: str, log_target: bool, eps: float) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if L.distributions_ok(y_pred, y_true) and reduction in REDUCTIONS and type(log_target) is bool and eps >= 0:
            return
    except (AttributeError, TypeError):
        pass
    op = "kl_div"
    L.check_distributions(op, "y_pred", y_pred, "y_true", y_true)
    L.check_reduction(op, reduction, REDUCTIONS)
    check_flag(op, "log_target", log_target)
    check_eps(op, eps)


def math(y_pred: torch.Tensor, y_true: torch.Tensor, reduction: str, log_target: bool, eps: float) -> torch.Tensor:
    """The formula, differentiable in ``y_pred`` (float64 for the oracle, else float32)."""
    compute = torch.float64 if y_pred.dtype == torch.float64 else torch.float32
    x = y_pred.to(compute)
    t = y_true.detach().to(compute)
    loss = torch.exp(t) * (t - x) if log_target else t * (torch.log(torch.clamp_min(t, eps)) - x)
    return L.reduce_divergence(loss, reduction, x.shape[0])


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(4, 10), dtype=torch.float32, seed=0, true_dtype=None, **options):
    """y_pred log-probabilities; y_true probabilities (a few exact zeros: the eps floor inside
    the log) or, with ``log_target``, log-probabilities."""
    g = S.gen(seed)
    y_pred = S.to(device, dtype, torch.log_softmax(S.normal(shape, g, 2), -1))
    t = S.normal(shape, g, 2)
    if options.get("log_target"):
        y_true = torch.log_softmax(t, -1)
    else:
        y_true = torch.softmax(t, -1)
        y_true[torch.rand(shape, generator=g) < 0.1] = 0.0
    return dict(y_pred=y_pred, y_true=S.to(device, true_dtype or dtype, y_true), **options)


def samples():
    shapes = ((1, 1), (4, 7), (9, 33), (33, 130), (3, 40000), (0, 16))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    yield from S.grid(
        args,
        dict(dtype=S.OPTION_DTYPES, log_target=(False, True), reduction=REDUCTIONS),
        grad_scalar=1.5,
        shape=(19, 257),
        seed=2,
    )
    yield sample(args, shape=(7, 50), dtype=torch.bfloat16, seed=4, true_dtype=torch.float32, reduction="sum", eps=1e-3)


def _scales(a, upstream):
    # Elements y_true * log(y_true) and y_true * y_pred cancel: scale by the larger term.
    if a["reduction"] == "none":
        return {}
    div = {"batchmean": max(a["y_pred"].shape[0], 1), "mean": max(a["y_pred"].numel(), 1), "sum": 1}[a["reduction"]]
    dy = abs(float(upstream["loss"])) if upstream["loss"] is not None else 1.0
    return {"loss": float((a["y_true"].abs() * a["y_pred"].abs()).sum()) / div * dy}


OP = Op(
    kl_div,
    since=(1, 3),
    math=math,
    outputs=("loss",),
    grads=("y_pred",),
    samples=samples,
    smoke=S.vocab_smoke(args),
    error_sample=sample(args),
    errors=(
        bad("shape", ValueError, r"y_true must have y_pred's shape \(4, 10\); got \(4, 9\)", y_true=lambda t: t[:, :9]),
        bad(
            "one_d",
            ValueError,
            r"y_pred must be 2-D \(tokens, vocab\); got shape \(10,\)",
            y_pred=lambda t: t[0],
            y_true=lambda t: t[0],
        ),
        bad(
            "int", TypeError, r"y_true must have dtype float32, bfloat16, float16; got int64", y_true=lambda t: t.long()
        ),
        bad(
            "reduction",
            ValueError,
            r"reduction must be one of \('batchmean', 'sum', 'mean', 'none'\); got 'avg'",
            reduction="avg",
        ),
        bad("eps", ValueError, r"eps must be a number >= 0; got -1", eps=-1),
        bad("log_target", TypeError, r"log_target must be True or False; got 'yes'", log_target="yes"),
    ),
    checks=Checks(out_dtypes=lambda a: (torch.float32,), atol_scales=_scales),
    bench=B.vocab_rows(
        lambda s, dt, dev, gen: dict(
            y_pred=B.log_probs(s.tokens, s.vocab, dt, dev, gen, True),
            y_true=B.probs(s.tokens, s.vocab, dt, dev, gen, False),
        ),
        lambda y_pred, y_true, reduction="batchmean", log_target=False, eps=1e-10: F.kl_div(
            y_pred, y_true, reduction=reduction, log_target=log_target
        ),
        lambda s, e: (2 * s.tokens * s.vocab * e, 2 * s.tokens * s.vocab * e),
        {
            B.LIGER_KERNEL: B.liger_kernel(
                "liger_kl_div", "y_pred", "y_true", reduction="reduction", log_target="log_target", eps="eps"
            )
        },
    ),
)
