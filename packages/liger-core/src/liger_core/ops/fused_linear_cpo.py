"""The `fused_linear_cpo` op: the lm_head projection and Contrastive Preference Optimization's
loss (TRL's CPOTrainer loss types, SimPO's margin, label smoothing) without the logits, declared
once. The shared layout, reference and chunked orchestration: `liger_core.ops._preference`."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Op, bad, sample
from liger_core.op import always as _always
from liger_core.ops import _losses as L
from liger_core.ops import _preference as P
from liger_core.ops import _samples as S
from liger_core.ops import fused_linear_dpo as _dpo
from liger_core.ops import fused_linear_orpo as _orpo

OP_NAME = "fused_linear_cpo"
OUTPUTS = P.OUTPUTS
LOSS_TYPES = ("sigmoid", "hinge", "ipo", "simpo")


def fused_linear_cpo(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    ignore_index: int = -100,
    beta: float = 0.1,
    alpha: float = 1.0,
    label_smoothing: float = 0.0,
    compute_nll_loss: bool = True,
    average_log_prob: bool = False,
    loss_type: str = "sigmoid",
    simpo_gamma: float = 0.5,
) -> tuple[torch.Tensor, ...]:
    """CPO's loss on the lm_head's log-probabilities, the logits never materialised whole.

    Layout as `fused_linear_dpo`'s (chosen sequences, then rejected; ``ignore_index`` on tokens
    that do not count); ``logp`` a sequence's summed (``average_log_prob``: mean) token
    log-probabilities. No reference model. Per pair, with ``u = logp_c - logp_r`` and ``e =
    label_smoothing`` (TRL's CPOTrainer)::

        sigmoid  -(1 - e) logsigmoid(beta u) - e logsigmoid(-beta u)
        simpo    the same with beta u - simpo_gamma (SimPO's target margin)
        hinge    relu(1 - beta u)
        ipo      (u - 1 / (2 beta))^2

    ``loss`` is the mean over pairs plus, with ``compute_nll_loss``, ``alpha`` times the chosen
    NLL (TRL's ``cpo_alpha``; TRL's AlphaPO reward transform, its ``alpha``, is not offered).

    Args:
        input, weight, target, bias, ignore_index: as `fused_linear_orpo`'s.
        beta: temperature (> 0).
        alpha: the NLL term's weight.
        label_smoothing: ``e`` in [0, 0.5] (sigmoid and simpo).
        compute_nll_loss: add ``alpha x`` the chosen NLL.
        average_log_prob: mean instead of sum of the token log-probs (TRL uses the mean for ipo
            and simpo).
        loss_type: one of ``LOSS_TYPES``.
        simpo_gamma: SimPO's margin (``loss_type="simpo"`` only).

    Returns:
        As `fused_linear_dpo` (rewards ``beta logp``); only ``loss`` is differentiable.

    A sequence with no counted token (every target ``ignore_index``) has log-prob 0 (not nan,
    where a mean over zero tokens would give it): the loss stays finite, that of log-prob 0.
    Mixed dtypes: ``weight`` / ``bias`` of another float dtype than their input are cast to the
    input's dtype for the matmul, gradients in their own dtypes (`liger_core.op`, "Dtypes").
    """
    tensors = (input, weight, target, bias)
    options = (ignore_index, beta, alpha, label_smoothing, compute_nll_loss, average_log_prob, loss_type, simpo_gamma)
    check_args(*tensors, *options)
    L.label_stats(OP_NAME, target, ignore_index, weight.shape[0])
    return tuple(o.float() for o in math(*tensors, *options))


def check_args(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None,
    ignore_index: int,
    beta: float,
    alpha: float,
    label_smoothing: float,
    compute_nll_loss: bool,
    average_log_prob: bool,
    loss_type: str,
    simpo_gamma: float,
) -> None:
    """Raise a clear error for arguments outside the contract (target values: checked by the
    backend, one host read)."""
    try:
        if (
            P.layout_ok(input, weight, target, bias)
            and type(ignore_index) is int
            and type(compute_nll_loss) is bool
            and type(average_log_prob) is bool
            and loss_type in LOSS_TYPES
            and all(_dpo._number(v) for v in (beta, alpha, label_smoothing, simpo_gamma))
            and beta > 0
            and 0 <= label_smoothing <= 0.5
        ):
            return
    except (AttributeError, TypeError):
        pass
    P.check_layout(OP_NAME, input, weight, target, bias)
    check_options(OP_NAME, ignore_index, beta, alpha, label_smoothing, compute_nll_loss, average_log_prob)
    P.check_choice(OP_NAME, "loss_type", loss_type, LOSS_TYPES)
    P.check_number(OP_NAME, "simpo_gamma", simpo_gamma)


def check_options(op: str, ignore_index, beta, alpha, label_smoothing, compute_nll_loss, average_log_prob) -> None:
    """The options CPO and SimPO share (slow path; the nn modules run them at construction)."""
    _orpo.check_options(op, ignore_index, beta, compute_nll_loss)
    P.check_number(op, "alpha", alpha)
    P.check_number(op, "label_smoothing", label_smoothing, 0.0, 0.5)
    P.check_flag(op, "average_log_prob", average_log_prob)


def cpo_pair_loss(loss_type: str, beta: float, label_smoothing: float, simpo_gamma: float) -> P.PairLoss:
    """The per-pair loss of ``loss_type`` (see the contract), as a `_preference.PairLoss`."""

    def pair_loss(chosen, rejected, _ref_chosen, _ref_rejected):
        u = chosen - rejected
        if loss_type in ("sigmoid", "simpo"):
            z = beta * u - (simpo_gamma if loss_type == "simpo" else 0.0)
            losses = -F.logsigmoid(z) * (1 - label_smoothing) - F.logsigmoid(-z) * label_smoothing
        elif loss_type == "hinge":
            losses = torch.relu(1 - beta * u)
        elif loss_type == "ipo":
            losses = (u - 1 / (2 * beta)) ** 2
        else:
            raise ValueError(f"{OP_NAME}: loss_type must be one of {', '.join(LOSS_TYPES)}; got {loss_type!r}")
        return losses, beta * chosen, beta * rejected

    return pair_loss


def math(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None,
    ignore_index: int,
    beta: float,
    alpha: float,
    label_smoothing: float,
    compute_nll_loss: bool,
    average_log_prob: bool,
    loss_type: str,
    simpo_gamma: float,
) -> tuple[torch.Tensor, ...]:
    """Every output by the formula; float64 inputs give the oracle."""
    return P.paired_math(
        input, weight, target, bias, None, None, None, ignore_index,
        cpo_pair_loss(loss_type, beta, label_smoothing, simpo_gamma), average_log_prob,
        alpha if compute_nll_loss else 0.0, False,
    )  # fmt: skip


# -- declaration ---------------------------------------------------------------------------------


args = _orpo.args


def samples():
    shapes = ((1, 1, 8, 5), (2, 7, 16, 40), (3, 9, 24, 300), (1, 5, 16, 9000))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    yield from S.grid(
        args,
        dict(loss_type=LOSS_TYPES, average_log_prob=(False, True)),
        shape=(2, 6, 16, 33),
        seed=3,
        beta=0.5,
        label_smoothing=0.1,
    )
    yield from S.grid(
        args, dict(dtype=S.OPTION_DTYPES, compute_nll_loss=(True, False)), shape=(3, 11, 16, 130), seed=5, bias=True,
        alpha=0.6, loss_type="simpo", average_log_prob=True,
    )  # fmt: skip
    yield sample(args, grad_scalar=-2.5, shape=(2, 8, 16, 50), seed=7, ignore_index=0, loss_type="ipo")
    # A rejected sequence with no counted token: its log-prob is 0 (also averaged), not NaN.
    yield sample(args, shape=(2, 6, 8, 20), seed=9, ignored="all", average_log_prob=True)
    yield sample(args, frozen=("input",), shape=(2, 5, 8, 30), seed=11, bias=True)
    yield sample(args, forward_only=True, shape=(2, 5, 8, 30), seed=12)


def scales_for(pair_loss_of, math_fn):
    """The atol scales of a loss without reference model: ``pair_loss_of(args)`` its pair formula,
    ``math_fn`` its formula."""

    def scales_fn(a, upstream):
        # As fused_linear_dpo's (see there).
        outs = math_fn(*a.values())
        scales = {name: max(S.peak(out.detach()), 1.0) for name, out in zip(OUTPUTS, outs)}
        if upstream.get("loss") is None or not a["input"].numel():
            return scales
        as_dpo = dict(a, ref_input=None, ref_weight=None, ref_bias=None, use_ref_model=False)
        as_dpo.setdefault("average_log_prob", True)
        logits = P.reference_token_logits(a["input"], a["weight"], a["bias"]).detach().requires_grad_()
        g = _dpo._logits_grad(logits, as_dpo, pair_loss_of(a)) * upstream["loss"]
        g = g.reshape(-1, logits.shape[-1])
        scales["grad_input"] = L.grad_scale_through(g, a["weight"])
        scales["grad_weight"] = L.grad_scale_through(g.t(), a["input"].reshape(-1, a["input"].shape[-1]))
        scales["grad_bias"] = S.peak(g.abs().sum(0))
        return scales

    return scales_fn


def _cpo_loss_of(a):
    return cpo_pair_loss(a["loss_type"], a["beta"], a["label_smoothing"], a["simpo_gamma"])


def _torch_cpo(input, weight, target, bias=None, **options):
    return math(input, weight, target, bias, **options)[0]


def _liger_kernel_cpo():
    from liger_kernel.chunked_loss.functional import liger_fused_linear_cpo

    def call(input, weight, target, bias=None, **o):
        return liger_fused_linear_cpo(
            input, weight, target, bias, o["ignore_index"], o["beta"], o["alpha"], o["label_smoothing"],
            o["compute_nll_loss"], True, o["average_log_prob"],
        )[0]  # fmt: skip

    return call


def bad_inputs() -> tuple:
    """The layout and shared option errors (CPO's and SimPO's)."""
    return (
        *P.pair_layout_errors(),
        bad("beta", ValueError, r"beta must be a number in \(0, inf\); got 0.0", beta=0.0),
        bad("smoothing", ValueError, r"label_smoothing must be a number in \[0, 0.5\]; got 0.7", label_smoothing=0.7),
        bad("nll_flag", TypeError, r"compute_nll_loss must be True or False; got 1", compute_nll_loss=1),
    )


def bench(torch_fn, peer) -> B.BenchSpec:
    return B.BenchSpec(
        group="losses",
        axes=("tokens", "hidden", "vocab", "batch"),
        layouts=_orpo.OP.bench.layouts,
        torch_fn=torch_fn,
        traffic=_dpo.OP.bench.traffic,
        describe=_dpo.OP.bench.describe,
        flops=_orpo.OP.bench.flops,
        peers={B.LIGER_KERNEL: B.Peer(peer)},
    )


OP = Op(
    fused_linear_cpo,
    since=(1, 6),
    math=math,
    grads=("input", "weight", "bias"),
    grads_in_forward=_always,
    outputs=OUTPUTS,
    no_grad_outputs=OUTPUTS[1:],
    samples=samples,
    smoke=(sample(args, shape=(1, 3, 8, 5), bias=True), sample(args, shape=(2, 10, 16, 700), loss_type="simpo")),
    error_sample=sample(args, ignored=0.2, bias=True),
    errors=(
        *bad_inputs(),
        bad(
            "loss_type", ValueError, r"loss_type must be one of sigmoid, hinge, ipo, simpo; got 'dpo'", loss_type="dpo"
        ),
    ),
    checks=P.checks(scales_for(_cpo_loss_of, math)),
    bench=bench(_torch_cpo, _liger_kernel_cpo),
)
