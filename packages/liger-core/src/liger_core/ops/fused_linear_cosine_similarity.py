"""The `fused_linear_cosine_similarity` op: liger-kernel's cosine-similarity distillation loss
(the student's and teacher's lm_heads, a hard cross-entropy term and a soft cosine term) without
the logits, declared once."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, sample
from liger_core.op import always as _always
from liger_core.ops import _losses as L
from liger_core.ops import _samples as S
from liger_core.ops._checks import check_same_dtype

OP_NAME = "fused_linear_cosine_similarity"
# F.normalize's and F.cosine_similarity's floors, as liger-kernel calls them.
NORM_EPS = 1e-12
COSINE_EPS = 1e-8


def fused_linear_cosine_similarity(
    student_input: torch.Tensor,
    student_weight: torch.Tensor,
    teacher_input: torch.Tensor,
    teacher_weight: torch.Tensor,
    true_labels: torch.Tensor,
    student_bias: torch.Tensor | None = None,
    teacher_bias: torch.Tensor | None = None,
    weight_hard_loss: float = 0.5,
    weight_soft_loss: float = 0.5,
    beta: float = 0.5,
    ignore_index: int = -100,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """liger-kernel 0.8.5's ``LigerFusedLinearCosineSimilarityFunction`` without materialising
    all logits::

        s = student_input @ student_weight.T + student_bias
        t = teacher_input @ teacher_weight.T + teacher_bias            (no gradient)
        n = max(number of rows whose true_labels != ignore_index, 1)
        hard_loss = sum over counted rows of cross_entropy(s, true_labels) / n
        soft_loss = sum over counted rows of beta * (1 - cos(normalize(s / T), normalize(t / T))) / n
        loss = weight_hard_loss * hard_loss + weight_soft_loss * soft_loss

    (``normalize`` and ``cos`` as ``torch.nn.functional.normalize`` and ``cosine_similarity`` with
    their default floors; the hard term uses the logits before the temperature.)

    Args:
        student_input: ``(tokens, hidden)``, float32, bfloat16 or float16.
        student_weight: ``(vocab, hidden)``, ``student_input``'s dtype.
        teacher_input: ``(tokens, teacher_hidden)``.
        teacher_weight: ``(vocab, teacher_hidden)``, ``teacher_input``'s dtype.
        true_labels: ``(tokens,)`` integer labels in ``[0, vocab)`` or ``ignore_index``.
        student_bias, teacher_bias: ``(vocab,)`` in their input's dtype, or None.
        weight_hard_loss, weight_soft_loss, beta: the terms' weights.
        ignore_index: label of rows to skip.
        temperature: divides the logits of the soft term; nonzero.

    Returns:
        ``(loss, soft_loss, hard_loss)``, float32 scalars; only ``loss`` carries a gradient. The
        logits are float32 products of the inputs. Backward gives ``grad_student_input``,
        ``grad_student_weight`` and ``grad_student_bias`` in their dtypes.
    """
    args = (student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias, teacher_bias)
    options = (weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature)
    check_args(*args, *options)
    L.label_stats(OP_NAME, true_labels, ignore_index, student_weight.shape[0])
    return tuple(t.float() for t in math(*args, *options))


def check_args(
    student_input: torch.Tensor,
    student_weight: torch.Tensor,
    teacher_input: torch.Tensor,
    teacher_weight: torch.Tensor,
    true_labels: torch.Tensor,
    student_bias: torch.Tensor | None,
    teacher_bias: torch.Tensor | None,
    weight_hard_loss: float,
    weight_soft_loss: float,
    beta: float,
    ignore_index: int,
    temperature: float,
) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first; the
    labels' range is `_losses.label_stats`, one device read)."""
    check_distillation_args(
        OP_NAME, student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias,
        teacher_bias, weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature,
    )  # fmt: skip


def check_distillation_args(
    op, student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias, teacher_bias,
    weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature,
) -> None:  # fmt: skip
    """The checks of liger-kernel's chunked distillation losses' arguments (this op's and
    `fused_linear_jsd_loss`'s), under ``op``'s name."""
    try:
        dev = student_input.device
        vocab = student_weight.shape[0]
        if (
            L.is_float(student_input)
            and student_input.ndim == 2
            and student_weight.dtype == student_input.dtype
            and student_weight.ndim == 2
            and student_weight.shape[1] == student_input.shape[1]
            and L.is_float(teacher_input)
            and teacher_input.ndim == 2
            and teacher_input.shape[0] == student_input.shape[0]
            and teacher_weight.dtype == teacher_input.dtype
            and teacher_weight.shape == (vocab, teacher_input.shape[1])
            and student_weight.device == teacher_input.device == teacher_weight.device == dev
            and true_labels.dtype in L.INDEX_DTYPES
            and true_labels.shape == student_input.shape[:1]
            and true_labels.device == dev
            and (student_bias is None or (student_bias.dtype == student_input.dtype and student_bias.shape == (vocab,)))
            and (teacher_bias is None or (teacher_bias.dtype == teacher_input.dtype and teacher_bias.shape == (vocab,)))
            and all(b is None or b.device == dev for b in (student_bias, teacher_bias))
            and all(type(v) in (int, float) for v in (weight_hard_loss, weight_soft_loss, beta))
            and type(ignore_index) is int
            and temperature != 0
        ):
            return
    except (AttributeError, TypeError):
        pass
    L.check_matrix(op, "student_input", student_input, "(tokens, hidden)")
    L.check_matrix(op, "student_weight", student_weight, "(vocab, hidden)")
    L.check_matrix(op, "teacher_input", teacher_input, "(tokens, teacher_hidden)")
    L.check_matrix(op, "teacher_weight", teacher_weight, "(vocab, teacher_hidden)")
    L.check_same_device(
        op,
        student_input=student_input,
        student_weight=student_weight,
        teacher_input=teacher_input,
        teacher_weight=teacher_weight,
        student_bias=student_bias,
        teacher_bias=teacher_bias,
    )
    vocab = student_weight.shape[0]
    for name, w, x in (("student", student_weight, student_input), ("teacher", teacher_weight, teacher_input)):
        check_same_dtype(op, f"{name}_weight", w, f"{name}_input", x)
        if w.shape[1] != x.shape[1]:
            raise ValueError(
                f"{op}: {name}_weight must have shape (vocab, {x.shape[1]}) to match {name}_input; got {tuple(w.shape)}"
            )
    if teacher_weight.shape[0] != vocab:
        raise ValueError(
            f"{op}: teacher_weight must have the student's vocab {vocab} rows; got {tuple(teacher_weight.shape)}"
        )
    if teacher_input.shape[0] != student_input.shape[0]:
        raise ValueError(
            f"{op}: teacher_input must have student_input's {student_input.shape[0]} tokens; "
            f"got {tuple(teacher_input.shape)}"
        )
    L.check_labels(op, "true_labels", true_labels, student_input.shape[0], student_input.device)
    for name, b, x in (("student_bias", student_bias, student_input), ("teacher_bias", teacher_bias, teacher_input)):
        if b is None:
            continue
        if b.dtype != x.dtype or b.shape != (vocab,):
            raise ValueError(
                f"{op}: {name} must have shape ({vocab},) and dtype {str(x.dtype).removeprefix('torch.')}; "
                f"got {tuple(b.shape)} {str(b.dtype).removeprefix('torch.')}"
            )
    for name, v in (("weight_hard_loss", weight_hard_loss), ("weight_soft_loss", weight_soft_loss), ("beta", beta)):
        if type(v) not in (int, float):
            raise TypeError(f"{op}: {name} must be a number; got {v!r}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{op}: ignore_index must be an int; got {ignore_index!r}")
    if not isinstance(temperature, (int, float)) or temperature == 0:
        raise ValueError(f"{op}: temperature must be a nonzero number; got {temperature!r}")


def logits(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``input @ weight.T + bias`` (float64 in, float64 out; else float32 products)."""
    compute = torch.float64 if input.dtype == torch.float64 else torch.float32
    out = input.to(compute) @ weight.to(compute).t()
    return out if bias is None else out + bias.to(compute)


def math(
    student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias, teacher_bias,
    weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """The formula, differentiable in the student's tensors (float64 for the oracle, else float32)."""
    s = logits(student_input, student_weight, student_bias)
    t = logits(teacher_input.detach(), teacher_weight.detach(), None if teacher_bias is None else teacher_bias.detach())
    counted = true_labels != ignore_index
    n = counted.sum().clamp(min=1).to(s.dtype)
    safe = torch.where(counted, true_labels, 0).long()
    ce = torch.logsumexp(s, -1) - s.gather(-1, safe[:, None]).squeeze(-1)
    zero = torch.zeros((), dtype=s.dtype, device=s.device)
    hard = torch.where(counted, ce, zero).sum() / n
    cos = F.cosine_similarity(
        F.normalize(s / temperature, p=2, dim=-1, eps=NORM_EPS),
        F.normalize(t / temperature, p=2, dim=-1, eps=NORM_EPS),
        dim=-1,
        eps=COSINE_EPS,
    )
    soft = torch.where(counted, beta * (1 - cos), zero).sum() / n
    loss = weight_hard_loss * hard + weight_soft_loss * soft
    return loss, soft.detach(), hard.detach()


def cosine_rows(s: torch.Tensor, t: torch.Tensor, temperature: float, coef: torch.Tensor | None):
    """For the backends, on float32 chunks of logits: per row ``1 - cos(normalize(s / T),
    normalize(t / T))``; with ``coef`` (per row), also ``coef * d(1 - cos)/ds`` written over ``t``:
    with ``u = s / T`` and ``û``, ``t̂`` the normalised rows, ``d(1 - cos)/ds = -(t̂ - cos * û) /
    (T * |u|)``."""
    s_len = torch.linalg.vector_norm(s, dim=-1) / abs(temperature)
    t_len = torch.linalg.vector_norm(t, dim=-1) / abs(temperature)
    s_scale = 1.0 / (temperature * s_len.clamp_min(NORM_EPS))  # û = s * s_scale
    t_scale = 1.0 / (temperature * t_len.clamp_min(NORM_EPS))
    u_len, v_len = s_len * s_scale.abs() * abs(temperature), t_len * t_scale.abs() * abs(temperature)
    cos = (s * t).sum(-1) * s_scale * t_scale / (u_len * v_len).clamp_min(COSINE_EPS)
    if coef is not None:
        g = -coef / (temperature * s_len.clamp_min(NORM_EPS))
        t.mul_((t_scale * g)[:, None]).sub_(s * (cos * s_scale * g)[:, None])
    return 1.0 - cos


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(4, 8, 12, 20), dtype=torch.float32, seed=0, ignored=0.25, bias=False, **options):
    """(tokens, hidden, teacher_hidden, vocab): both inputs and lm_heads (O(2) logits), labels
    with some rows ignored, optional biases."""
    n, hidden, teacher_hidden, vocab = shape
    g = S.gen(seed)
    xs = S.to(device, dtype, S.normal((n, hidden), g))
    ws = S.to(device, dtype, S.normal((vocab, hidden), g, 2.0 / max(hidden, 1) ** 0.5))
    xt = S.to(device, dtype, S.normal((n, teacher_hidden), g))
    wt = S.to(device, dtype, S.normal((vocab, teacher_hidden), g, 2.0 / max(teacher_hidden, 1) ** 0.5))
    bs = S.to(device, dtype, S.normal((vocab,), g, 0.5)) if bias else None
    bt = S.to(device, dtype, S.normal((vocab,), g, 0.5)) if bias else None
    lab = S.labels(n, vocab, seed, options.get("ignore_index", -100), ignored).to(device)
    return dict(
        student_input=xs,
        student_weight=ws,
        teacher_input=xt,
        teacher_weight=wt,
        true_labels=lab,
        student_bias=bs,
        teacher_bias=bt,
        **options,
    )


def samples():
    shapes = ((1, 8, 8, 5), (7, 16, 12, 33), (5, 16, 24, 9000), (130, 8, 16, 40))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    for hard, soft, beta, temperature in (
        (0.5, 0.5, 0.5, 1.0),
        (0.0, 1.0, 1.0, 2.0),
        (1.0, 0.0, 0.5, 1.0),
        (0.3, 0.7, 0.2, -0.7),
    ):
        yield from S.grid(
            args,
            dict(dtype=S.OPTION_DTYPES, bias=(False, True)),
            grad_scalar=1.5,
            shape=(37, 16, 24, 130),
            seed=3,
            weight_hard_loss=hard,
            weight_soft_loss=soft,
            beta=beta,
            temperature=temperature,
        )
    yield sample(args, shape=(6, 8, 8, 20), ignored="all")
    yield sample(args, shape=(0, 8, 8, 20))


def _scales(a, upstream):
    """The logits' gradient: CE's ``softmax + onehot`` and the cosine's ``(|t̂| + |ŝ|) / |s|``
    terms, times the weights over the counted rows: bound the products by them."""
    xs, ws = a["student_input"], a["student_weight"]
    if xs.shape[0] == 0:
        return {}
    s = logits(xs, ws, a["student_bias"])
    t = logits(a["teacher_input"], a["teacher_weight"], a["teacher_bias"])
    n = max(int((a["true_labels"] != a["ignore_index"]).sum()), 1)
    up = float(upstream["loss"].abs())
    ce = torch.softmax(s, -1) + 1.0
    cos = (t.abs() / t.norm(dim=-1, keepdim=True) + s.abs() / s.norm(dim=-1, keepdim=True)) / s.norm(
        dim=-1, keepdim=True
    )
    g = (abs(a["weight_hard_loss"]) * ce + abs(a["weight_soft_loss"] * a["beta"]) * cos) * up / n
    return {
        "loss": max(float((abs(a["weight_hard_loss"]) * torch.logsumexp(s, -1).abs()).sum() / n) + 1.0, 1e-3),
        "grad_student_input": L.grad_scale_through(g, ws),
        "grad_student_weight": L.grad_scale_through(g.t(), xs),
        "grad_student_bias": float(g.sum(0).max()),
    }


def _torch_cosine(student_input, student_weight, teacher_input, teacher_weight, true_labels, **kw):
    """The models' way: both logits in the input dtype, then the formula in float32."""
    s = F.linear(student_input, student_weight).float()
    with torch.no_grad():
        t = F.linear(teacher_input, teacher_weight).float()
    valid = true_labels != -100
    n = valid.sum().clamp(min=1)
    hard = (F.cross_entropy(s, true_labels, reduction="sum")) / n
    cos = F.cosine_similarity(F.normalize(s, dim=-1), F.normalize(t, dim=-1), dim=-1)
    soft = ((1 - cos) * 0.5 * valid).sum() / n
    return 0.5 * hard + 0.5 * soft


def liger_kernel_distillation(module_name: str) -> B.Peer:
    """liger-kernel's chunked distillation loss module ``module_name`` (of
    ``liger_kernel.chunked_loss``, imported when first used) at its defaults, called on the
    spec's inputs, lm_heads and labels (this op's peer and `fused_linear_jsd_loss`'s)."""

    def load():
        from liger_kernel import chunked_loss

        module = getattr(chunked_loss, module_name)()
        return lambda **kw: module(
            kw["student_input"], kw["student_weight"], kw["teacher_input"], kw["teacher_weight"], kw["true_labels"]
        )

    return B.Peer(load)


OP = Op(
    fused_linear_cosine_similarity,
    since=(1, 6),
    math=math,
    outputs=("loss", "soft_loss", "hard_loss"),
    no_grad_outputs=("soft_loss", "hard_loss"),
    grads=("student_input", "student_weight", "student_bias"),
    grads_in_forward=_always,
    samples=samples,
    smoke=(sample(args, shape=(3, 8, 8, 5)), sample(args, shape=(20, 16, 12, 700))),
    error_sample=sample(args, ignored=0.0),
    errors=(
        bad(
            "vocab",
            ValueError,
            r"teacher_weight must have the student's vocab 20 rows; got \(19, 12\)",
            teacher_weight=lambda w: w[:19],
        ),
        bad(
            "labels_shape",
            ValueError,
            r"true_labels must have shape \(tokens,\) = \(4,\); got \(3,\)",
            true_labels=lambda t: t[:3],
        ),
        bad(
            "labels_range",
            ValueError,
            r"every target must be in \[0, 20\) or equal ignore_index=-100; 1 are not \(first: 20\)",
            true_labels=lambda t: torch.where(torch.arange(t.numel(), device=t.device) == 2, 20, t),
        ),
        bad("temperature", ValueError, r"temperature must be a nonzero number; got 0", temperature=0),
        bad("beta", TypeError, r"beta must be a number; got None", beta=None),
        bad(
            "dtype",
            TypeError,
            r"student_weight must have student_input's dtype float32; got bfloat16",
            student_weight=lambda w: w.bfloat16(),
        ),
    ),
    checks=Checks(out_dtypes=lambda a: (torch.float32,) * 3, atol_scales=_scales),
    bench=B.BenchSpec(
        group="losses",
        axes=("tokens", "hidden", "vocab"),
        layouts={
            "rows": lambda s, dt, dev, gen: dict(
                student_input=B.hidden_states(s, dt, dev, gen),
                student_weight=B.lm_head(s, dt, dev, gen),
                teacher_input=B.normal((s.tokens, s.hidden), dt, dev, gen, grad=False),
                teacher_weight=B.lm_head(s, dt, dev, gen, grad=False),
                true_labels=B.targets(s.tokens, s.vocab, dev, gen),
            )
        },
        torch_fn=_torch_cosine,
        traffic=lambda s, e: (
            2 * (s.tokens + s.vocab) * s.hidden * e,
            3 * (s.tokens + s.vocab) * s.hidden * e + 2 * (s.tokens + s.vocab) * s.hidden * e,
        ),
        describe=B.linear_text,
        flops=lambda s: (4 * s.tokens * s.hidden * s.vocab, 4 * s.tokens * s.hidden * s.vocab),
        peers={B.LIGER_KERNEL: liger_kernel_distillation("LigerFusedLinearCosineSimilarityLoss")},
    ),
)
