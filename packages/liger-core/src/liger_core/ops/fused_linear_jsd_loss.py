"""The `fused_linear_jsd_loss` op: liger-kernel's chunked JSD distillation loss (the student's
and teacher's lm_heads, a hard cross-entropy term and the generalised JSD at a temperature)
without the logits, declared once. `fused_linear_jsd` is the soft term alone."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, sample
from liger_core.op import always as _always
from liger_core.ops import _losses as L
from liger_core.ops import fused_linear_cosine_similarity as C
from liger_core.ops import jsd as _jsd

OP_NAME = "fused_linear_jsd_loss"


def fused_linear_jsd_loss(
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
    """liger-kernel 0.8.5's chunked ``LigerFusedLinearJSDFunction`` (``LigerFusedLinearJSDLoss``)
    without materialising all logits::

        s = student_input @ student_weight.T + student_bias
        t = teacher_input @ teacher_weight.T + teacher_bias            (no gradient)
        n = max(number of rows whose true_labels != ignore_index, 1)
        hard_loss = sum over counted rows of cross_entropy(s, true_labels) / n
        soft_loss = jsd(log_softmax(s / T), log_softmax(t / T), true_labels, beta, ignore_index)
        loss = weight_hard_loss * hard_loss + weight_soft_loss * soft_loss

    with `liger_core.ops.jsd.jsd`'s generalised JSD (beta 0: forward KL ``KL(teacher ||
    student)``, 1: reverse KL, else the ``beta``-weighted divergences from the mixture
    ``(1 - beta) * student + beta * teacher``), averaged over the counted rows. The hard term uses
    the logits before the temperature.

    Args:
        student_input: ``(tokens, hidden)``, float32, bfloat16 or float16.
        student_weight: ``(vocab, hidden)``, ``student_input``'s dtype.
        teacher_input: ``(tokens, teacher_hidden)``.
        teacher_weight: ``(vocab, teacher_hidden)``, ``teacher_input``'s dtype.
        true_labels: ``(tokens,)`` integer labels in ``[0, vocab)`` or ``ignore_index``.
        student_bias, teacher_bias: ``(vocab,)`` in their input's dtype, or None.
        weight_hard_loss, weight_soft_loss: the terms' weights.
        beta: in ``[0, 1]``.
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
    """Raise a clear error for arguments outside the contract (the labels' range is
    `_losses.label_stats`, one device read)."""
    C.check_distillation_args(
        OP_NAME, student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias,
        teacher_bias, weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature,
    )  # fmt: skip
    _jsd.check_beta(OP_NAME, "beta", beta)


def math(
    student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias, teacher_bias,
    weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """The formula, differentiable in the student's tensors (float64 for the oracle, else float32)."""
    s = C.logits(student_input, student_weight, student_bias)
    t = C.logits(
        teacher_input.detach(), teacher_weight.detach(), None if teacher_bias is None else teacher_bias.detach()
    )
    counted = true_labels != ignore_index
    n = counted.sum().clamp(min=1).to(s.dtype)
    safe = torch.where(counted, true_labels, 0).long()
    ce = torch.logsumexp(s, -1) - s.gather(-1, safe[:, None]).squeeze(-1)
    hard = torch.where(counted, ce, torch.zeros((), dtype=s.dtype, device=s.device)).sum() / n
    soft = _jsd.math(
        torch.log_softmax(s / temperature, -1), torch.log_softmax(t / temperature, -1), true_labels, beta, ignore_index
    )
    loss = weight_hard_loss * hard + weight_soft_loss * soft
    return loss, soft.detach(), hard.detach()


# -- declaration ---------------------------------------------------------------------------------

args = C.args


def samples():
    shapes = ((1, 8, 8, 5), (7, 16, 12, 33), (5, 16, 24, 9000), (130, 8, 16, 40))
    yield from C.S.grid(args, dict(dtype=C.S.DTYPES, shape=shapes))
    # (weight_hard_loss, weight_soft_loss, beta, temperature): both terms, each alone, forward and
    # reverse KL, a negative temperature.
    options = (
        (0.5, 0.5, 0.5, 1.0),
        (0.0, 1.0, 0.0, 2.0),
        (1.0, 0.0, 0.5, 1.0),
        (0.3, 0.7, 1.0, 0.7),
        (0.5, 0.5, 0.2, -1.5),
    )
    for hard, soft, beta, temperature in options:
        yield from C.S.grid(
            args,
            dict(dtype=C.S.OPTION_DTYPES, bias=(False, True)),
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
    """The logits' gradient: CE's ``softmax + onehot`` and the JSD's terms (`jsd.divergence_scales`),
    times the weights over the counted rows: bound the products by them."""
    xs, ws = a["student_input"], a["student_weight"]
    if xs.shape[0] == 0:
        return {}
    s = C.logits(xs, ws, a["student_bias"])
    t = C.logits(a["teacher_input"], a["teacher_weight"], a["teacher_bias"])
    temperature = a["temperature"]
    x, y = torch.log_softmax(s / temperature, -1), torch.log_softmax(t / temperature, -1)
    up = upstream["loss"]
    loss_terms, g_soft = _jsd.divergence_scales(x, y, a["true_labels"], a["ignore_index"], up, temperature)
    n = max(int((a["true_labels"] != a["ignore_index"]).sum()), 1)
    g = abs(a["weight_hard_loss"]) * (torch.softmax(s, -1) + 1.0) * float(up.abs()) / n
    g = g + abs(a["weight_soft_loss"]) * g_soft
    hard_terms = float((torch.logsumexp(s, -1).abs()).sum()) / n
    return {
        "loss": max(abs(a["weight_hard_loss"]) * hard_terms + abs(a["weight_soft_loss"]) * loss_terms, 1e-3),
        "grad_student_input": L.grad_scale_through(g, ws),
        "grad_student_weight": L.grad_scale_through(g.t(), xs),
        "grad_student_bias": float(g.sum(0).max()),
    }


def _torch_jsd_loss(student_input, student_weight, teacher_input, teacher_weight, true_labels, **kw):
    """The models' way: both logits in the input dtype, then the formula in float32."""
    s = F.linear(student_input, student_weight).float()
    with torch.no_grad():
        t = F.linear(teacher_input, teacher_weight).float()
    n = (true_labels != -100).sum().clamp(min=1)
    hard = F.cross_entropy(s, true_labels, reduction="sum") / n
    soft = _jsd.math(s.log_softmax(-1), t.log_softmax(-1), true_labels, 0.5, -100)
    return 0.5 * hard + 0.5 * soft


OP = Op(
    fused_linear_jsd_loss,
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
            "labels_range",
            ValueError,
            r"every target must be in \[0, 20\) or equal ignore_index=-100; 1 are not \(first: -5\)",
            true_labels=lambda t: torch.where(torch.arange(t.numel(), device=t.device) == 1, -5, t),
        ),
        bad("beta", ValueError, r"beta must be a number in \[0, 1\]; got 1.5", beta=1.5),
        bad("temperature", ValueError, r"temperature must be a nonzero number; got 0", temperature=0),
        bad(
            "dtype",
            TypeError,
            r"teacher_weight must have teacher_input's dtype float32; got float16",
            teacher_weight=lambda w: w.half(),
        ),
    ),
    checks=Checks(out_dtypes=lambda a: (torch.float32,) * 3, atol_scales=_scales),
    bench=B.BenchSpec(
        group="losses",
        axes=("tokens", "hidden", "vocab"),
        layouts=C.OP.bench.layouts,
        torch_fn=_torch_jsd_loss,
        traffic=C.OP.bench.traffic,
        describe=B.linear_text,
        flops=C.OP.bench.flops,
        peers={B.LIGER_KERNEL: C.liger_kernel_distillation("LigerFusedLinearJSDLoss")},
    ),
)
