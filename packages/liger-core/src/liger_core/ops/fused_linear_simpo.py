"""The `fused_linear_simpo` op: the lm_head projection and SimPO's loss (length-normalised,
reference-free, with a target margin; TRL's CPOTrainer with ``loss_type="simpo"``) without the
logits, declared once. The formula is `fused_linear_cpo`'s ``simpo`` loss type with averaged
log-probs, under liger-kernel's SimPO arguments."""

from __future__ import annotations

import torch

from liger_core.op import Op, bad, sample
from liger_core.op import always as _always
from liger_core.ops import _losses as L
from liger_core.ops import _preference as P
from liger_core.ops import _samples as S
from liger_core.ops import fused_linear_cpo as _cpo

OP_NAME = "fused_linear_simpo"

OUTPUTS = P.OUTPUTS


def fused_linear_simpo(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    ignore_index: int = -100,
    beta: float = 0.1,
    alpha: float = 1.0,
    label_smoothing: float = 0.0,
    compute_nll_loss: bool = False,
    gamma: float = 0.5,
) -> tuple[torch.Tensor, ...]:
    """SimPO's loss on the lm_head's log-probabilities, the logits never materialised whole.

    Exactly `fused_linear_cpo` with ``loss_type="simpo"``, ``simpo_gamma=gamma`` and
    ``average_log_prob=True``: per pair, with ``logp`` the mean of a sequence's counted token
    log-probabilities and ``z = beta (logp_c - logp_r) - gamma``,
    ``-(1 - e) logsigmoid(z) - e logsigmoid(-z)``; the mean over pairs, plus ``alpha`` times the
    chosen NLL with ``compute_nll_loss``. Arguments and outputs as `fused_linear_cpo`'s.

    A sequence with no counted token (every target ``ignore_index``) has log-prob 0 (not nan,
    where a mean over zero tokens would give it): the loss stays finite, that of log-prob 0.
    Mixed dtypes: ``weight`` / ``bias`` of another float dtype than their input are cast to the
    input's dtype for the matmul, gradients in their own dtypes (`liger_core.op`, "Dtypes").
    """
    tensors = (input, weight, target, bias)
    options = (ignore_index, beta, alpha, label_smoothing, compute_nll_loss, gamma)
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
    gamma: float,
) -> None:
    """Raise a clear error for arguments outside the contract (`fused_linear_cpo`'s checks)."""
    try:
        _cpo.check_args(input, weight, target, bias, ignore_index, beta, alpha, label_smoothing, compute_nll_loss,
                        True, "simpo", gamma)  # fmt: skip
    except (TypeError, ValueError) as e:
        raise type(e)(str(e).replace(_cpo.OP_NAME, OP_NAME).replace("simpo_gamma", "gamma")) from None


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
    gamma: float,
) -> tuple[torch.Tensor, ...]:
    """Every output by the formula; float64 inputs give the oracle."""
    return _cpo.math(input, weight, target, bias, ignore_index, beta, alpha, label_smoothing, compute_nll_loss, True,
                     "simpo", gamma)  # fmt: skip


args = _cpo.args


def samples():
    shapes = ((1, 1, 8, 5), (2, 7, 16, 40), (3, 9, 24, 300))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    yield from S.grid(
        args, dict(dtype=S.OPTION_DTYPES, compute_nll_loss=(True, False)), shape=(3, 11, 16, 130), seed=5, bias=True,
        alpha=0.6, label_smoothing=0.2, gamma=1.5, beta=2.0,
    )  # fmt: skip
    yield sample(args, grad_scalar=-2.5, shape=(2, 8, 16, 50), seed=7, ignore_index=0)
    yield sample(args, frozen=("input",), shape=(2, 5, 8, 30), seed=11, bias=True)


def _simpo_loss_of(a):
    return _cpo.cpo_pair_loss("simpo", a["beta"], a["label_smoothing"], a["gamma"])


def _torch_simpo(input, weight, target, bias=None, **options):
    return math(input, weight, target, bias, **options)[0]


def _liger_kernel_simpo():
    from liger_kernel.chunked_loss.functional import liger_fused_linear_simpo

    def call(input, weight, target, bias=None, **o):
        return liger_fused_linear_simpo(
            input, weight, target, bias, o["ignore_index"], o["beta"], o["alpha"], o["label_smoothing"],
            o["compute_nll_loss"], True, o["gamma"],
        )[0]  # fmt: skip

    return call


OP = Op(
    fused_linear_simpo,
    since=(1, 6),
    math=math,
    grads=("input", "weight", "bias"),
    grads_in_forward=_always,
    outputs=OUTPUTS,
    no_grad_outputs=OUTPUTS[1:],
    samples=samples,
    smoke=(sample(args, shape=(1, 3, 8, 5), bias=True), sample(args, shape=(2, 10, 16, 700), compute_nll_loss=True)),
    error_sample=sample(args, ignored=0.2, bias=True),
    errors=(
        *_cpo.bad_inputs(),
        bad(
            "gamma",
            ValueError,
            r"fused_linear_simpo: gamma must be a number in \(-inf, inf\); got nan",
            gamma=float("nan"),
        ),
    ),
    checks=P.checks(_cpo.scales_for(_simpo_loss_of, math)),
    bench=_cpo.bench(_torch_simpo, _liger_kernel_simpo),
)
