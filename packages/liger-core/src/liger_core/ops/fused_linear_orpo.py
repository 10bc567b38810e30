"""The `fused_linear_orpo` op: the lm_head projection and ORPO's loss (odds-ratio preference
optimisation, as TRL's ORPOTrainer computes it) without the logits, declared once. The shared
layout, reference and chunked orchestration: `liger_core.ops._preference`."""

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

OP_NAME = "fused_linear_orpo"
OUTPUTS = P.OUTPUTS


def fused_linear_orpo(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    ignore_index: int = -100,
    beta: float = 0.1,
    compute_nll_loss: bool = True,
) -> tuple[torch.Tensor, ...]:
    """ORPO's loss on the lm_head's log-probabilities, the logits never materialised whole.

    Layout as `fused_linear_dpo`'s: ``input`` ``(2B, T, hidden)``, the chosen sequences then the
    rejected ones, ``target`` ``(2B, T)`` with ``ignore_index`` on tokens that do not count. A
    sequence's ``logp`` is the MEAN of its counted tokens' ``log_softmax(input_t @ weight.T +
    bias)[target_t]`` (ORPO's length-normalised log-probability; every sequence needs at least one
    counted token, as in TRL). Per pair, with ``log1mexp(x) = log(1 - exp(x))``::

        log_odds = (logp_c - logp_r) - (log1mexp(logp_c) - log1mexp(logp_r))
        loss_pair = -beta * logsigmoid(log_odds)

    ``loss`` is the mean over pairs plus, with ``compute_nll_loss``, the NLL of the chosen
    sequences (``-sum logp_t`` over the chosen counted tokens / their number): TRL's
    ``nll_loss - mean(beta * logsigmoid(log_odds))``.

    Args:
        input: ``(2B, T, hidden)`` float32, bfloat16 or float16; an odd batch is a ValueError.
        weight: ``(vocab, hidden)``, cast to ``input.dtype`` for the matmul.
        target: ``(2B, T)`` integer ids in ``[0, vocab)`` or ``ignore_index``.
        bias: ``(vocab,)`` or None.
        ignore_index: target value of tokens that do not count.
        beta: the odds-ratio term's weight (> 0).
        compute_nll_loss: add the chosen NLL to the loss.

    Returns:
        ``(loss, chosen_logps, rejected_logps, chosen_logits_mean, rejected_logits_mean, nll_loss,
        chosen_rewards, rejected_rewards)``, float32, as `fused_linear_dpo`'s (rewards: ``beta
        logp``). ``log_odds_ratio`` and ``log_odds_chosen`` (the means of ``logsigmoid(log_odds)``
        and ``log_odds`` that TRL and liger-kernel log) follow from the log-probs: `log_odds`.
        Only ``loss`` is differentiable: ``grad_input``, ``grad_weight``, ``grad_bias``.

    A sequence with no counted token (every target ``ignore_index``) has log-prob 0 (not nan),
    whose odds ``p / (1 - p)`` are infinite: its loss is nan.
    Mixed dtypes: ``weight`` / ``bias`` of another float dtype than their input are cast to the
    input's dtype for the matmul, gradients in their own dtypes (`liger_core.op`, "Dtypes").
    """
    check_args(input, weight, target, bias, ignore_index, beta, compute_nll_loss)
    L.label_stats(OP_NAME, target, ignore_index, weight.shape[0])
    outs = math(input, weight, target, bias, ignore_index, beta, compute_nll_loss)
    return tuple(o.float() for o in outs)


def check_args(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None,
    ignore_index: int,
    beta: float,
    compute_nll_loss: bool,
) -> None:
    """Raise a clear error for arguments outside the contract (target values: checked by the
    backend, one host read)."""
    try:
        if (
            P.layout_ok(input, weight, target, bias)
            and type(ignore_index) is int
            and type(compute_nll_loss) is bool
            and _dpo._number(beta)
            and beta > 0
        ):
            return
    except (AttributeError, TypeError):
        pass
    op = OP_NAME
    P.check_layout(op, input, weight, target, bias)
    check_options(op, ignore_index, beta, compute_nll_loss)


def check_options(op: str, ignore_index, beta, compute_nll_loss) -> None:
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{op}: ignore_index must be an int; got {ignore_index!r}")
    P.check_number(op, "beta", beta, 0.0, None, open_low=True)
    P.check_flag(op, "compute_nll_loss", compute_nll_loss)


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """``log(1 - exp(x))`` for ``x < 0``, without cancellation (branch at ``-ln 2``)."""
    t = -0.6931471805599453
    return torch.where(x < t, torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))


def log_odds(chosen_logps: torch.Tensor, rejected_logps: torch.Tensor) -> torch.Tensor:
    """Per pair, the log odds ratio of the chosen over the rejected sequence."""
    return (chosen_logps - rejected_logps) - (log1mexp(chosen_logps) - log1mexp(rejected_logps))


def orpo_pair_loss(beta: float) -> P.PairLoss:
    def pair_loss(chosen, rejected, _ref_chosen, _ref_rejected):
        return -beta * F.logsigmoid(log_odds(chosen, rejected)), beta * chosen, beta * rejected

    return pair_loss


def math(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None,
    ignore_index: int,
    beta: float,
    compute_nll_loss: bool,
) -> tuple[torch.Tensor, ...]:
    """Every output by the formula; float64 inputs give the oracle."""
    return P.paired_math(
        input, weight, target, bias, None, None, None, ignore_index, orpo_pair_loss(beta), True,
        1.0 if compute_nll_loss else 0.0, False,
    )  # fmt: skip


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(2, 7, 16, 40), **params):
    """`fused_linear_dpo.args` without the reference model (ORPO has none): (pairs, seq, hidden,
    vocab), a prompt-like ignored prefix (never the whole sequence)."""
    out = _dpo.args(device, shape=shape, ref=False, **params)
    del out["use_ref_model"]
    return out


def samples():
    shapes = ((1, 1, 8, 5), (2, 7, 16, 40), (3, 9, 24, 300), (1, 5, 16, 9000))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    yield from S.grid(
        args, dict(dtype=S.OPTION_DTYPES, compute_nll_loss=(True, False)), shape=(3, 11, 16, 130), seed=5, bias=True
    )
    yield sample(args, grad_scalar=-2.5, shape=(2, 8, 16, 50), seed=7, beta=0.7, ignore_index=0)
    # Two classes, flat logits: mean log-probs on both sides of -ln 2 (both branches of log1mexp).
    yield sample(args, shape=(3, 4, 16, 2), seed=8, scale=0.3)
    yield sample(args, frozen=("input",), shape=(2, 5, 8, 30), seed=11, bias=True)
    yield sample(args, forward_only=True, shape=(2, 5, 8, 30), seed=12)


def _scales(a, upstream):
    # As fused_linear_dpo's: outputs at least O(1); gradients |G| @ |operand| for the logits'
    # gradient G (by autograd through the formula, in float64).
    outs = math(*a.values())
    scales = {name: max(S.peak(out.detach()), 1.0) for name, out in zip(OUTPUTS, outs)}
    if upstream.get("loss") is None or not a["input"].numel():
        return scales
    as_dpo = dict(a, ref_input=None, ref_weight=None, ref_bias=None, use_ref_model=False, average_log_prob=True)
    as_dpo["alpha"] = 1.0
    logits = P.reference_token_logits(a["input"], a["weight"], a["bias"]).detach().requires_grad_()
    g = (_dpo._logits_grad(logits, as_dpo, orpo_pair_loss(a["beta"])) * upstream["loss"]).reshape(-1, logits.shape[-1])
    scales["grad_input"] = L.grad_scale_through(g, a["weight"])
    scales["grad_weight"] = L.grad_scale_through(g.t(), a["input"].reshape(-1, a["input"].shape[-1]))
    scales["grad_bias"] = S.peak(g.abs().sum(0))
    return scales


def _torch_orpo(input, weight, target, bias=None, **options):
    return math(input, weight, target, bias, **options)[0]


def _liger_kernel_orpo():
    from liger_kernel.chunked_loss.functional import liger_fused_linear_orpo

    def call(input, weight, target, bias=None, ignore_index=-100, beta=0.1, compute_nll_loss=True):
        return liger_fused_linear_orpo(input, weight, target, bias, ignore_index, beta, compute_nll_loss)[0]

    return call


OP = Op(
    fused_linear_orpo,
    since=(1, 6),
    math=math,
    grads=("input", "weight", "bias"),
    grads_in_forward=_always,
    outputs=OUTPUTS,
    no_grad_outputs=OUTPUTS[1:],
    samples=samples,
    smoke=(sample(args, shape=(1, 3, 8, 5), bias=True), sample(args, shape=(2, 10, 16, 700))),
    error_sample=sample(args, ignored=0.2, bias=True),
    errors=(
        *P.pair_layout_errors(),
        bad("beta", ValueError, r"beta must be a number in \(0, inf\); got -1", beta=-1),
        bad("nll_flag", TypeError, r"compute_nll_loss must be True or False; got 'yes'", compute_nll_loss="yes"),
    ),
    checks=P.checks(_scales),
    bench=B.BenchSpec(
        group="losses",
        axes=("tokens", "hidden", "vocab", "batch"),
        layouts={"pairs": lambda s, dt, dev, gen: _without_ref(_dpo._bench_inputs(s, dt, dev, gen))},
        torch_fn=_torch_orpo,
        traffic=_dpo.OP.bench.traffic,
        describe=_dpo.OP.bench.describe,
        flops=lambda s: (2 * s.tokens * s.hidden * s.vocab, 4 * s.tokens * s.hidden * s.vocab),
        peers={B.LIGER_KERNEL: B.Peer(_liger_kernel_orpo)},
    ),
)


def _without_ref(kwargs: dict) -> dict:
    return {k: v for k, v in kwargs.items() if not k.startswith("ref_")}
