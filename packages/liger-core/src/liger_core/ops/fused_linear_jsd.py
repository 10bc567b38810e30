"""The `fused_linear_jsd` op: the student's and teacher's lm_heads and the JSD between them
without the logits, declared once."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, sample
from liger_core.op import always as _always
from liger_core.ops import _losses as L
from liger_core.ops import _samples as S
from liger_core.ops import jsd as _jsd
from liger_core.ops._checks import check_same_dtype


def fused_linear_jsd(
    student_input: torch.Tensor,
    student_weight: torch.Tensor,
    teacher_input: torch.Tensor,
    teacher_weight: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    jsd_beta: float = 0.5,
    ignore_index: int = -100,
    temperature: float = 1.0,
) -> torch.Tensor:
    """The student's and teacher's lm_head projections followed by `jsd`, without
    materialising all logits (the semantics of liger-kernel 0.8.5)::

        student_logp = log_softmax(student_input @ student_weight.T / temperature)
        teacher_logp = log_softmax(teacher_input @ teacher_weight.T / temperature)
        loss = jsd(student_logp, teacher_logp, shift_labels, jsd_beta, ignore_index)

    Args:
        student_input: ``(tokens, hidden)``, float32, bfloat16 or float16.
        student_weight: ``(vocab, hidden)``, ``student_input``'s dtype.
        teacher_input: ``(tokens, teacher_hidden)`` (the hidden sizes may differ).
        teacher_weight: ``(vocab, teacher_hidden)``, ``teacher_input``'s dtype. The teacher gets
            no gradient.
        shift_labels: ``(tokens,)`` integer labels or None.
        jsd_beta: in ``[0, 1]`` (0: forward KL, 1: reverse KL).
        ignore_index: label of rows to skip.
        temperature: divides the logits; nonzero.

    Returns:
        A float32 scalar. The logits are float32 products of the inputs (no rounding to the
        input dtype before the softmax). Backward gives ``grad_student_input`` and
        ``grad_student_weight`` in their dtypes.
    """
    args = (student_input, student_weight, teacher_input, teacher_weight, shift_labels, jsd_beta, ignore_index)
    check_args(*args, temperature)
    return math(*args, temperature).float()


def check_args(
    student_input: torch.Tensor,
    student_weight: torch.Tensor,
    teacher_input: torch.Tensor,
    teacher_weight: torch.Tensor,
    shift_labels: torch.Tensor | None,
    jsd_beta: float,
    ignore_index: int,
    temperature: float,
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
            and L.is_float(teacher_input)
            and teacher_input.ndim == 2
            and teacher_input.shape[0] == student_input.shape[0]
            and teacher_weight.dtype == teacher_input.dtype
            and teacher_weight.shape == (student_weight.shape[0], teacher_input.shape[1])
            and student_weight.device == teacher_input.device == teacher_weight.device == dev
            and _jsd.labels_ok(shift_labels, student_input)
            and 0 <= jsd_beta <= 1
            and type(ignore_index) is int
            and temperature != 0
        ):
            return
    except (AttributeError, TypeError):
        pass
    op = "fused_linear_jsd"
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
    )
    for name, w, x in (("student", student_weight, student_input), ("teacher", teacher_weight, teacher_input)):
        check_same_dtype(op, f"{name}_weight", w, f"{name}_input", x)
        if w.shape[1] != x.shape[1]:
            raise ValueError(
                f"{op}: {name}_weight must have shape (vocab, {x.shape[1]}) to match {name}_input; got {tuple(w.shape)}"
            )
    if teacher_weight.shape[0] != student_weight.shape[0]:
        raise ValueError(
            f"{op}: teacher_weight must have the student's vocab {student_weight.shape[0]} rows; "
            f"got {tuple(teacher_weight.shape)}"
        )
    if teacher_input.shape[0] != student_input.shape[0]:
        raise ValueError(
            f"{op}: teacher_input must have student_input's {student_input.shape[0]} tokens; "
            f"got {tuple(teacher_input.shape)}"
        )
    if shift_labels is not None:
        L.check_labels(op, "shift_labels", shift_labels, student_input.shape[0], student_input.device)
    _jsd.check_beta(op, "jsd_beta", jsd_beta)
    _jsd.check_ignore_index(op, ignore_index)
    if not isinstance(temperature, (int, float)) or temperature == 0:
        raise ValueError(f"{op}: temperature must be a nonzero number; got {temperature!r}")


def log_probs(student_input, student_weight, teacher_input, teacher_weight, temperature):
    """The student's and teacher's temperature-scaled log-probabilities (float64 in, float64 out;
    else float32), the teacher's a constant."""
    compute = torch.float64 if student_input.dtype == torch.float64 else torch.float32
    s = student_input.to(compute) @ student_weight.to(compute).t()
    t = teacher_input.detach().to(compute) @ teacher_weight.detach().to(compute).t()
    return torch.log_softmax(s / temperature, dim=-1), torch.log_softmax(t / temperature, dim=-1)


def math(
    student_input: torch.Tensor,
    student_weight: torch.Tensor,
    teacher_input: torch.Tensor,
    teacher_weight: torch.Tensor,
    shift_labels: torch.Tensor | None,
    jsd_beta: float,
    ignore_index: int,
    temperature: float,
) -> torch.Tensor:
    """The formula, differentiable in the student's tensors (float64 for the oracle, else float32)."""
    x, y = log_probs(student_input, student_weight, teacher_input, teacher_weight, temperature)
    return _jsd.math(x, y, shift_labels, jsd_beta, ignore_index)


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(4, 8, 12, 20), dtype=torch.float32, seed=0, labels=True, ignored=0.25, **options):
    """(tokens, hidden, teacher_hidden, vocab): both inputs, both lm_heads (O(2) logits), labels."""
    n, hidden, teacher_hidden, vocab = shape
    g = S.gen(seed)
    xs = S.to(device, dtype, S.normal((n, hidden), g))
    ws = S.to(device, dtype, S.normal((vocab, hidden), g, 2.0 / max(hidden, 1) ** 0.5))
    xt = S.to(device, dtype, S.normal((n, teacher_hidden), g))
    wt = S.to(device, dtype, S.normal((vocab, teacher_hidden), g, 2.0 / max(teacher_hidden, 1) ** 0.5))
    lab = S.labels(n, vocab, seed, options.get("ignore_index", -100), ignored).to(device) if labels else None
    return dict(student_input=xs, student_weight=ws, teacher_input=xt, teacher_weight=wt, shift_labels=lab, **options)


def samples():
    shapes = ((1, 8, 8, 5), (7, 16, 12, 33), (5, 16, 24, 9000), (130, 8, 16, 40))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    for beta, temperature in ((0.0, 1.0), (0.5, 1.0), (1.0, 2.0), (0.2, 0.7)):
        yield from S.grid(
            args,
            dict(dtype=S.OPTION_DTYPES, labels=(False, True)),
            grad_scalar=1.5,
            shape=(37, 16, 24, 130),
            seed=3,
            jsd_beta=beta,
            temperature=temperature,
        )
    yield sample(args, shape=(6, 8, 8, 20), ignored="all")


def _scales(a, upstream):
    x, y = log_probs(a["student_input"], a["student_weight"], a["teacher_input"], a["teacher_weight"], a["temperature"])
    loss, g = _jsd.divergence_scales(x, y, a["shift_labels"], a["ignore_index"], upstream["loss"], a["temperature"])
    return {
        "loss": loss,
        # The logits' gradient is a difference of O(p/n) terms; bound it by their size.
        "grad_student_input": L.grad_scale_through(g, a["student_weight"]),
        "grad_student_weight": L.grad_scale_through(g.t(), a["student_input"]),
    }


def _torch_fused_linear_jsd(
    student_input, student_weight, teacher_input, teacher_weight, shift_labels=None, jsd_beta=0.5, **kw
):
    temperature = kw.get("temperature", 1.0)
    student = (F.linear(student_input, student_weight) / temperature).float().log_softmax(-1)
    teacher = (F.linear(teacher_input, teacher_weight) / temperature).float().log_softmax(-1)
    return _jsd.OP.bench.torch_fn(student, teacher, shift_labels, jsd_beta)


OP = Op(
    fused_linear_jsd,
    since=(1, 3),
    math=math,
    outputs=("loss",),
    grads=("student_input", "student_weight"),
    grads_in_forward=_always,
    samples=samples,
    # (tokens, hidden, teacher_hidden, vocab)
    smoke=(sample(args, shape=(3, 8, 8, 5)), sample(args, shape=(20, 16, 12, 700))),
    error_sample=sample(args),
    errors=(
        bad(
            "vocab",
            ValueError,
            r"teacher_weight must have the student's vocab 20 rows; got \(19, 12\)",
            teacher_weight=lambda w: w[:19],
        ),
        bad(
            "student_hidden",
            ValueError,
            r"student_weight must have shape \(vocab, 8\) to match student_input",
            student_weight=lambda w: w[:, :7],
        ),
        bad(
            "tokens",
            ValueError,
            r"teacher_input must have student_input's 4 tokens; got \(3, 12\)",
            teacher_input=lambda x: x[:3],
            shift_labels=None,
        ),
        bad("beta", ValueError, r"jsd_beta must be a number in \[0, 1\]; got -0.1", jsd_beta=-0.1),
        bad("temperature", ValueError, r"temperature must be a nonzero number; got 0", temperature=0),
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
                teacher_input=B.normal((s.tokens, s.hidden), dt, dev, gen, grad=False),
                teacher_weight=B.lm_head(s, dt, dev, gen, grad=False),
            )
        },
        torch_fn=_torch_fused_linear_jsd,
        traffic=lambda s, e: (
            2 * (s.tokens + s.vocab) * s.hidden * e,
            3 * (s.tokens + s.vocab) * s.hidden * e + 2 * (s.tokens + s.vocab) * s.hidden * e,
        ),
        describe=B.linear_text,
        # forward: student and teacher logits; backward: the student's input and weight gradients.
        flops=lambda s: (4 * s.tokens * s.hidden * s.vocab, 4 * s.tokens * s.hidden * s.vocab),
        peers={
            B.LIGER_KERNEL: B.liger_kernel(
                "liger_fused_linear_jsd",
                "student_input",
                "student_weight",
                "teacher_input",
                "teacher_weight",
                "shift_labels",
                "jsd_beta",
                "ignore_index",
                "temperature",
            )
        },
    ),
)
