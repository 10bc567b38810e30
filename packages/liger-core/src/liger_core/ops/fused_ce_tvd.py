"""The `fused_ce_tvd` op: per-token cross-entropy and total variation distance against a teacher,
from one pass over the logits (liger-kernel 0.8.5's ``LigerFusedCETVDFunction``), declared once."""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, on_other_device, sample, set_item
from liger_core.ops import _losses as L
from liger_core.ops import _samples as S
from liger_core.ops.jsd import check_ignore_index

OP_NAME = "fused_ce_tvd"


def fused_ce_tvd(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    target: torch.Tensor,
    ignore_index: int = -100,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token cross-entropy of the student and total variation distance to the teacher.

    With ``p = softmax(student_logits)`` and ``q = softmax(teacher_logits)`` per row (computed in
    float32): ``ce = logsumexp(student) - student[target]`` and ``tvd = 0.5 * sum_v |p_v - q_v|``.
    Both are returned unreduced, one value per token, so the caller owns masking, weighting and
    normalisation. Rows whose target is ``ignore_index`` give 0 for both terms and a zero gradient.

    Args:
        student_logits: ``(tokens, vocab)``, float32, bfloat16 or float16 (receives the gradient;
            never modified).
        teacher_logits: ``(tokens, vocab)`` of any of those dtypes: a constant (no gradient).
        target: ``(tokens,)`` integer class indices in ``[0, vocab)`` or ``ignore_index``.
        ignore_index: the target of rows to skip.

    Returns:
        ``(ce, tvd)``, both float32 ``(tokens,)``. Backward gives ``grad_student_logits``
        (``student_logits.dtype``): ``grad_ce * (p - onehot(target)) + grad_tvd * 0.5 * p * (s -
        sum_u p_u s_u)`` with ``s = sign(p - q)`` (0 where ``p == q``, as ``torch.abs``'s gradient).
    """
    check_args(student_logits, teacher_logits, target, ignore_index)
    L.label_stats(OP_NAME, target, ignore_index, student_logits.shape[1])
    ce, tvd = math(student_logits, teacher_logits, target, ignore_index)
    return ce.float(), tvd.float()


def check_args(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, target: torch.Tensor, ignore_index: int
) -> None:
    """Raise a clear error for arguments outside the contract (target values: the contract's
    `_losses.label_stats`, vendors' own device-side count)."""
    try:
        if (
            L.distributions_ok(student_logits, teacher_logits)
            and student_logits.shape[1] > 0
            and isinstance(target, torch.Tensor)
            and target.dtype in L.INDEX_DTYPES
            and target.shape == student_logits.shape[:1]
            and target.device == student_logits.device
            and type(ignore_index) is int
        ):
            return
    except (AttributeError, TypeError, IndexError):
        pass
    L.check_distributions(OP_NAME, "student_logits", student_logits, "teacher_logits", teacher_logits)
    L.check_vocab(OP_NAME, "student_logits", student_logits.shape[1])
    L.check_labels(OP_NAME, "target", target, student_logits.shape[0], student_logits.device)
    check_ignore_index(OP_NAME, ignore_index)


def math(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, target: torch.Tensor, ignore_index: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ce, tvd)`` by the formula, differentiable in ``student_logits`` (float64 for the oracle,
    else float32)."""
    compute = torch.float64 if student_logits.dtype == torch.float64 else torch.float32
    s = student_logits.to(compute)
    t = teacher_logits.detach().to(compute)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[:, None])
    # q the way p is computed: on rows where the teacher equals the student, p == q exactly (a tie).
    q = torch.exp(t - torch.logsumexp(t, dim=-1)[:, None])
    valid = target != ignore_index
    safe = torch.where(valid, target, torch.zeros((), dtype=target.dtype, device=target.device)).long()
    ce = lse - s.gather(1, safe[:, None]).squeeze(1)
    tvd = 0.5 * (p - q).abs().sum(-1)
    zero = torch.zeros((), dtype=compute, device=s.device)
    return torch.where(valid, ce, zero), torch.where(valid, tvd, zero)


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(4, 10), dtype=torch.float32, seed=0, ignored=0.25, teacher_dtype=None, ties=False, **options):
    """Student and teacher logits of O(2) spread, targets with some rows ignored; ``ties``: the
    teacher equals the student on every other row (p == q exactly: the tie's zero gradient)."""
    n, vocab = shape
    g = S.gen(seed)
    student = S.normal(shape, g, 2.0)
    teacher = S.normal(shape, g, 2.0)
    if ties:
        teacher[::2] = student[::2]
    target = S.labels(n, vocab, seed, options.get("ignore_index", -100), ignored).to(device)
    return dict(
        student_logits=S.to(device, dtype, student),
        teacher_logits=S.to(device, teacher_dtype or dtype, teacher),
        target=target,
        **options,
    )


def samples():
    # One element, odd sizes, rows wider than any vendor's block (several vocabulary chunks).
    shapes = ((1, 1), (4, 7), (9, 33), (33, 130), (3, 9000))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    yield from S.grid(args, dict(dtype=S.OPTION_DTYPES), shape=(21, 300), seed=3, ties=True)
    yield sample(args, shape=(12, 50), seed=4, teacher_dtype=torch.float32, dtype=torch.bfloat16)
    yield sample(args, shape=(6, 40), ignored="all")
    yield sample(args, shape=(12, 30), seed=5, ignore_index=3)
    # One output unused downstream (its gradient is None, not zeros).
    yield sample(args, shape=(10, 70), seed=6, unused_outputs=("tvd",))
    yield sample(args, shape=(10, 70), seed=7, unused_outputs=("ce",))
    yield sample(args, shape=(0, 20))


def _torch_fused_ce_tvd(student_logits, teacher_logits, target, ignore_index=-100):
    """The two terms as a distillation loop writes them in PyTorch."""
    ce = torch.nn.functional.cross_entropy(student_logits.float(), target, ignore_index=ignore_index, reduction="none")
    p = torch.softmax(student_logits.float(), -1)
    q = torch.softmax(teacher_logits.float(), -1)
    tvd = 0.5 * (p - q).abs().sum(-1) * (target != ignore_index)
    return ce, tvd


def _liger_kernel_fused_ce_tvd():
    # Not in liger-kernel's functional module: its autograd Function (what LigerFusedCETVDLoss calls).
    from liger_kernel.ops import LigerFusedCETVDFunction

    return lambda student_logits, teacher_logits, target, ignore_index=-100: LigerFusedCETVDFunction.apply(
        student_logits, teacher_logits, target, ignore_index
    )


OP = Op(
    fused_ce_tvd,
    since=(1, 7),
    math=math,
    outputs=("ce", "tvd"),
    grads=("student_logits",),
    samples=samples,
    smoke=S.vocab_smoke(args),
    error_sample=sample(args, ignored=0.0),
    errors=(
        bad(
            "shape",
            ValueError,
            r"teacher_logits must have student_logits's shape \(4, 10\); got \(4, 9\)",
            teacher_logits=lambda t: t[:, :9],
        ),
        bad(
            "target_shape",
            ValueError,
            r"target must have shape \(tokens,\) = \(4,\); got \(3,\)",
            target=lambda t: t[:3],
        ),
        bad("target_float", TypeError, r"target must have an integer dtype", target=lambda t: t.float()),
        bad("target_range", ValueError, r"target.*\[0, 10\).*first: 12", target=set_item(1, 12)),
        bad("student_int", TypeError, r"student_logits must have dtype", student_logits=lambda x: x.long()),
        bad("teacher_device", ValueError, r"one device", teacher_logits=on_other_device),
        bad("ignore_index", TypeError, r"ignore_index must be an int; got 1.5", ignore_index=1.5),
    ),
    checks=Checks(out_dtypes=lambda a: (torch.float32, torch.float32)),
    # liger-kernel has no benchmark script of its own for this op; its benchmark_tvd.py runs
    # (B * T = 8 * 2048 tokens, vocab 2**12 .. 2**17): here the model configs' (tokens, vocab),
    # `--sweep vocab=4096,...,131072` for liger-kernel's sweep.
    bench=B.vocab_rows(
        lambda s, dt, dev, gen: dict(
            student_logits=B.normal((s.tokens, s.vocab), dt, dev, gen),
            teacher_logits=B.normal((s.tokens, s.vocab), dt, dev, gen, grad=False),
            target=B.targets(s.tokens, s.vocab, dev, gen),
        ),
        _torch_fused_ce_tvd,
        # Forward reads both logits twice (lse pass, tvd pass); backward reads both and writes grad.
        lambda s, e: (4 * s.tokens * s.vocab * e + 20 * s.tokens, 3 * s.tokens * s.vocab * e + 28 * s.tokens),
        {B.LIGER_KERNEL: B.Peer(_liger_kernel_fused_ce_tvd)},
    ),
)
