"""The `fused_linear_kto` op: the lm_head projection and Kahneman-Tversky Optimization's unpaired
loss (liger-kernel 0.8.5's ``LigerFusedLinearKTOLoss``, TRL's ``KTOTrainer``) without the logits,
declared once. The shared layout, reference and chunked orchestration (the unpaired sibling
``fused_linear_unpaired``): `liger_core.ops._preference`."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Op, bad, on_other_device, sample, set_item
from liger_core.op import always as _always
from liger_core.ops import _losses as L
from liger_core.ops import _preference as P
from liger_core.ops import _samples as S

OP_NAME = "fused_linear_kto"
OUTPUTS = (
    "loss",
    "chosen_logps_sum",
    "rejected_logps_sum",
    "chosen_logits_sum",
    "rejected_logits_sum",
    "chosen_rewards_sum",
    "rejected_rewards_sum",
)


def fused_linear_kto(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    preference_labels: torch.Tensor,
    bias: torch.Tensor | None = None,
    ref_input: torch.Tensor | None = None,
    ref_weight: torch.Tensor | None = None,
    ref_bias: torch.Tensor | None = None,
    kl: torch.Tensor | None = None,
    ignore_index: int = -100,
    beta: float = 0.1,
    use_ref_model: bool = True,
    average_log_prob: bool = False,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> tuple[torch.Tensor, ...]:
    """KTO's loss on the lm_head's log-probabilities, the logits never materialised whole.

    Layout (liger-kernel's, TRL's): ``input`` ``(B, T, hidden)`` holds B completions, each with
    its own label: ``preference_labels[i]`` True for a desirable (chosen) one, False for an
    undesirable (rejected) one, in any order (unpaired). ``target`` ``(B, T)`` holds the
    next-token ids, ``ignore_index`` where a token does not count (prompt, padding). A sequence's
    log-probability ``logp`` is the sum over its counted tokens of
    ``log_softmax(input_t @ weight.T + bias)[target_t]`` (with ``average_log_prob`` their mean; 0
    without counted tokens). With ``use_ref_model`` the reference model's ``ref_logp`` comes the
    same way from ``ref_input``, ``ref_weight``, ``ref_bias`` (no gradient), else it is 0. With
    ``r = logp - ref_logp`` and ``z`` the KL estimate ``kl`` (0 when None; TRL's "apo_zero_unpaired"
    loss is ``kl=None``), the per-sequence loss is (TRL's KTOTrainer, the KTO paper's eqn. 7)::

        chosen     desirable_weight   x (1 - sigmoid(beta (r - z)))
        rejected   undesirable_weight x (1 - sigmoid(beta (z - r)))

    and ``loss`` their mean over the B sequences. ``kl`` is used as given (TRL passes the batch
    mean of the mismatched completions' log-ratios, detached and clamped at 0) and gets no
    gradient.

    Args:
        input: ``(B, T, hidden)`` float32, bfloat16 or float16.
        weight: ``(vocab, hidden)``, cast to ``input.dtype`` for the matmul.
        target: ``(B, T)`` integer ids in ``[0, vocab)`` or ``ignore_index``.
        preference_labels: ``(B,)`` bool, True for desirable completions.
        bias: ``(vocab,)`` or None.
        ref_input, ref_weight, ref_bias: the reference model's, shaped alike (its hidden size may
            differ); required with ``use_ref_model``, ignored without.
        kl: a float tensor of one element (shape ``()`` or ``(1,)``), or None.
        ignore_index: target value of tokens that do not count.
        beta: the KL weight (> 0).
        use_ref_model: use the reference model (else its log-probs are 0).
        average_log_prob: mean instead of sum of the token log-probs.
        desirable_weight, undesirable_weight: the two halves' loss weights (>= 0), TRL's.

    Returns:
        ``(loss, chosen_logps_sum, rejected_logps_sum, chosen_logits_sum, rejected_logits_sum,
        chosen_rewards_sum, rejected_rewards_sum)``, float32 scalars, liger-kernel's outputs: the
        loss; the sums over the chosen / rejected sequences of ``logp``; of their logits (every
        vocabulary entry of every counted token: TRL's ``logits/chosen`` is
        ``chosen_logits_sum / (vocab x chosen counted tokens)``; liger-kernel 0.8.5 sums over the
        prompt and padding positions too); of the rewards ``beta r``. Only ``loss`` is
        differentiable: backward gives ``grad_input``, ``grad_weight``, ``grad_bias`` in their
        tensors' dtypes; the reference model's tensors and ``kl`` get none. Logits are computed in
        ``input.dtype``, the softmax in float32.

    A sequence with no counted token (every target ``ignore_index``) has log-prob 0 (not nan,
    where a mean over zero tokens would give it): the loss stays finite, that of log-prob 0.
    Mixed dtypes: ``weight`` / ``bias`` (``ref_weight`` / ``ref_bias``) of another float dtype
    than their input are cast to the input's dtype for the matmul, gradients in their own
    dtypes (`liger_core.op`, "Dtypes").
    """
    tensors = (input, weight, target, preference_labels, bias, ref_input, ref_weight, ref_bias, kl)
    options = (ignore_index, beta, use_ref_model, average_log_prob, desirable_weight, undesirable_weight)
    check_args(*tensors, *options)
    L.label_stats(OP_NAME, target, ignore_index, weight.shape[0])
    return tuple(o.float() for o in math(*tensors, *options))


def check_args(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    preference_labels: torch.Tensor,
    bias: torch.Tensor | None,
    ref_input: torch.Tensor | None,
    ref_weight: torch.Tensor | None,
    ref_bias: torch.Tensor | None,
    kl: torch.Tensor | None,
    ignore_index: int,
    beta: float,
    use_ref_model: bool,
    average_log_prob: bool,
    desirable_weight: float,
    undesirable_weight: float,
) -> None:
    """Raise a clear error for arguments outside the contract (target values: checked by the
    backend, one host read)."""
    try:
        if (
            P.layout_ok(input, weight, target, bias, paired=False)
            and P.reference_ok(input, weight, ref_input, ref_weight, ref_bias, use_ref_model)
            and _labels_ok(input, preference_labels)
            and _kl_ok(input, kl)
            and type(ignore_index) is int
            and type(average_log_prob) is bool
            and _number(beta)
            and beta > 0
            and _number(desirable_weight)
            and desirable_weight >= 0
            and _number(undesirable_weight)
            and undesirable_weight >= 0
        ):
            return
    except (AttributeError, TypeError):
        pass
    op = OP_NAME
    P.check_layout(op, input, weight, target, bias, paired=False)
    check_labels_and_kl(op, input, preference_labels, kl)
    P.check_reference(op, input, weight, target, ref_input, ref_weight, ref_bias, use_ref_model, paired=False)
    check_options(op, ignore_index, beta, average_log_prob, desirable_weight, undesirable_weight)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _labels_ok(input, labels) -> bool:
    return (
        isinstance(labels, torch.Tensor)
        and labels.dtype == torch.bool
        and labels.shape == input.shape[:1]
        and labels.device == input.device
    )


def _kl_ok(input, kl) -> bool:
    return kl is None or (L.is_float(kl) and kl.numel() == 1 and kl.ndim <= 1 and kl.device == input.device)


def check_labels_and_kl(op: str, input, preference_labels, kl) -> None:
    """``preference_labels``: a bool ``(batch,)`` tensor; ``kl``: None or one float element."""
    if not isinstance(preference_labels, torch.Tensor) or preference_labels.dtype != torch.bool:
        got = preference_labels.dtype if isinstance(preference_labels, torch.Tensor) else type(preference_labels)
        raise TypeError(f"{op}: preference_labels must be a bool tensor (True: desirable); got {got}")
    if preference_labels.shape != input.shape[:1]:
        raise ValueError(
            f"{op}: preference_labels must have shape (batch,) = {tuple(input.shape[:1])}; "
            f"got {tuple(preference_labels.shape)}"
        )
    L.check_same_device(op, input=input, preference_labels=preference_labels)
    if kl is None:
        return
    if not L.is_float(kl):
        got = kl.dtype if isinstance(kl, torch.Tensor) else type(kl).__name__
        raise TypeError(f"{op}: kl must be None or a float32, bfloat16 or float16 tensor; got {got}")
    if kl.numel() != 1 or kl.ndim > 1:
        raise ValueError(f"{op}: kl must hold one element (shape () or (1,)); got shape {tuple(kl.shape)}")
    L.check_same_device(op, input=input, kl=kl)


def check_options(op: str, ignore_index, beta, average_log_prob, desirable_weight, undesirable_weight) -> None:
    """The scalar options' checks (slow path; the nn module runs them at construction)."""
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{op}: ignore_index must be an int; got {ignore_index!r}")
    P.check_flag(op, "average_log_prob", average_log_prob)
    P.check_number(op, "beta", beta, 0.0, None, open_low=True)
    P.check_number(op, "desirable_weight", desirable_weight, 0.0, None)
    P.check_number(op, "undesirable_weight", undesirable_weight, 0.0, None)


def kto_sequence_loss(
    preference_labels: torch.Tensor,
    kl: torch.Tensor | None,
    beta: float,
    desirable_weight: float,
    undesirable_weight: float,
) -> P.SequenceLoss:
    """The per-sequence loss and rewards (see the contract), as a `_preference.SequenceLoss`."""

    def sequence_loss(logps, ref_logps, rows):
        ratio = logps if ref_logps is None else logps - ref_logps.to(logps.dtype)
        labels = preference_labels[rows]
        z = ratio if kl is None else ratio - kl.detach().reshape(()).to(ratio.dtype)
        # 1 - sigmoid(a) as exp(logsigmoid(-a)): no cancellation where the sigmoid saturates, in
        # the value nor in the gradient (sigmoid's backward, y (1 - y), loses it as y -> 1).
        losses = torch.exp(F.logsigmoid(-beta * torch.where(labels, z, -z)))
        weights = torch.where(labels, desirable_weight, undesirable_weight).to(losses.dtype)
        return weights * losses, beta * ratio

    return sequence_loss


def kto_outputs(
    loss: torch.Tensor, logps: torch.Tensor, rewards: torch.Tensor, logit_sums: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """The contract's outputs from the per-sequence values: sums over each label's sequences."""
    chosen = labels.to(logps.dtype)
    rejected = 1 - chosen
    return (
        loss,
        (logps * chosen).sum(),
        (logps * rejected).sum(),
        (logit_sums * chosen).sum(),
        (logit_sums * rejected).sum(),
        (rewards * chosen).sum(),
        (rewards * rejected).sum(),
    )


def math(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    preference_labels: torch.Tensor,
    bias: torch.Tensor | None,
    ref_input: torch.Tensor | None,
    ref_weight: torch.Tensor | None,
    ref_bias: torch.Tensor | None,
    kl: torch.Tensor | None,
    ignore_index: int,
    beta: float,
    use_ref_model: bool,
    average_log_prob: bool,
    desirable_weight: float,
    undesirable_weight: float,
) -> tuple[torch.Tensor, ...]:
    """Every output by the formula; float64 inputs give the oracle."""
    counts = P.token_counts(target, ignore_index)
    token_logps, token_mean_logits = P.reference_token_logps(input, weight, bias, target, ignore_index)
    logps = P.sequence_logps(token_logps, counts, average_log_prob)
    ref_logps = None
    if use_ref_model:
        with torch.no_grad():
            ref_tokens, _ = P.reference_token_logps(ref_input, ref_weight, ref_bias, target, ignore_index)
            ref_logps = P.sequence_logps(ref_tokens, counts, average_log_prob).to(logps.dtype)
    loss_fn = kto_sequence_loss(preference_labels, kl, beta, desirable_weight, undesirable_weight)
    per_seq, rewards = loss_fn(logps, ref_logps, slice(None))
    loss = per_seq.sum() / max(input.shape[0], 1)
    logit_sums = token_mean_logits.detach().sum(-1) * weight.shape[0]
    return kto_outputs(loss, logps.detach(), rewards.detach(), logit_sums, preference_labels)


def fused(
    kernels: P.TokenLogpKernels,
    budget: int,
    need_input: bool,
    need_weight: bool,
    need_bias: bool,
    input, weight, target, preference_labels, bias, ref_input, ref_weight, ref_bias, kl, ignore_index, beta,
    use_ref_model, average_log_prob, desirable_weight, undesirable_weight,
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:  # fmt: skip
    """What every backend's autograd Function runs: `_preference.fused_linear_unpaired` over the
    backend's kernels, then the contract's outputs; ``(outputs, grad_input, grad_weight, grad_bias)``."""
    loss_fn = kto_sequence_loss(preference_labels, kl, beta, desirable_weight, undesirable_weight)
    (loss, logps, rewards, logit_sums), *grads = P.fused_linear_unpaired(
        kernels, input, weight, target, bias, ref_input, ref_weight, ref_bias, ignore_index, loss_fn,
        average_log_prob, use_ref_model, budget, need_input, need_weight, need_bias, OP_NAME,
    )  # fmt: skip
    return (kto_outputs(loss, logps, rewards, logit_sums, preference_labels), *grads)


# -- declaration ---------------------------------------------------------------------------------


def args(
    device,
    shape=(5, 7, 16, 40),
    dtype=torch.float32,
    seed=0,
    ignored=0.3,
    bias=False,
    ref=True,
    ref_bias=False,
    kl=0.2,
    scale=2.0,
    labels="mixed",
    **options,
):
    """``shape`` = (batch, seq, hidden, vocab): hidden states, an lm_head giving O(``scale``)
    logits, targets with a prompt-like ignored prefix of random length per sequence (``ignored``
    the largest fraction; ``"all"``: every token of the last sequence ignored), random labels
    (``labels`` "mixed"; "chosen" / "rejected": all alike), a KL estimate (``kl`` None: none), a
    reference model close to the policy (so the log-ratios are O(1)); ``beta`` 0.5 unless given."""
    batch, seq, hidden, vocab = shape
    g = S.gen(seed)
    x = S.to(device, dtype, S.normal((batch, seq, hidden), g))
    w = S.to(device, dtype, S.normal((vocab, hidden), g, scale / max(hidden, 1) ** 0.5))
    ignore_index = options.get("ignore_index", -100)
    target = torch.randint(0, vocab, (batch, seq), generator=g)
    prefix = (torch.rand(batch, generator=g) * ignored * seq).long() if ignored != "all" else torch.zeros(batch).long()
    target[torch.arange(seq)[None, :] < prefix[:, None]] = ignore_index
    if ignored == "all":
        target[-1] = ignore_index
    if labels == "mixed":
        pref = torch.rand(batch, generator=g) < 0.5
        pref[0] = True
        pref[-1] = batch == 1  # both kinds whenever batch > 1
    else:
        pref = torch.full((batch,), labels == "chosen")
    options.setdefault("beta", 0.5)
    out = dict(input=x, weight=w, target=target.to(device), preference_labels=pref.to(device), **options)
    out["bias"] = S.to(device, dtype, S.normal(vocab, g, 0.5)) if bias else None
    out["kl"] = None if kl is None else torch.tensor(kl, dtype=torch.float32, device=device)
    if ref:
        out["ref_input"] = S.to(device, dtype, S.normal((batch, seq, hidden), g, 0.3)) + x.detach()
        out["ref_weight"] = S.to(device, dtype, S.normal((vocab, hidden), g, 0.3 / max(hidden, 1) ** 0.5)) + w
        out["ref_bias"] = S.to(device, dtype, S.normal(vocab, g, 0.5)) if ref_bias else None
    else:
        out["use_ref_model"] = False
    return out


def samples():
    # (batch, seq, hidden, vocab): one sequence of one token, odd sizes, a vocabulary wider than one
    # kernel block, more sequences than one chunk holds (vendor tests force small chunks too).
    shapes = ((1, 1, 8, 5), (5, 7, 16, 40), (3, 9, 24, 300), (2, 5, 16, 9000))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    # With and without the reference model and the KL term; one-sided batches; the TRL weights.
    yield from S.grid(args, dict(ref=(True, False), kl=(0.2, None)), shape=(6, 6, 16, 33), seed=3)
    yield from S.grid(args, dict(labels=("chosen", "rejected")), shape=(3, 6, 16, 33), seed=4, kl=0.0)
    yield from S.grid(
        args,
        dict(dtype=S.OPTION_DTYPES, average_log_prob=(False, True)),
        shape=(5, 11, 16, 130),
        seed=5,
        bias=True,
        ref_bias=True,
        desirable_weight=1.5,
        undesirable_weight=0.6,
    )
    yield sample(args, grad_scalar=-2.5, shape=(4, 8, 16, 50), seed=7, average_log_prob=True, beta=2.0)
    yield sample(args, shape=(4, 8, 16, 50), seed=8, ignore_index=0)
    # A sequence with no counted token: its log-prob is 0 (also averaged), not NaN.
    yield from S.grid(args, dict(average_log_prob=(False, True)), shape=(4, 6, 8, 20), seed=9, ignored="all")
    # A frozen trunk (no grad_input), and forward only.
    yield sample(args, frozen=("input",), shape=(4, 5, 8, 30), seed=11, bias=True)
    yield sample(args, forward_only=True, shape=(4, 5, 8, 30), seed=12)


def _scales(a, upstream):
    # Outputs: sums of per-token log-probs or logits, at least O(1). Gradients: matmuls of the
    # logits' gradient G with the weight / hidden states, whose terms cancel: |G| @ |operand|.
    outs = math(*a.values())
    scales = {name: max(S.peak(out.detach()), 1.0) for name, out in zip(OUTPUTS, outs)}
    # A reward sum is beta x (policy - reference) log-prob sums: it cancels terms as large as those.
    for side in ("chosen", "rejected"):
        scales[f"{side}_rewards_sum"] = max(1.0, 2 * a["beta"] * scales[f"{side}_logps_sum"])
    if upstream.get("loss") is None or not a["input"].numel():
        return scales
    logits = P.reference_token_logits(a["input"], a["weight"], a["bias"]).detach().requires_grad_()
    g = (_logits_grad(logits, a) * upstream["loss"]).reshape(-1, logits.shape[-1])
    scales["grad_input"] = L.grad_scale_through(g, a["weight"])
    scales["grad_weight"] = L.grad_scale_through(g.t(), a["input"].reshape(-1, a["input"].shape[-1]))
    scales["grad_bias"] = S.peak(g.abs().sum(0))
    scales["loss"] = max(scales["loss"], max(a["desirable_weight"], a["undesirable_weight"]))
    return scales


def _logits_grad(logits, a) -> torch.Tensor:
    """d(loss)/d(logits) by autograd through the formula (float64)."""
    with torch.enable_grad():
        target, ignore_index = a["target"], a["ignore_index"]
        counts = P.token_counts(target, ignore_index)
        valid = target != ignore_index
        safe = torch.where(valid, target, 0).long()
        logp = torch.where(valid, logits.log_softmax(-1).gather(-1, safe[..., None]).squeeze(-1), 0.0)
        seq = P.sequence_logps(logp, counts, a["average_log_prob"])
        ref = None
        if a["use_ref_model"]:
            ref_tok, _ = P.reference_token_logps(a["ref_input"], a["ref_weight"], a["ref_bias"], target, ignore_index)
            ref = P.sequence_logps(ref_tok, counts, a["average_log_prob"])
        loss_fn = kto_sequence_loss(
            a["preference_labels"], a["kl"], a["beta"], a["desirable_weight"], a["undesirable_weight"]
        )
        per_seq, _ = loss_fn(seq, ref, slice(None))
        (g,) = torch.autograd.grad(per_seq.sum() / logits.shape[0], logits)
    return g


def _bench_inputs(s, dt, dev, gen):
    # ``tokens`` split into ``batch`` sequences of tokens / batch, labels alternating.
    n_seq = max(1, s.batch)
    seq = max(1, s.tokens // n_seq)
    return dict(
        input=B.normal((n_seq, seq, s.hidden), dt, dev, gen),
        weight=B.lm_head(s, dt, dev, gen),
        target=torch.randint(0, s.vocab, (n_seq, seq), generator=gen, device=gen.device).to(dev),
        preference_labels=(torch.arange(n_seq) % 2 == 0).to(dev),
        ref_input=B.normal((n_seq, seq, s.hidden), dt, dev, gen, grad=False),
        ref_weight=B.lm_head(s, dt, dev, gen, grad=False),
        kl=torch.zeros((), dtype=torch.float32, device=dev),
    )


_OPTIONS = ("ignore_index", "beta", "use_ref_model", "average_log_prob", "desirable_weight", "undesirable_weight")


def _torch_kto(
    input, weight, target, preference_labels, bias=None, ref_input=None, ref_weight=None, ref_bias=None, kl=None, **o
):
    # The trainer's way: full logits, float32 log_softmax, gather, sums, the loss.
    tensors = (input, weight, target, preference_labels, bias, ref_input, ref_weight, ref_bias, kl)
    return math(*tensors, *(o[k] for k in _OPTIONS))[0]


def _liger_kernel_kto():
    from liger_kernel.chunked_loss import LigerFusedLinearKTOLoss

    def call(input, weight, target, preference_labels, bias=None, ref_input=None, ref_weight=None, ref_bias=None,
             kl=None, **o):  # fmt: skip
        loss_fn = LigerFusedLinearKTOLoss(
            ignore_index=o["ignore_index"], beta=o["beta"], use_ref_model=o["use_ref_model"],
            average_log_prob=o["average_log_prob"],
        )  # fmt: skip
        return loss_fn(input, weight, target, bias, preference_labels, ref_input, ref_weight, ref_bias, kl)[0]

    return call


def _flops(s):
    # Policy: logits matmul forward, input and weight gradients backward; the reference's forward.
    mm = 2 * s.tokens * s.hidden * s.vocab
    return 2 * mm, 2 * mm


OP = Op(
    fused_linear_kto,
    since=(1, 7),
    math=math,
    grads=("input", "weight", "bias"),
    grads_in_forward=_always,
    outputs=OUTPUTS,
    no_grad_outputs=OUTPUTS[1:],
    samples=samples,
    # (batch, seq, hidden, vocab)
    smoke=(sample(args, shape=(2, 3, 8, 5), bias=True), sample(args, shape=(4, 10, 16, 700), kl=None)),
    error_sample=sample(args, ignored=0.0, bias=True),
    errors=(
        bad("target_range", ValueError, r"target must be in \[0, 40\).*first: 41", target=set_item((0, 1), 41)),
        bad(
            "target_shape",
            ValueError,
            r"target must have shape \(batch, seq\) = \(5, 7\) \(input.shape\[:2\]\); got \(5, 6\)",
            target=lambda t: t[:, :-1],
        ),
        bad(
            "labels_dtype",
            TypeError,
            r"preference_labels must be a bool tensor \(True: desirable\); got torch.int64",
            preference_labels=lambda p: p.long(),
        ),
        bad(
            "labels_shape",
            ValueError,
            r"preference_labels must have shape \(batch,\) = \(5,\); got \(4,\)",
            preference_labels=lambda p: p[:4],
        ),
        bad("labels_device", ValueError, r"one device.*preference_labels is on", preference_labels=on_other_device),
        bad(
            "kl_shape",
            ValueError,
            r"kl must hold one element \(shape \(\) or \(1,\)\); got shape \(2,\)",
            kl=lambda k: k.reshape(1).expand(2),
        ),
        bad(
            "kl_int",
            TypeError,
            r"kl must be None or a float32, bfloat16 or float16 tensor; got torch.int64",
            kl=lambda k: k.long(),
        ),
        bad(
            "ref_batch",
            ValueError,
            r"ref_input must have shape \(batch, seq, hidden_ref\) with \(batch, seq\) = \(5, 7\)",
            ref_input=lambda x: x[:2],
        ),
        bad(
            "input_2d",
            ValueError,
            r"input must be 3-D \(batch, seq, hidden\); got shape \(35, 16\)",
            input=lambda x: x.reshape(-1, x.shape[-1]),
        ),
        bad(
            "hidden_mismatch",
            ValueError,
            r"weight must have shape \(vocab, hidden\) with hidden = input.shape\[2\] = 16",
            weight=lambda w: w[:, :15],
        ),
        bad("bias_shape", ValueError, r"bias must have shape \(vocab,\) = \(40,\); got \(3,\)", bias=lambda b: b[:3]),
        bad("no_ref", ValueError, r"use_ref_model=True needs ref_input; got None", ref_input=None),
        bad("beta", ValueError, r"beta must be a number in \(0, inf\); got 0", beta=0),
        bad(
            "undesirable_weight",
            ValueError,
            r"undesirable_weight must be a number in \[0, inf\); got -1",
            undesirable_weight=-1,
        ),
        bad("average_flag", TypeError, r"average_log_prob must be True or False; got 1", average_log_prob=1),
        bad("target_float", TypeError, r"target must have an integer dtype.*got float32", target=lambda t: t.float()),
    ),
    checks=P.checks(_scales, OUTPUTS),
    bench=B.BenchSpec(
        group="losses",
        axes=("tokens", "hidden", "vocab", "batch"),
        layouts={"unpaired": _bench_inputs},
        torch_fn=_torch_kto,
        traffic=lambda s, e: (
            (2 * s.tokens + 2 * s.vocab) * s.hidden * e + 8 * s.tokens,
            3 * (s.tokens + s.vocab) * s.hidden * e + 8 * s.tokens,
        ),
        describe=lambda s: B.dims(
            ("batch", max(1, s.batch)),
            ("seq", s.tokens // max(1, s.batch)),
            ("hidden", s.hidden),
            ("vocab", s.vocab),
        ),
        flops=_flops,
        peers={B.LIGER_KERNEL: B.Peer(_liger_kernel_kto)},
    ),
)
