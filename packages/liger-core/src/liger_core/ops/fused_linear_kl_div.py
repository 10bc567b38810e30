"""The `fused_linear_kl_div` op: the student's lm_head and the KL divergence from a given target
distribution without the logits (liger-kernel 0.8.5's ``LigerFusedLinearKLDivLoss``), declared
once."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, sample
from liger_core.op import always as _always
from liger_core.ops import _losses as L
from liger_core.ops import _samples as S
from liger_core.ops._checks import check_eps, check_same_dtype

OP_NAME = "fused_linear_kl_div"
# "none" is not offered: the loss is a scalar, so the gradients are formed in the forward.
REDUCTIONS = ("batchmean", "mean", "sum")


def fused_linear_kl_div(
    student_input: torch.Tensor,
    student_weight: torch.Tensor,
    target: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    reduction: str = "batchmean",
    ignore_index: int = -100,
    temperature: float = 1.0,
    eps: float = 1e-10,
) -> torch.Tensor:
    """The student's lm_head projection and ``KL(target || softmax(logits / temperature))`` per
    row, without materialising all logits (liger-kernel 0.8.5's ``LigerFusedLinearKLDivFunction``)::

        logp = log_softmax(student_input @ student_weight.T / temperature)
        loss_row = sum_v target[v] * (log(max(target[v], eps)) - logp[v])

    Rows whose ``shift_labels`` equal ``ignore_index`` count for nothing (loss and gradient 0).
    With ``n`` the counted rows (all rows without labels): ``"batchmean"`` divides the sum by
    ``n``, ``"mean"`` by ``n * vocab``, ``"sum"`` not at all (no counted rows: 0).

    Args:
        student_input: ``(tokens, hidden)``, float32, bfloat16 or float16.
        student_weight: ``(vocab, hidden)``, ``student_input``'s dtype.
        target: ``(tokens, vocab)`` probabilities (the teacher's, e.g. cached soft labels),
            floating; gets no gradient.
        shift_labels: ``(tokens,)`` integer labels or None.
        reduction: ``"batchmean"``, ``"mean"`` or ``"sum"``.
        ignore_index: label of rows to skip.
        temperature: divides the logits; nonzero.
        eps: floor of ``target`` inside the log (``target = 0`` contributes 0), ``>= 0``.

    Returns:
        A float32 scalar. The logits are float32 products of the inputs. Backward gives
        ``grad_student_input`` and ``grad_student_weight`` in their dtypes.
    """
    args = (student_input, student_weight, target, shift_labels, reduction, ignore_index, temperature, eps)
    check_args(*args)
    return math(*args).float()


def check_args(
    student_input: torch.Tensor,
    student_weight: torch.Tensor,
    target: torch.Tensor,
    shift_labels: torch.Tensor | None,
    reduction: str,
    ignore_index: int,
    temperature: float,
    eps: float,
) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        dev = student_input.device
        if (
            L.is_float(student_input)
            and student_input.ndim == 2
            and student_weight.dtype == student_input.dtype
            and student_weight.ndim == 2
            and student_weight.shape[1] == student_input.shape[1]
            and student_weight.device == dev
            and L.is_float(target)
            and target.shape == (student_input.shape[0], student_weight.shape[0])
            and target.device == dev
            and (
                shift_labels is None
                or (
                    shift_labels.dtype in L.INDEX_DTYPES
                    and shift_labels.shape == student_input.shape[:1]
                    and shift_labels.device == dev
                )
            )
            and reduction in REDUCTIONS
            and type(ignore_index) is int
            and temperature != 0
            and eps >= 0
        ):
            return
    except (AttributeError, TypeError):
        pass
    op = OP_NAME
    L.check_matrix(op, "student_input", student_input, "(tokens, hidden)")
    L.check_matrix(op, "student_weight", student_weight, "(vocab, hidden)")
    L.check_matrix(op, "target", target, "(tokens, vocab)")
    L.check_same_device(op, student_input=student_input, student_weight=student_weight, target=target)
    check_same_dtype(op, "student_weight", student_weight, "student_input", student_input)
    if student_weight.shape[1] != student_input.shape[1]:
        raise ValueError(
            f"{op}: student_weight must have shape (vocab, {student_input.shape[1]}) to match student_input; "
            f"got {tuple(student_weight.shape)}"
        )
    want = (student_input.shape[0], student_weight.shape[0])
    if target.shape != want:
        raise ValueError(f"{op}: target must have shape (tokens, vocab) = {want}; got {tuple(target.shape)}")
    if shift_labels is not None:
        L.check_labels(op, "shift_labels", shift_labels, student_input.shape[0], student_input.device)
    L.check_reduction(op, reduction, REDUCTIONS)
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{op}: ignore_index must be an int; got {ignore_index!r}")
    if not isinstance(temperature, (int, float)) or temperature == 0:
        raise ValueError(f"{op}: temperature must be a nonzero number; got {temperature!r}")
    check_eps(op, eps)


def reduction_scale(reduction: str, n_rows: int, vocab: int) -> float:
    """The factor of the summed row losses: ``1 / n``, ``1 / (n * vocab)`` or 1 (``n`` at least 1)."""
    n = max(n_rows, 1)
    return 1.0 / n if reduction == "batchmean" else 1.0 / (n * max(vocab, 1)) if reduction == "mean" else 1.0


def counted_rows(shift_labels: torch.Tensor | None, ignore_index: int, n_rows: int) -> int:
    """Rows that count (one host read with labels)."""
    return L.label_count(OP_NAME, shift_labels, ignore_index, n_rows)


def math(
    student_input: torch.Tensor,
    student_weight: torch.Tensor,
    target: torch.Tensor,
    shift_labels: torch.Tensor | None,
    reduction: str,
    ignore_index: int,
    temperature: float,
    eps: float,
) -> torch.Tensor:
    """The formula, differentiable in the student's tensors (float64 for the oracle, else float32)."""
    compute = torch.float64 if student_input.dtype == torch.float64 else torch.float32
    logits = student_input.to(compute) @ student_weight.to(compute).t()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    q = target.detach().to(compute)
    rows = (q * (torch.log(torch.clamp_min(q, eps)) - logp)).sum(-1)
    if shift_labels is not None:
        valid = shift_labels != ignore_index
        rows = torch.where(valid, rows, torch.zeros((), dtype=compute, device=rows.device))
        n = valid.sum().clamp(min=1).to(compute)
    else:
        n = max(rows.shape[0], 1)
    total = rows.sum()
    if reduction == "batchmean":
        return total / n
    if reduction == "mean":
        return total / (n * logp.shape[-1])
    return total


# -- declaration ---------------------------------------------------------------------------------


def args(
    device, shape=(4, 8, 20), dtype=torch.float32, seed=0, labels=True, ignored=0.25, target_dtype=None, **options
):
    """(tokens, hidden, vocab): the student's input and lm_head (O(2) logits), a target
    distribution with some exact zeros (the eps floor), labels with ignored rows."""
    n, hidden, vocab = shape
    g = S.gen(seed)
    x = S.to(device, dtype, S.normal((n, hidden), g))
    w = S.to(device, dtype, S.normal((vocab, hidden), g, 2.0 / max(hidden, 1) ** 0.5))
    q = torch.softmax(S.normal((n, vocab), g, 2.0), -1)
    q = torch.where(torch.rand((n, vocab), generator=g) < 0.1, torch.zeros(()), q)
    q = q / q.sum(-1, keepdim=True).clamp_min(1e-30)
    target = q.to(device=device, dtype=target_dtype or torch.float32)
    lab = S.labels(n, vocab, seed, options.get("ignore_index", -100), ignored).to(device) if labels else None
    return dict(student_input=x, student_weight=w, target=target, shift_labels=lab, **options)


def samples():
    shapes = ((1, 8, 5), (7, 16, 33), (5, 16, 9000), (130, 8, 40))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    for reduction in REDUCTIONS:
        yield from S.grid(
            args,
            dict(dtype=S.OPTION_DTYPES, labels=(False, True)),
            grad_scalar=1.5,
            shape=(37, 16, 130),
            seed=3,
            reduction=reduction,
            temperature=0.7,
        )
    yield sample(args, shape=(9, 8, 50), seed=5, target_dtype=torch.bfloat16, temperature=2.0)
    yield sample(args, shape=(6, 8, 20), ignored="all")
    yield sample(args, shape=(0, 8, 20))


def _scales(a, upstream):
    """The logits' gradient is ``(softmax * sum(q) - q) / T`` per counted row: bound it by its terms."""
    x, w, q = a["student_input"], a["student_weight"], a["target"]
    if x.shape[0] == 0:
        return {}
    n = counted_rows(a["shift_labels"], a["ignore_index"], x.shape[0])
    scale = reduction_scale(a["reduction"], n, w.shape[0]) * float(upstream["loss"].abs())
    p = torch.softmax(x @ w.t() / a["temperature"], -1)
    g = (p * q.sum(-1, keepdim=True) + q) * scale / abs(a["temperature"])
    terms = (q * (torch.log(torch.clamp_min(q, a["eps"])).abs() + torch.log(p).abs())).sum() * scale
    return {
        "loss": max(float(terms), 1e-6),
        "grad_student_input": L.grad_scale_through(g, w),
        "grad_student_weight": L.grad_scale_through(g.t(), x),
    }


def _torch_fused_linear_kl_div(student_input, student_weight, target, shift_labels=None, **kw):
    """The models' way: the logits in the input dtype, then torch's KLDivLoss."""
    logp = (F.linear(student_input, student_weight).float() / kw.get("temperature", 1.0)).log_softmax(-1)
    return F.kl_div(logp, target, reduction=kw.get("reduction", "batchmean"))


def _liger_kernel_module():
    """liger-kernel 0.8.5's ``LigerFusedLinearKLDivLoss`` (batchmean), called with the spec's names."""
    from liger_kernel.transformers.fused_linear_kl_div import LigerFusedLinearKLDivLoss

    return LigerFusedLinearKLDivLoss()


OP = Op(
    fused_linear_kl_div,
    since=(1, 6),
    math=math,
    outputs=("loss",),
    grads=("student_input", "student_weight"),
    grads_in_forward=_always,
    samples=samples,
    smoke=(sample(args, shape=(3, 8, 5)), sample(args, shape=(20, 16, 700))),
    error_sample=sample(args),
    errors=(
        bad(
            "target_shape",
            ValueError,
            r"target must have shape \(tokens, vocab\) = \(4, 20\); got \(4, 19\)",
            target=lambda t: t[:, :19],
        ),
        bad(
            "hidden",
            ValueError,
            r"student_weight must have shape \(vocab, 8\) to match student_input",
            student_weight=lambda w: w[:, :7],
        ),
        bad(
            "reduction",
            ValueError,
            r"reduction must be one of \('batchmean', 'mean', 'sum'\); got 'none'",
            reduction="none",
        ),
        bad("temperature", ValueError, r"temperature must be a nonzero number; got 0", temperature=0),
        bad("eps", ValueError, r"eps must be a number >= 0; got -1", eps=-1),
        bad(
            "labels_shape",
            ValueError,
            r"shift_labels must have shape \(tokens,\) = \(4,\); got \(3,\)",
            shift_labels=lambda t: t[:3],
        ),
        bad(
            "dtype",
            TypeError,
            r"student_weight must have student_input's dtype float32; got bfloat16",
            student_weight=lambda w: w.bfloat16(),
        ),
    ),
    checks=Checks(out_dtypes=lambda a: (torch.float32,), atol_scales=_scales),
    bench=B.BenchSpec(
        group="losses",
        axes=("tokens", "hidden", "vocab"),
        layouts={
            "rows": lambda s, dt, dev, gen: dict(
                student_input=B.hidden_states(s, dt, dev, gen),
                student_weight=B.lm_head(s, dt, dev, gen),
                target=torch.softmax(B.normal((s.tokens, s.vocab), torch.float32, dev, gen, grad=False), -1),
            )
        },
        torch_fn=_torch_fused_linear_kl_div,
        # forward: the lm_head and a read of the target; backward: the two gradient GEMMs.
        traffic=lambda s, e: (
            (s.tokens + s.vocab) * s.hidden * e + 4 * s.tokens * s.vocab,
            3 * (s.tokens + s.vocab) * s.hidden * e,
        ),
        describe=B.linear_text,
        flops=lambda s: (2 * s.tokens * s.hidden * s.vocab, 4 * s.tokens * s.hidden * s.vocab),
        peers={B.LIGER_KERNEL: B.Peer(_liger_kernel_module)},
    ),
)
