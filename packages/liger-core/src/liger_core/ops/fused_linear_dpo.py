"""The `fused_linear_dpo` op: the lm_head projection and Direct Preference Optimization's loss
(every loss type of liger-kernel 0.8.5's, as TRL's DPOTrainer computes them) without the
logits, declared once. The shared layout, reference and chunked orchestration:
`liger_core.ops._preference`."""

from __future__ import annotations

import math as _math

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Op, bad, on_other_device, sample, set_item
from liger_core.op import always as _always
from liger_core.ops import _losses as L
from liger_core.ops import _preference as P
from liger_core.ops import _samples as S

OP_NAME = "fused_linear_dpo"
LOSS_TYPES = (
    "sigmoid",
    "hinge",
    "exo_pair",
    "nca_pair",
    "robust",
    "bco_pair",
    "sppo_hard",
    "apo_zero",
    "apo_down",
    "discopop",
)
OUTPUTS = P.OUTPUTS


def fused_linear_dpo(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    ref_input: torch.Tensor | None = None,
    ref_weight: torch.Tensor | None = None,
    ref_bias: torch.Tensor | None = None,
    ignore_index: int = -100,
    beta: float = 0.1,
    compute_nll_loss: bool = False,
    use_ref_model: bool = True,
    average_log_prob: bool = False,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
    discopop_tau: float = 0.05,
    alpha: float = 1.0,
) -> tuple[torch.Tensor, ...]:
    """DPO's loss on the lm_head's log-probabilities, the logits never materialised whole.

    Layout (TRL's, liger-kernel's): ``input`` ``(2B, T, hidden)`` holds the B chosen sequences,
    then the B rejected ones (pair ``i``: rows ``i`` and ``B + i``); ``target`` ``(2B, T)`` the
    next-token ids, ``ignore_index`` where a token does not count (prompt, padding: TRL's
    ``completion_mask == 0``). A sequence's log-probability ``logp`` is the sum over its counted
    tokens of ``log_softmax(input_t @ weight.T + bias)[target_t]``; with ``average_log_prob``
    their mean (0 for a sequence with no counted token). With ``use_ref_model`` the reference
    model's ``ref_logp`` comes the same way from ``ref_input``, ``ref_weight``, ``ref_bias``
    (no gradient), else it is 0. With ``cr = logp_c - ref_logp_c``, ``rr = logp_r - ref_logp_r``,
    ``d = beta (cr - rr)``, the per-pair loss by ``loss_type`` (TRL's DPOTrainer formulas)::

        sigmoid   -logsigmoid(d)
        hinge     relu(1 - d)
        exo_pair  sigmoid(d) (logsigmoid(d) - log(1 - e)) + sigmoid(-d) (logsigmoid(-d) - log e)
        nca_pair  -logsigmoid(beta cr) - logsigmoid(-beta cr) / 2 - logsigmoid(-beta rr) / 2
        robust    ((1 - e) (-logsigmoid(d)) - e (-logsigmoid(-d))) / (1 - 2e)
        bco_pair  -logsigmoid(beta cr) - logsigmoid(-beta rr)
        sppo_hard (cr - 1 / (2 beta))^2 + (rr + 1 / (2 beta))^2
        apo_zero  1 - sigmoid(beta cr) + sigmoid(beta rr)
        apo_down  sigmoid(beta cr) + 1 - sigmoid(d)
        discopop  m = sigmoid(d / discopop_tau): -logsigmoid(d) (1 - m) + exp(-d) m

    (``e`` = ``label_smoothing``). ``loss`` is the mean over pairs, plus, with
    ``compute_nll_loss``, ``alpha`` times the NLL of the chosen sequences (``-sum logp_t`` over
    the chosen counted tokens divided by their number, TRL's ``"sft"`` loss).

    Args:
        input: ``(2B, T, hidden)`` float32, bfloat16 or float16; an odd batch is a ValueError.
        weight: ``(vocab, hidden)``, cast to ``input.dtype`` for the matmul.
        target: ``(2B, T)`` integer ids in ``[0, vocab)`` or ``ignore_index``.
        bias: ``(vocab,)`` or None.
        ref_input, ref_weight, ref_bias: the reference model's, shaped alike (its hidden size may
            differ); required with ``use_ref_model``, ignored without.
        ignore_index: target value of tokens that do not count.
        beta: the KL weight (> 0).
        compute_nll_loss, alpha: add ``alpha x`` the chosen NLL to the loss.
        use_ref_model: use the reference model (else its log-probs are 0).
        average_log_prob: mean instead of sum of the token log-probs.
        loss_type: one of ``LOSS_TYPES``.
        label_smoothing: ``e`` in [0, 1); ``exo_pair`` needs it in (0, 1), ``robust`` in [0, 0.5).
        discopop_tau: DiscoPOP's temperature (> 0).

    Returns:
        ``(loss, chosen_logps, rejected_logps, chosen_logits_mean, rejected_logits_mean, nll_loss,
        chosen_rewards, rejected_rewards)``, float32: the scalar loss; per pair the policy's
        sequence log-probs; the mean logit (mean over the vocabulary, then over the counted tokens
        of the chosen / rejected half, TRL's ``logits/chosen``; 0 without tokens); the chosen NLL
        (always computed, added to the loss only with ``compute_nll_loss``); per pair the rewards
        ``beta cr`` and ``beta rr``. Only ``loss`` is differentiable: backward gives
        ``grad_input``, ``grad_weight``, ``grad_bias`` in their tensors' dtypes; the reference
        model's tensors get none. Logits are computed in ``input.dtype``, the softmax in float32.

    A sequence with no counted token (every target ``ignore_index``) has log-prob 0 (not nan,
    where a mean over zero tokens would give it): the loss stays finite, that of log-prob 0.
    Mixed dtypes: ``weight`` / ``bias`` (``ref_weight`` / ``ref_bias``) of another float dtype
    than their input are cast to the input's dtype for the matmul, gradients in their own
    dtypes (`liger_core.op`, "Dtypes").
    """
    tensors = (input, weight, target, bias, ref_input, ref_weight, ref_bias)
    options = (ignore_index, beta, compute_nll_loss, use_ref_model, average_log_prob, loss_type)
    check_args(*tensors, *options, label_smoothing, discopop_tau, alpha)
    L.label_stats(OP_NAME, target, ignore_index, weight.shape[0])
    outs = math(*tensors, *options, label_smoothing, discopop_tau, alpha)
    return tuple(o.float() for o in outs)


def check_args(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None,
    ref_input: torch.Tensor | None,
    ref_weight: torch.Tensor | None,
    ref_bias: torch.Tensor | None,
    ignore_index: int,
    beta: float,
    compute_nll_loss: bool,
    use_ref_model: bool,
    average_log_prob: bool,
    loss_type: str,
    label_smoothing: float,
    discopop_tau: float,
    alpha: float,
) -> None:
    """Raise a clear error for arguments outside the contract (target values: checked by the
    backend, one host read)."""
    try:
        if (
            P.layout_ok(input, weight, target, bias)
            and P.reference_ok(input, weight, ref_input, ref_weight, ref_bias, use_ref_model)
            and type(ignore_index) is int
            and type(compute_nll_loss) is bool
            and type(average_log_prob) is bool
            and loss_type in LOSS_TYPES
            and _numbers_ok(loss_type, beta, label_smoothing, discopop_tau, alpha)
        ):
            return
    except (AttributeError, TypeError):
        pass
    op = OP_NAME
    P.check_layout(op, input, weight, target, bias)
    P.check_reference(op, input, weight, target, ref_input, ref_weight, ref_bias, use_ref_model)
    options = (ignore_index, beta, compute_nll_loss, average_log_prob, loss_type, label_smoothing, discopop_tau)
    check_options(op, *options, alpha)


def check_options(
    op: str, ignore_index, beta, compute_nll_loss, average_log_prob, loss_type, label_smoothing, discopop_tau, alpha
) -> None:
    """The scalar options' checks (slow path; the nn module runs them at construction)."""
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{op}: ignore_index must be an int; got {ignore_index!r}")
    P.check_flag(op, "compute_nll_loss", compute_nll_loss)
    P.check_flag(op, "average_log_prob", average_log_prob)
    P.check_choice(op, "loss_type", loss_type, LOSS_TYPES)
    P.check_number(op, "beta", beta, 0.0, None, open_low=True)
    if loss_type == "exo_pair":
        P.check_number(op, "label_smoothing (exo_pair)", label_smoothing, 0.0, 1.0, open_low=True, open_high=True)
    elif loss_type == "robust":
        P.check_number(op, "label_smoothing (robust)", label_smoothing, 0.0, 0.5, open_high=True)
    else:
        P.check_number(op, "label_smoothing", label_smoothing, 0.0, 1.0)
    P.check_number(op, "discopop_tau", discopop_tau, 0.0, None, open_low=True)
    P.check_number(op, "alpha", alpha)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _numbers_ok(loss_type, beta, label_smoothing, discopop_tau, alpha) -> bool:
    if not (_number(beta) and _number(label_smoothing) and _number(discopop_tau) and _number(alpha)):
        return False
    if loss_type == "exo_pair":
        smoothing_ok = 0 < label_smoothing < 1
    elif loss_type == "robust":
        smoothing_ok = 0 <= label_smoothing < 0.5
    else:
        smoothing_ok = 0 <= label_smoothing <= 1
    return beta > 0 and discopop_tau > 0 and smoothing_ok


def dpo_pair_loss(loss_type: str, beta: float, label_smoothing: float, discopop_tau: float) -> P.PairLoss:
    """The per-pair loss of ``loss_type`` (see the contract), as a `_preference.PairLoss`."""

    def pair_loss(chosen, rejected, ref_chosen, ref_rejected):
        cr = chosen if ref_chosen is None else chosen - ref_chosen
        rr = rejected if ref_rejected is None else rejected - ref_rejected
        d = beta * (cr - rr)
        e = label_smoothing
        if loss_type == "sigmoid":
            losses = -F.logsigmoid(d)
        elif loss_type == "hinge":
            losses = torch.relu(1 - d)
        elif loss_type == "exo_pair":
            losses = torch.sigmoid(d) * (F.logsigmoid(d) - _math.log1p(-e)) + torch.sigmoid(-d) * (
                F.logsigmoid(-d) - _math.log(e)
            )
        elif loss_type == "nca_pair":
            losses = -F.logsigmoid(beta * cr) - 0.5 * F.logsigmoid(-beta * cr) - 0.5 * F.logsigmoid(-beta * rr)
        elif loss_type == "robust":
            losses = (-(1 - e) * F.logsigmoid(d) + e * F.logsigmoid(-d)) / (1 - 2 * e)
        elif loss_type == "bco_pair":
            losses = -F.logsigmoid(beta * cr) - F.logsigmoid(-beta * rr)
        elif loss_type == "sppo_hard":
            losses = (cr - 0.5 / beta) ** 2 + (rr + 0.5 / beta) ** 2
        elif loss_type == "apo_zero":
            losses = 1 - torch.sigmoid(beta * cr) + torch.sigmoid(beta * rr)
        elif loss_type == "apo_down":
            losses = torch.sigmoid(beta * cr) + 1 - torch.sigmoid(d)
        elif loss_type == "discopop":
            m = torch.sigmoid(d / discopop_tau)
            losses = -F.logsigmoid(d) * (1 - m) + torch.exp(-d) * m
        else:
            raise ValueError(f"{OP_NAME}: loss_type must be one of {', '.join(LOSS_TYPES)}; got {loss_type!r}")
        return losses, beta * cr, beta * rr

    return pair_loss


def math(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None,
    ref_input: torch.Tensor | None,
    ref_weight: torch.Tensor | None,
    ref_bias: torch.Tensor | None,
    ignore_index: int,
    beta: float,
    compute_nll_loss: bool,
    use_ref_model: bool,
    average_log_prob: bool,
    loss_type: str,
    label_smoothing: float,
    discopop_tau: float,
    alpha: float,
) -> tuple[torch.Tensor, ...]:
    """Every output by the formula; float64 inputs give the oracle."""
    return P.paired_math(
        input, weight, target, bias, ref_input, ref_weight, ref_bias, ignore_index,
        dpo_pair_loss(loss_type, beta, label_smoothing, discopop_tau), average_log_prob,
        alpha if compute_nll_loss else 0.0, use_ref_model,
    )  # fmt: skip


# -- declaration ---------------------------------------------------------------------------------


def args(
    device,
    shape=(2, 7, 16, 40),
    dtype=torch.float32,
    seed=0,
    ignored=0.3,
    bias=False,
    ref=True,
    ref_bias=False,
    scale=2.0,
    **options,
):
    """``shape`` = (pairs, seq, hidden, vocab): chosen and rejected hidden states, an lm_head giving
    O(``scale``) logits, targets with a prompt-like ignored prefix of random length per sequence
    (``ignored`` the largest fraction; ``"all"``: every token of the first rejected sequence
    ignored), a reference model close to the policy (so the log-ratios are O(1))."""
    pairs, seq, hidden, vocab = shape
    g = S.gen(seed)
    n = 2 * pairs
    x = S.to(device, dtype, S.normal((n, seq, hidden), g))
    w = S.to(device, dtype, S.normal((vocab, hidden), g, scale / max(hidden, 1) ** 0.5))
    ignore_index = options.get("ignore_index", -100)
    target = torch.randint(0, vocab, (n, seq), generator=g)
    prefix = (torch.rand(n, generator=g) * ignored * seq).long() if ignored != "all" else torch.zeros(n).long()
    target[torch.arange(seq)[None, :] < prefix[:, None]] = ignore_index
    if ignored == "all" and n > 1:
        target[pairs] = ignore_index
    out = dict(input=x, weight=w, target=target.to(device), **options)
    out["bias"] = S.to(device, dtype, S.normal(vocab, g, 0.5)) if bias else None
    if ref:
        out["ref_input"] = S.to(device, dtype, S.normal((n, seq, hidden), g, 0.3)) + x.detach()
        out["ref_weight"] = S.to(device, dtype, S.normal((vocab, hidden), g, 0.3 / max(hidden, 1) ** 0.5)) + w
        out["ref_bias"] = S.to(device, dtype, S.normal(vocab, g, 0.5)) if ref_bias else None
    else:
        out["use_ref_model"] = False
    return out


# label_smoothing each loss type reads (others: 0).
_SMOOTHING = {"exo_pair": 1e-3, "robust": 0.2}


def loss_args(device, loss_type="sigmoid", **params):
    """`args` with ``loss_type`` and the label smoothing it takes (``beta`` 0.5 so d is O(1))."""
    params.setdefault("beta", 0.5)
    return args(device, loss_type=loss_type, label_smoothing=_SMOOTHING.get(loss_type, 0.0), **params)


def samples():
    # (pairs, seq, hidden, vocab): one pair of one token, odd sizes, a vocabulary wider than one
    # kernel block, more pairs than one chunk holds (vendor tests force small chunks too).
    shapes = ((1, 1, 8, 5), (2, 7, 16, 40), (3, 9, 24, 300), (1, 5, 16, 9000))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    # Every loss type, with and without the reference model; the NLL term and averaged log-probs.
    yield from S.grid(loss_args, dict(loss_type=LOSS_TYPES, ref=(True, False)), shape=(2, 6, 16, 33), seed=3)
    yield from S.grid(
        loss_args,
        dict(dtype=S.OPTION_DTYPES, average_log_prob=(False, True)),
        shape=(3, 11, 16, 130),
        seed=5,
        bias=True,
        ref_bias=True,
        compute_nll_loss=True,
        alpha=0.7,
    )
    yield sample(loss_args, grad_scalar=-2.5, shape=(2, 8, 16, 50), seed=7, loss_type="robust", average_log_prob=True)
    yield sample(loss_args, shape=(2, 8, 16, 50), seed=8, loss_type="discopop", discopop_tau=0.3, ignore_index=0)
    # A rejected sequence with no counted token: its log-prob is 0 (also averaged), not NaN.
    yield from S.grid(
        args, dict(average_log_prob=(False, True)), shape=(2, 6, 8, 20), seed=9, ignored="all", compute_nll_loss=True
    )
    # A frozen trunk (no grad_input), and forward only.
    yield sample(args, frozen=("input",), shape=(2, 5, 8, 30), seed=11, bias=True)
    yield sample(args, forward_only=True, shape=(2, 5, 8, 30), seed=12)


def _scales(a, upstream):
    # Outputs: sums of per-token log-probs, at least O(1). Gradients: matmuls of the logits'
    # gradient G with the weight / hidden states, whose terms cancel: |G| @ |operand|.
    loss_fn = dpo_pair_loss(a["loss_type"], a["beta"], a["label_smoothing"], a["discopop_tau"])
    outs = math(*a.values())
    scales = {name: max(S.peak(out.detach()), 1.0) for name, out in zip(OUTPUTS, outs)}
    if upstream.get("loss") is None or not a["input"].numel():
        return scales
    logits = P.reference_token_logits(a["input"], a["weight"], a["bias"]).detach().requires_grad_()
    g = (_logits_grad(logits, a, loss_fn) * upstream["loss"]).reshape(-1, logits.shape[-1])
    scales["grad_input"] = L.grad_scale_through(g, a["weight"])
    scales["grad_weight"] = L.grad_scale_through(g.t(), a["input"].reshape(-1, a["input"].shape[-1]))
    scales["grad_bias"] = S.peak(g.abs().sum(0))
    return scales


def _logits_grad(logits, a, loss_fn) -> torch.Tensor:
    """d(loss)/d(logits) by autograd through the formula (float64)."""
    with torch.enable_grad():
        target, ignore_index = a["target"], a["ignore_index"]
        n_pairs = logits.shape[0] // 2
        counts = P.token_counts(target, ignore_index)
        valid = target != ignore_index
        safe = torch.where(valid, target, 0).long()
        logp = torch.where(valid, logits.log_softmax(-1).gather(-1, safe[..., None]).squeeze(-1), 0.0)
        seq = P.sequence_logps(logp, counts, a["average_log_prob"])
        ref_c = ref_r = None
        if a["use_ref_model"]:
            ref_tok, _ = P.reference_token_logps(a["ref_input"], a["ref_weight"], a["ref_bias"], target, ignore_index)
            ref = P.sequence_logps(ref_tok, counts, a["average_log_prob"])
            ref_c, ref_r = ref[:n_pairs], ref[n_pairs:]
        per_pair, _, _ = loss_fn(seq[:n_pairs], seq[n_pairs:], ref_c, ref_r)
        loss = per_pair.sum() / n_pairs
        if a["compute_nll_loss"]:
            loss = loss - a["alpha"] * logp[:n_pairs].sum() / counts[:n_pairs].sum().clamp(min=1)
        (g,) = torch.autograd.grad(loss, logits)
    return g


def _bench_inputs(s, dt, dev, gen):
    # ``tokens`` split into pairs of sequences: ``batch`` sequences (made even) of tokens / batch.
    n_seq = max(2, s.batch + s.batch % 2)
    seq = max(1, s.tokens // n_seq)
    hidden = B.normal((n_seq, seq, s.hidden), dt, dev, gen)
    weight = B.lm_head(s, dt, dev, gen)
    target = torch.randint(0, s.vocab, (n_seq, seq), generator=gen, device=gen.device).to(dev)
    return dict(
        input=hidden,
        weight=weight,
        target=target,
        ref_input=B.normal((n_seq, seq, s.hidden), dt, dev, gen, grad=False),
        ref_weight=B.lm_head(s, dt, dev, gen, grad=False),
    )


def _torch_dpo(input, weight, target, bias=None, ref_input=None, ref_weight=None, ref_bias=None, **options):
    # The trainer's way: full logits, float32 log_softmax, gather, sums, the loss.
    opts = {k: options[k] for k in ("ignore_index", "beta", "compute_nll_loss", "use_ref_model", "average_log_prob")}
    extra = {k: options[k] for k in ("loss_type", "label_smoothing", "discopop_tau", "alpha")}
    return math(input, weight, target, bias, ref_input, ref_weight, ref_bias, **opts, **extra)[0]


def _liger_kernel_dpo():
    from liger_kernel.chunked_loss.functional import liger_fused_linear_dpo

    def call(input, weight, target, bias=None, ref_input=None, ref_weight=None, ref_bias=None, **o):
        return liger_fused_linear_dpo(
            input, weight, target, bias, ref_input, ref_weight, ref_bias, o["ignore_index"], o["beta"],
            o["compute_nll_loss"], True, o["use_ref_model"], o["average_log_prob"], 1, o["loss_type"],
            o["label_smoothing"], o["discopop_tau"], o["alpha"],
        )[0]  # fmt: skip

    return call


def _flops(s):
    # Policy: logits matmul forward, input and weight gradients backward; the reference's forward.
    mm = 2 * s.tokens * s.hidden * s.vocab
    return 2 * mm, 2 * mm


def _bad_target_shape(t):
    return t[:, :-1]


OP = Op(
    fused_linear_dpo,
    since=(1, 6),
    math=math,
    grads=("input", "weight", "bias"),
    grads_in_forward=_always,
    outputs=OUTPUTS,
    no_grad_outputs=OUTPUTS[1:],
    samples=samples,
    # (pairs, seq, hidden, vocab)
    smoke=(sample(args, shape=(1, 3, 8, 5), bias=True), sample(args, shape=(2, 10, 16, 700), compute_nll_loss=True)),
    error_sample=sample(args, ignored=0.0, bias=True),
    errors=(
        bad("target_range", ValueError, r"target must be in \[0, 40\).*first: 41", target=set_item((0, 1), 41)),
        bad(
            "odd_batch",
            ValueError,
            r"input must hold the chosen then the rejected sequences, an even batch \(2 x pairs\); got batch 3",
            input=lambda x: x[:3],
            target=lambda t: t[:3],
            ref_input=lambda x: x[:3],
        ),
        bad(
            "target_shape",
            ValueError,
            r"target must have shape \(batch, seq\) = \(4, 7\) \(input.shape\[:2\]\); got \(4, 6\)",
            target=_bad_target_shape,
        ),
        bad(
            "halves_mismatch",
            ValueError,
            r"ref_input must have shape \(batch, seq, hidden_ref\) with \(batch, seq\) = \(4, 7\)",
            ref_input=lambda x: x[:2],
        ),
        bad(
            "input_2d",
            ValueError,
            r"input must be 3-D \(batch, seq, hidden\); got shape \(28, 16\)",
            input=lambda x: x.reshape(-1, x.shape[-1]),
        ),
        bad(
            "hidden_mismatch",
            ValueError,
            r"weight must have shape \(vocab, hidden\) with hidden = input.shape\[2\] = 16",
            weight=lambda w: w[:, :15],
        ),
        bad("bias_shape", ValueError, r"bias must have shape \(vocab,\) = \(40,\); got \(3,\)", bias=lambda b: b[:3]),
        bad("weight_device", ValueError, r"one device.*weight is on", weight=on_other_device),
        bad("no_ref", ValueError, r"use_ref_model=True needs ref_input; got None", ref_input=None),
        bad(
            "loss_type",
            ValueError,
            r"loss_type must be one of sigmoid, hinge, exo_pair.*; got 'ipo'",
            loss_type="ipo",
        ),
        bad(
            "exo_smoothing",
            ValueError,
            r"label_smoothing \(exo_pair\) must be a number in \(0, 1\); got 0.0",
            loss_type="exo_pair",
        ),
        bad(
            "robust_smoothing",
            ValueError,
            r"label_smoothing \(robust\) must be a number in \[0, 0.5\); got 0.5",
            loss_type="robust",
            label_smoothing=0.5,
        ),
        bad("beta", ValueError, r"beta must be a number in \(0, inf\); got 0", beta=0),
        bad("nll_flag", TypeError, r"compute_nll_loss must be True or False; got 1", compute_nll_loss=1),
        bad("target_float", TypeError, r"target must have an integer dtype.*got float32", target=lambda t: t.float()),
    ),
    checks=P.checks(_scales),
    bench=B.BenchSpec(
        group="losses",
        axes=("tokens", "hidden", "vocab", "batch"),
        layouts={"pairs": _bench_inputs},
        torch_fn=_torch_dpo,
        traffic=lambda s, e: (
            (2 * s.tokens + 2 * s.vocab) * s.hidden * e + 8 * s.tokens,
            3 * (s.tokens + s.vocab) * s.hidden * e + 8 * s.tokens,
        ),
        describe=lambda s: B.dims(
            ("pairs", max(2, s.batch + s.batch % 2) // 2),
            ("seq", s.tokens // max(2, s.batch + s.batch % 2)),
            ("hidden", s.hidden),
            ("vocab", s.vocab),
        ),
        flops=_flops,
        peers={B.LIGER_KERNEL: B.Peer(_liger_kernel_dpo)},
    ),
)
