"""The `fused_linear_grpo` op: the policy's lm_head and the GRPO-family losses of TRL's
GRPOTrainer without the logits, declared once.

The loss is a sum over tokens of ``weight_bt * per_token_loss_bt`` where the weights depend only
on the masks (each loss type's normaliser) and ``per_token_loss`` of a token depends only on its
own sequence (sequence-level importance weights and VESPO's gamma weights are sums over one
sequence). So a backend may run whole sequences a chunk at a time: `token_weights` and
`metric_weights` come first from the full masks, then `chunk_objective` on each chunk's
per-token log-probabilities gives that chunk's share of the loss and metrics, and its gradient in
those log-probabilities by autograd (tokens x 1 values, cheap); the backend turns that into the
logits' gradient with its kernels. The reference (`math`) runs `chunk_objective` once on the
whole batch.
"""

from __future__ import annotations

import inspect
import math as _math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, sample
from liger_core.op import always as _always
from liger_core.ops import _losses as L
from liger_core.ops import _samples as S
from liger_core.ops._checks import check_floating, check_same_device, check_same_dtype

OP_NAME = "fused_linear_grpo"
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
# The entries of the ``metrics`` output, in order.
METRICS = ("kl", "clip_ratio_low", "clip_ratio_high", "clip_ratio_region", "phi_seq_mean")
MASK_DTYPES = frozenset((torch.bool, *L.INDEX_DTYPES, torch.float32, torch.bfloat16, torch.float16))
# Clipped loss types (TRL's clip_ratio metrics), the ones using epsilon_low/high and delta.
CLIPPED = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
# VESPO's log-space clamps (TRL's get_gamma_weights): log(1e-8) below, 20 above.
_VESPO_LOG_MIN = _math.log(1e-8)
_VESPO_LOG_MAX = 20.0


def fused_linear_grpo(
    input: torch.Tensor,
    weight: torch.Tensor,
    selected_token_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    advantages: torch.Tensor,
    bias: torch.Tensor | None = None,
    ref_per_token_logps: torch.Tensor | None = None,
    old_per_token_logps: torch.Tensor | None = None,
    vllm_is_ratio: torch.Tensor | None = None,
    num_items_in_batch: float | None = None,
    beta: float = 0.04,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    loss_type: str = "dapo",
    max_completion_length: int | None = None,
    importance_sampling_level: str = "token",
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    temperature: float = 1.0,
    delta: float | None = None,
    use_bias_correction_kl: bool = False,
    vespo_k_pos: float = 2.0,
    vespo_lambda_pos: float = 3.0,
    vespo_k_neg: float = 3.0,
    vespo_lambda_neg: float = 2.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The policy's lm_head projection, per-token log-probabilities of the sampled tokens and
    the GRPO loss of TRL's ``GRPOTrainer._compute_loss`` (trl 1.16), without materialising the
    logits (liger-kernel 0.8.5's ``LigerFusedLinearGRPOFunction``, arguments by its names)::

        logp[b, t] = log_softmax((input[b, t] @ weight.T + bias) / temperature)[selected_token_ids[b, t]]
        old = old_per_token_logps, or logp detached (on-policy)
        log_ratio = logp - old
        token level:    w = log_ratio                                            (B, T)
        sequence level: w = sum_t(log_ratio * m) / max(sum_t m, 1)               (B, 1)
        coef_1 = exp(w)

    with ``m = attention_mask`` (the completion mask) and ``A = advantages[:, None]``. Per token:

    - grpo, bnpo, dr_grpo, dapo, luspo: ``coef_2 = clamp(coef_1, 1 - epsilon_low,
      1 + epsilon_high)``; with ``delta``, ``coef_1 = min(coef_1, delta)``;
      ``loss = -min(coef_1 * A, coef_2 * A)``.
    - cispo: ``loss = -detach(min(coef_1, epsilon_high)) * A * logp``.
    - sapo: ``tau = sapo_temperature_pos if A > 0 else sapo_temperature_neg``;
      ``loss = -sigmoid(tau * (coef_1 - 1)) * 4 / tau * A``.
    - vespo: ``loss = -phi * A * logp`` with TRL's detached gamma weight per sequence:
      ``log w = clamp(sum_t clamp(log_ratio, -20, 20) * m + sum_t clamp(log vllm_is_ratio,
      log 1e-8, 20), log 1e-8, 20)``, ``(k, lam) = (vespo_k_pos, vespo_lambda_pos)`` if ``A >= 0``
      else the ``_neg`` pair (``lam >= 1e-4``), ``phi = exp(lam + k log w - lam w)`` (NaN, inf -> 0).

    Then ``loss *= vllm_is_ratio`` (not for vespo, which folds it into phi) and, when ``beta !=
    0``, ``loss += beta * kl`` with ``kl = exp(ref - logp) - (ref - logp) - 1`` (times ``coef_1``
    before the delta clamp when ``use_bias_correction_kl``). The total, with ``B`` sequences:

    - grpo, sapo: ``sum_b (sum_t loss * m / max(sum_t m, 1)) / B``
    - bnpo: ``sum(loss * m) / max(sum(m), 1)``
    - dr_grpo: ``sum(loss * m) / (B * max_completion_length)``
    - dapo, cispo, vespo: ``sum(loss * m) / max(num_items_in_batch, 1)`` (default ``sum(m)``; the
      caller divides TRL's generation-batch count by processes and accumulation as TRL does)
    - luspo: ``sum(loss * m) / B``

    The metrics TRL logs, as TRL's ``global_masked_mean`` on one process (token-level values
    averaged over the masked tokens, sequence-level ones over the sequences): ``kl`` (0 when
    ``beta == 0``); for the clipped types ``clip_ratio_low`` (``coef_1 < 1 - epsilon_low`` and
    ``A < 0``), ``clip_ratio_high`` (``coef_1 > 1 + epsilon_high`` and ``A > 0``),
    ``clip_ratio_region`` (either); for cispo ``clip_ratio_high = clip_ratio_region`` =
    ``coef_1 > epsilon_high`` and ``A > 0`` (TRL's ``cispo_clip_ratio``), low 0; for vespo
    ``phi_seq_mean``; entries a loss type does not log are 0.

    Args:
        input: ``(B, T, hidden)`` hidden states of the completion tokens, float32, bfloat16 or
            float16.
        weight: ``(vocab, hidden)``, ``input``'s dtype.
        selected_token_ids: ``(B, T)`` integer ids of the sampled tokens, every one in
            ``[0, vocab)`` (padding included: TRL pads with the pad token's id).
        attention_mask: ``(B, T)`` completion mask (bool, integer or float 0/1).
        advantages: ``(B,)`` floating.
        bias: ``(vocab,)`` in ``input``'s dtype, or None.
        ref_per_token_logps: ``(B, T)`` floating, the reference model's log-probabilities;
            required when ``beta != 0``.
        old_per_token_logps: ``(B, T)`` floating, or None (on-policy).
        vllm_is_ratio: the vLLM importance-sampling ratio, ``(B, T)``, ``(B, 1)`` or ``(B,)``
            floating, or None.
        num_items_in_batch: dapo/cispo/vespo's normaliser, or None.
        beta: the KL coefficient.
        epsilon_low, epsilon_high: the clipping range (cispo: ``epsilon_high`` is the cap).
        loss_type: one of ``LOSS_TYPES``.
        max_completion_length: dr_grpo's length (> 0), required for it.
        importance_sampling_level: ``"token"`` or ``"sequence"`` (GSPO).
        sapo_temperature_pos, sapo_temperature_neg: SAPO's gate temperatures (> 0).
        temperature: divides the logits (> 0).
        delta: two-sided clipping's upper bound on ``coef_1`` (> 0), or None.
        use_bias_correction_kl: multiply the KL by ``coef_1``.
        vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg: VESPO's gamma shapes.

    Returns:
        ``(loss, metrics)``: the float32 scalar loss and a float32 ``(5,)`` tensor of ``METRICS``
        (no gradient). The log-probabilities are computed in float32 from float32 products of the
        inputs. Backward gives ``grad_input``, ``grad_weight`` and ``grad_bias`` in their dtypes.
    """
    args = (input, weight, selected_token_ids, attention_mask, advantages, bias, ref_per_token_logps)
    options = (
        old_per_token_logps, vllm_is_ratio, num_items_in_batch, beta, epsilon_low, epsilon_high, loss_type,
        max_completion_length, importance_sampling_level, sapo_temperature_pos, sapo_temperature_neg, temperature,
        delta, use_bias_correction_kl, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
    )  # fmt: skip
    check_args(*args, *options)
    check_token_ids(selected_token_ids, weight.shape[0])
    loss, metrics = math(*args, *options)
    return loss.float(), metrics.float()


def _pair_ok(t, b: int, n: int, dev) -> bool:
    return t is None or (L.is_float(t) and t.shape == (b, n) and t.device == dev)


def check_args(
    input: torch.Tensor,
    weight: torch.Tensor,
    selected_token_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    advantages: torch.Tensor,
    bias: torch.Tensor | None,
    ref_per_token_logps: torch.Tensor | None,
    old_per_token_logps: torch.Tensor | None,
    vllm_is_ratio: torch.Tensor | None,
    num_items_in_batch: float | None,
    beta: float,
    epsilon_low: float,
    epsilon_high: float,
    loss_type: str,
    max_completion_length: int | None,
    importance_sampling_level: str,
    sapo_temperature_pos: float,
    sapo_temperature_neg: float,
    temperature: float,
    delta: float | None,
    use_bias_correction_kl: bool,
    vespo_k_pos: float,
    vespo_lambda_pos: float,
    vespo_k_neg: float,
    vespo_lambda_neg: float,
) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first; the
    token ids' range is `check_token_ids`, one device read)."""
    try:
        dev = input.device
        b, n = input.shape[0], input.shape[1]
        if (
            L.is_float(input)
            and input.ndim == 3
            and weight.dtype == input.dtype
            and weight.ndim == 2
            and weight.shape[0] > 0
            and weight.shape[1] == input.shape[2]
            and weight.device == dev
            and selected_token_ids.dtype in L.INDEX_DTYPES
            and selected_token_ids.shape == (b, n)
            and selected_token_ids.device == dev
            and attention_mask.dtype in MASK_DTYPES
            and attention_mask.shape == (b, n)
            and attention_mask.device == dev
            and L.is_float(advantages)
            and advantages.shape == (b,)
            and advantages.device == dev
            and (
                bias is None or (bias.dtype == input.dtype and bias.shape == (weight.shape[0],) and bias.device == dev)
            )
            and _pair_ok(ref_per_token_logps, b, n, dev)
            and _pair_ok(old_per_token_logps, b, n, dev)
            and (vllm_is_ratio is None or _vllm_ok(vllm_is_ratio, b, n, dev))
            and (ref_per_token_logps is not None or beta == 0)
            and loss_type in LOSS_TYPES
            and importance_sampling_level in IMPORTANCE_SAMPLING_LEVELS
            and (loss_type != "dr_grpo" or (type(max_completion_length) is int and max_completion_length > 0))
            and temperature > 0
            and sapo_temperature_pos > 0
            and sapo_temperature_neg > 0
            and (delta is None or delta > 0)
            and type(use_bias_correction_kl) is bool
            and (num_items_in_batch is None or num_items_in_batch >= 0)
            and all(type(v) in (int, float) for v in (beta, epsilon_low, epsilon_high))
            and all(type(v) in (int, float) for v in (vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg))
        ):
            return
    except (AttributeError, TypeError, IndexError):
        pass
    op = OP_NAME
    check_floating("fused_linear_grpo", "input", input)
    if input.ndim != 3:
        raise ValueError(f"{op}: input must be 3-D (batch, seq, hidden); got shape {tuple(input.shape)}")
    b, n, hidden = input.shape
    L.check_matrix(op, "weight", weight, "(vocab, hidden)")
    check_same_dtype(op, "weight", weight, "input", input)
    if weight.shape[1] != hidden:
        raise ValueError(f"{op}: weight must have shape (vocab, {hidden}) to match input; got {tuple(weight.shape)}")
    L.check_vocab(op, "weight", weight.shape[0])
    check_same_device(op, input=input, weight=weight, bias=bias)
    _check_index(op, "selected_token_ids", selected_token_ids, (b, n), input.device)
    _check_mask(op, attention_mask, (b, n), input.device)
    _check_float(op, "advantages", advantages, (b,), input.device)
    if bias is not None:
        _check_float(op, "bias", bias, (weight.shape[0],), input.device)
        check_same_dtype(op, "bias", bias, "input", input)
    for name, t in (("ref_per_token_logps", ref_per_token_logps), ("old_per_token_logps", old_per_token_logps)):
        if t is not None:
            _check_float(op, name, t, (b, n), input.device)
    check_options(
        op, b, n, input.device, ref_per_token_logps, vllm_is_ratio, num_items_in_batch, beta, epsilon_low,
        epsilon_high, loss_type, importance_sampling_level, sapo_temperature_pos, sapo_temperature_neg, temperature,
        delta, use_bias_correction_kl, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
    )  # fmt: skip
    if loss_type == "dr_grpo" and (type(max_completion_length) is not int or max_completion_length <= 0):
        raise ValueError(
            f"{op}: max_completion_length must be an int > 0 for loss_type 'dr_grpo'; got {max_completion_length!r}"
        )


def check_options(
    op,
    b,
    n,
    device,
    ref,
    vllm_is_ratio,
    num_items_in_batch,
    beta,
    epsilon_low,
    epsilon_high,
    loss_type,
    importance_sampling_level,
    sapo_temperature_pos,
    sapo_temperature_neg,
    temperature,
    delta,
    use_bias_correction_kl,
    vespo_k_pos,
    vespo_lambda_pos,
    vespo_k_neg,
    vespo_lambda_neg,
    names=("ref_per_token_logps", "epsilon_low", "epsilon_high"),
) -> None:
    """The slow-path checks of the loss options (shared with `grpo_loss`, whose ``names`` for the
    reference log-probabilities and the clipping range differ)."""
    ref_name, low_name, high_name = names
    if vllm_is_ratio is not None and not _vllm_ok(vllm_is_ratio, b, n, device):
        _check_float(op, "vllm_is_ratio", vllm_is_ratio, None, device)
        raise ValueError(
            f"{op}: vllm_is_ratio must have shape ({b}, {n}), ({b}, 1) or ({b},); got {tuple(vllm_is_ratio.shape)}"
        )
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"{op}: loss_type must be one of {LOSS_TYPES}; got {loss_type!r}")
    if importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
        raise ValueError(
            f"{op}: importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}; "
            f"got {importance_sampling_level!r}"
        )
    for name, v in (
        ("beta", beta), (low_name, epsilon_low), (high_name, epsilon_high), ("vespo_k_pos", vespo_k_pos),
        ("vespo_lambda_pos", vespo_lambda_pos), ("vespo_k_neg", vespo_k_neg), ("vespo_lambda_neg", vespo_lambda_neg),
    ):  # fmt: skip
        if type(v) not in (int, float):
            raise TypeError(f"{op}: {name} must be a number; got {v!r}")
    if beta != 0 and ref is None:
        raise ValueError(f"{op}: {ref_name} is required when beta != 0; got beta={beta} and None")
    for name, v in (
        ("temperature", temperature),
        ("sapo_temperature_pos", sapo_temperature_pos),
        ("sapo_temperature_neg", sapo_temperature_neg),
    ):
        if type(v) not in (int, float) or not v > 0:
            raise ValueError(f"{op}: {name} must be a number > 0; got {v!r}")
    if delta is not None and (type(delta) not in (int, float) or not delta > 0):
        raise ValueError(f"{op}: delta must be None or a number > 0; got {delta!r}")
    if type(use_bias_correction_kl) is not bool:
        raise TypeError(f"{op}: use_bias_correction_kl must be True or False; got {use_bias_correction_kl!r}")
    if num_items_in_batch is not None and (type(num_items_in_batch) not in (int, float) or not num_items_in_batch >= 0):
        raise ValueError(f"{op}: num_items_in_batch must be None or a number >= 0; got {num_items_in_batch!r}")


def _vllm_ok(t, b: int, n: int, dev) -> bool:
    return L.is_float(t) and t.device == dev and t.shape in ((b, n), (b, 1), (b,))


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _check_index(op, name, t, shape, device, what="input") -> None:
    if not isinstance(t, torch.Tensor) or t.dtype not in L.INDEX_DTYPES:
        got = _dtype(t) if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(f"{op}: {name} must be an integer tensor; got {got}")
    _check_place(op, name, t, shape, device, what)


def _check_mask(op, t, shape, device, what="input", name="attention_mask") -> None:
    if not isinstance(t, torch.Tensor) or t.dtype not in MASK_DTYPES:
        got = _dtype(t) if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(f"{op}: {name} must be a bool, integer or floating tensor; got {got}")
    _check_place(op, name, t, shape, device, what)


def _check_float(op, name, t, shape, device, what="input") -> None:
    if not L.is_float(t):
        got = _dtype(t) if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(f"{op}: {name} must have dtype float32, bfloat16 or float16; got {got}")
    if shape is not None:
        _check_place(op, name, t, shape, device, what)


def _check_place(op, name, t, shape, device, what="input") -> None:
    if tuple(t.shape) != tuple(shape):
        want = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
        raise ValueError(f"{op}: {name} must have shape {want} to match {what}; got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{op}: all tensors must be on one device; {what} is on {device} but {name} is on {t.device}")


def check_token_ids(ids: torch.Tensor, vocab: int, op: str = OP_NAME, name: str = "selected_token_ids") -> None:
    """Every id in ``[0, vocab)``, else a ValueError naming the first one (one device read)."""
    bad_ids = (ids < 0) | (ids >= vocab)
    n_bad = int(bad_ids.sum())
    if n_bad:
        first = int(ids[bad_ids][0])
        raise ValueError(f"{op}: {name} must be in [0, {vocab}); {n_bad} are not (first: {first})")


# -- the loss on per-token log-probabilities (shared by the reference and every backend) ------------


@dataclass(frozen=True)
class GRPOOptions:
    """The scalar options of the loss, as `chunk_objective` takes them."""

    beta: float
    epsilon_low: float
    epsilon_high: float
    loss_type: str
    importance_sampling_level: str
    sapo_temperature_pos: float
    sapo_temperature_neg: float
    delta: float | None
    use_bias_correction_kl: bool
    vespo_k_pos: float
    vespo_lambda_pos: float
    vespo_k_neg: float
    vespo_lambda_neg: float


def options(
    beta, epsilon_low, epsilon_high, loss_type, importance_sampling_level, sapo_temperature_pos,
    sapo_temperature_neg, delta, use_bias_correction_kl, vespo_k_pos, vespo_lambda_pos, vespo_k_neg,
    vespo_lambda_neg,
) -> GRPOOptions:  # fmt: skip
    return GRPOOptions(
        float(beta), float(epsilon_low), float(epsilon_high), loss_type, importance_sampling_level,
        float(sapo_temperature_pos), float(sapo_temperature_neg), None if delta is None else float(delta),
        use_bias_correction_kl, float(vespo_k_pos), float(vespo_lambda_pos), float(vespo_k_neg),
        float(vespo_lambda_neg),
    )  # fmt: skip


def token_weights(
    attention_mask: torch.Tensor,
    loss_type: str,
    max_completion_length: int | None,
    num_items_in_batch: float | None,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """From the full batch's mask: ``(loss weight per token (B, T), metric weight per token
    (B, T), metric weight per sequence)``. The loss is ``sum(weight * per_token_loss)``; a
    token-level metric ``sum(token_weight * x)`` (the masked mean), a sequence-level one
    ``sum(sequence_weight * x)`` (the mean over sequences)."""
    m = attention_mask.to(dtype)
    n_seq = max(m.shape[0], 1)
    total = m.sum().clamp(min=1)
    if loss_type in ("grpo", "sapo"):
        w = m / (m.sum(-1, keepdim=True).clamp(min=1) * n_seq)
    elif loss_type == "bnpo":
        w = m / total
    elif loss_type == "dr_grpo":
        w = m / (n_seq * max_completion_length)
    elif loss_type in ("dapo", "cispo", "vespo"):
        w = m / (total if num_items_in_batch is None else max(float(num_items_in_batch), 1.0))
    else:  # luspo
        w = m / n_seq
    return w, m / total, 1.0 / n_seq


@dataclass(frozen=True)
class Terms:
    """Per-token quantities of the loss for whole sequences: ``per_token`` (b, T) (the
    policy term times the vLLM ratio, plus ``beta * kl``; differentiable in logp), ``kl`` (b, T)
    or None when ``beta == 0``, ``coef_1`` ((b, T) or (b, 1) at sequence level; after the delta
    clamp, as TRL's metrics read it), ``phi`` (vespo's (b, 1) weights, else None)."""

    per_token: torch.Tensor
    kl: torch.Tensor | None
    coef_1: torch.Tensor
    phi: torch.Tensor | None


def grpo_terms(
    logp: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    ref: torch.Tensor | None,
    old: torch.Tensor | None,
    vllm_is_ratio: torch.Tensor | None,
    opts: GRPOOptions,
) -> Terms:
    """TRL's per-token GRPO terms (``GRPOTrainer._compute_loss``) for whole sequences."""
    m = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype)[:, None]
    old = logp.detach() if old is None else old.to(logp.dtype)
    ratio = None
    if vllm_is_ratio is not None:
        ratio = vllm_is_ratio.to(logp.dtype)
        ratio = ratio[:, None] if ratio.ndim == 1 else ratio
    log_ratio = logp - old
    if opts.importance_sampling_level == "token":
        log_w = log_ratio
    else:
        log_w = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0))[:, None]
    coef_1 = torch.exp(log_w)
    phi = None
    if opts.loss_type == "cispo":
        per_token = -torch.clamp(coef_1, max=opts.epsilon_high).detach() * adv * logp
    elif opts.loss_type in CLIPPED:
        coef_2 = torch.clamp(coef_1, 1 - opts.epsilon_low, 1 + opts.epsilon_high)
        if opts.delta is not None:
            coef_1 = torch.clamp(coef_1, max=opts.delta)
        per_token = -torch.min(coef_1 * adv, coef_2 * adv)
    elif opts.loss_type == "sapo":
        tau = torch.where(adv > 0, opts.sapo_temperature_pos, opts.sapo_temperature_neg)
        per_token = -torch.sigmoid(tau * (coef_1 - 1)) * 4 / tau * adv
    else:  # vespo
        phi = _gamma_weights(adv, log_ratio.detach(), m, ratio, opts)
        per_token = -phi * adv * logp
    if ratio is not None and opts.loss_type != "vespo":
        per_token = per_token * ratio
    kl = None
    if opts.beta != 0.0:
        d = ref.to(logp.dtype) - logp
        kl = torch.exp(d) - d - 1
        if opts.use_bias_correction_kl:
            kl = kl * torch.exp(log_w)
        per_token = per_token + opts.beta * kl
    return Terms(per_token.expand_as(logp), kl, coef_1, phi)


def clip_flags(coef_1: torch.Tensor, advantages: torch.Tensor, opts: GRPOOptions):
    """TRL's clipping indicators ``(low, high, region)`` (bool, ``coef_1``'s shape), or None for
    the loss types that log none (sapo, vespo); cispo's is ``high = region``, ``low`` all False."""
    adv = advantages.to(coef_1.dtype)[:, None]
    if opts.loss_type in CLIPPED:
        low = (coef_1 < 1 - opts.epsilon_low) & (adv < 0)
        high = (coef_1 > 1 + opts.epsilon_high) & (adv > 0)
        return low, high, low | high
    if opts.loss_type == "cispo":
        high = (coef_1 > opts.epsilon_high) & (adv > 0)
        return torch.zeros_like(high), high, high
    return None


def chunk_objective(
    logp: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    ref: torch.Tensor | None,
    old: torch.Tensor | None,
    vllm_is_ratio: torch.Tensor | None,
    weights: torch.Tensor,
    metric_token_weights: torch.Tensor,
    metric_sequence_weight: float,
    opts: GRPOOptions,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole sequences' share of the loss (differentiable in ``logp``, (b, T)) and of the
    metrics (a detached ``(5,)`` tensor), TRL's formulas; every other tensor is those sequences'
    rows of the batch's (``weights``, ``metric_token_weights`` from `token_weights`)."""
    terms = grpo_terms(logp, mask, advantages, ref, old, vllm_is_ratio, opts)
    loss = (terms.per_token * weights.to(logp.dtype)).sum()
    with torch.no_grad():
        metrics = metric_sums(terms, advantages, metric_token_weights, metric_sequence_weight, opts)
    return loss, metrics


def metric_sums(terms: Terms, advantages, metric_token_weights, metric_sequence_weight, opts) -> torch.Tensor:
    """The ``METRICS`` shares of these sequences: TRL's ``global_masked_mean`` (a (b, 1) value is
    one per sequence: averaged over sequences; a (b, T) one over the masked tokens)."""
    tw = metric_token_weights.to(terms.per_token.dtype)
    zero = torch.zeros((), dtype=tw.dtype, device=tw.device)

    def mean(x: torch.Tensor) -> torch.Tensor:
        x = x.to(tw.dtype)
        return x.sum() * metric_sequence_weight if x.shape[-1] == 1 else (x * tw).sum()

    kl = zero if terms.kl is None else mean(terms.kl)
    flags = clip_flags(terms.coef_1, advantages, opts)
    low, high, region = (zero, zero, zero) if flags is None else (mean(f) for f in flags)
    phi = zero if terms.phi is None else terms.phi.sum() * metric_sequence_weight
    return torch.stack([kl, low, high, region, phi])


def _gamma_weights(adv, log_ratio, m, ratio, opts: GRPOOptions) -> torch.Tensor:
    """VESPO's phi per sequence, (b, 1), detached (TRL's ``get_gamma_weights``)."""
    seq = (torch.clamp(log_ratio, -20.0, 20.0) * m).sum(-1, keepdim=True)
    if ratio is not None:
        seq = seq + torch.clamp(torch.log(ratio), _VESPO_LOG_MIN, _VESPO_LOG_MAX).sum(-1, keepdim=True)
    log_w = torch.clamp(seq, _VESPO_LOG_MIN, _VESPO_LOG_MAX)
    nonneg = adv >= 0
    k = torch.where(nonneg, opts.vespo_k_pos, opts.vespo_k_neg)
    lam = torch.where(nonneg, opts.vespo_lambda_pos, opts.vespo_lambda_neg).clamp(min=1e-4)
    phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w))
    return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).detach()


def per_token_logps(input, weight, selected_token_ids, bias, temperature) -> torch.Tensor:
    """The sampled tokens' log-probabilities (B, T) by the formula (float64 in, float64 out; else
    float32), differentiable in ``input``, ``weight`` and ``bias``."""
    compute = torch.float64 if input.dtype == torch.float64 else torch.float32
    logits = input.to(compute) @ weight.to(compute).t()
    if bias is not None:
        logits = logits + bias.to(compute)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, selected_token_ids.long().unsqueeze(-1)).squeeze(-1)


def math(
    input, weight, selected_token_ids, attention_mask, advantages, bias, ref_per_token_logps, old_per_token_logps,
    vllm_is_ratio, num_items_in_batch, beta, epsilon_low, epsilon_high, loss_type, max_completion_length,
    importance_sampling_level, sapo_temperature_pos, sapo_temperature_neg, temperature, delta,
    use_bias_correction_kl, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The formula on the whole batch, differentiable in input, weight and bias (float64 for the
    oracle, else float32): ``(loss, metrics)``."""
    logp = per_token_logps(input, weight, selected_token_ids, bias, temperature)
    opts = options(
        beta, epsilon_low, epsilon_high, loss_type, importance_sampling_level, sapo_temperature_pos,
        sapo_temperature_neg, delta, use_bias_correction_kl, vespo_k_pos, vespo_lambda_pos, vespo_k_neg,
        vespo_lambda_neg,
    )  # fmt: skip
    w, tw, sw = token_weights(attention_mask, loss_type, max_completion_length, num_items_in_batch, logp.dtype)
    return chunk_objective(
        logp, attention_mask, advantages, ref_per_token_logps, old_per_token_logps, vllm_is_ratio, w, tw, sw, opts
    )


# -- declaration ---------------------------------------------------------------------------------


def args(
    device,
    shape=(3, 7, 16, 33),
    dtype=torch.float32,
    seed=0,
    bias=False,
    ref=True,
    old=True,
    vllm=None,
    spread=0.25,
    **options,
):
    """(batch, seq, hidden, vocab): the policy's hidden states and lm_head, sampled ids, a
    completion mask with ragged lengths (one sequence fully masked when there are 3 or more),
    advantages of both signs, and old/ref log-probabilities ``spread`` away from the policy's own
    (so some ratios fall outside the clipping range). ``vllm``: None, ``"token"``, ``"sequence"``
    or ``"vector"`` (its three shapes)."""
    b, n, hidden, vocab = shape
    g = S.gen(seed)
    x = S.normal((b, n, hidden), g)
    w = S.normal((vocab, hidden), g, 2.0 / max(hidden, 1) ** 0.5)
    bvec = S.normal((vocab,), g, 0.5) if bias else None
    ids = torch.randint(0, vocab, (b, n), generator=g)
    lengths = torch.randint(1, n + 1, (b,), generator=g)
    if b >= 3:
        lengths[2] = 0
    if b >= 1:
        lengths[0] = n
    mask = (torch.arange(n)[None, :] < lengths[:, None]).long()
    adv = S.normal((b,), g)
    # The policy's own log-probabilities, of the inputs as the op sees them (rounded to dtype).
    b64 = None if bvec is None else bvec.to(dtype).double()
    logp = per_token_logps(x.to(dtype).double(), w.to(dtype).double(), ids, b64, options.get("temperature", 1.0))
    old_lp = (logp + S.normal((b, n), g, spread).double()).float() if old else None
    ref_lp = (logp + S.normal((b, n), g, spread).double()).float() if ref else None
    ratio = None
    if vllm == "token":
        ratio = torch.exp(S.normal((b, n), g, 0.2))
    elif vllm == "sequence":
        ratio = torch.exp(S.normal((b, 1), g, 0.2))
    elif vllm == "vector":
        ratio = torch.exp(S.normal((b,), g, 0.2))
    if not ref:
        options.setdefault("beta", 0.0)
    return dict(
        input=S.to(device, dtype, x),
        weight=S.to(device, dtype, w),
        selected_token_ids=ids.to(device),
        attention_mask=mask.to(device),
        advantages=adv.to(device),
        bias=S.to(device, dtype, bvec),
        ref_per_token_logps=S.to(device, torch.float32, ref_lp),
        old_per_token_logps=S.to(device, torch.float32, old_lp),
        vllm_is_ratio=S.to(device, torch.float32, ratio),
        **options,
    )


def _loss_options():
    """Each loss type with the options it reads."""
    yield dict(loss_type="grpo")
    yield dict(loss_type="bnpo", delta=1.3)
    yield dict(loss_type="dr_grpo", max_completion_length=12)
    yield dict(loss_type="dapo", epsilon_high=0.28, use_bias_correction_kl=True)
    yield dict(loss_type="dapo", num_items_in_batch=40.0, vllm="token")
    yield dict(loss_type="cispo", epsilon_high=1.1, vllm="sequence")
    yield dict(loss_type="sapo", sapo_temperature_pos=1.5, sapo_temperature_neg=0.8)
    yield dict(loss_type="luspo", importance_sampling_level="sequence", vllm="vector")
    yield dict(loss_type="vespo", vllm="token", spread=0.05)
    yield dict(loss_type="vespo", beta=0.0, ref=False, vespo_k_neg=2.5, spread=0.05)
    yield dict(loss_type="grpo", importance_sampling_level="sequence", use_bias_correction_kl=True)
    yield dict(loss_type="bnpo", old=False, beta=0.1)


def samples():
    # (batch, seq, hidden, vocab): one token; odd sizes; a vocabulary wider than any vendor's
    # single block; many sequences (several programs and, with a vendor's small chunk budget,
    # several chunks).
    shapes = ((1, 1, 8, 5), (3, 7, 16, 33), (2, 5, 16, 9000), (9, 13, 8, 40))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    for opts in _loss_options():
        yield from S.grid(args, dict(dtype=S.OPTION_DTYPES), grad_scalar=1.5, shape=(4, 11, 16, 130), seed=3, **opts)
    yield sample(args, shape=(4, 9, 16, 70), bias=True, temperature=0.7, seed=5)
    yield sample(args, shape=(4, 9, 16, 70), frozen=("weight",), seed=6)
    yield sample(args, shape=(0, 5, 8, 20))


def _scales(a, upstream):
    """The atol scales: the gradients are sums of ``dlogp * (onehot - softmax) / T`` terms
    times the other operand; bound them by the terms' magnitudes."""
    x, w, bias = a["input"], a["weight"], a["bias"]
    logits = x @ w.t() + (0 if bias is None else bias)
    logp_all = torch.log_softmax(logits / a["temperature"], -1)
    with torch.enable_grad():
        lp = logp_all.gather(-1, a["selected_token_ids"].long().unsqueeze(-1)).squeeze(-1).requires_grad_()
        loss, _ = _objective_from_logps(lp, a)
        (d,) = torch.autograd.grad(loss, lp)
    up = upstream.get("loss")
    d = d.abs() * (1.0 if up is None else float(up.abs()))
    onehot = torch.zeros_like(logp_all).scatter_(-1, a["selected_token_ids"].long().unsqueeze(-1), 1.0)
    g = (d[..., None] * (onehot + logp_all.exp()) / abs(a["temperature"])).reshape(-1, w.shape[0])
    xs = x.reshape(-1, x.shape[-1])
    terms = float((d * (1 + lp.detach().abs())).sum()) if d.numel() else 1.0
    return {
        "loss": max(terms, 1e-3),
        "metrics": 1.0,
        "grad_input": L.grad_scale_through(g, w),
        "grad_weight": L.grad_scale_through(g.t(), xs),
        "grad_bias": float(g.sum(0).max()) if g.numel() else 1.0,
    }


def _objective_from_logps(lp, a):
    opts = options(
        a["beta"], a["epsilon_low"], a["epsilon_high"], a["loss_type"], a["importance_sampling_level"],
        a["sapo_temperature_pos"], a["sapo_temperature_neg"], a["delta"], a["use_bias_correction_kl"],
        a["vespo_k_pos"], a["vespo_lambda_pos"], a["vespo_k_neg"], a["vespo_lambda_neg"],
    )  # fmt: skip
    w, tw, sw = token_weights(
        a["attention_mask"], a["loss_type"], a["max_completion_length"], a["num_items_in_batch"], lp.dtype
    )
    return chunk_objective(
        lp, a["attention_mask"], a["advantages"], a["ref_per_token_logps"], a["old_per_token_logps"],
        a["vllm_is_ratio"], w, tw, sw, opts,
    )  # fmt: skip


def _torch_grpo(input, weight, selected_token_ids, attention_mask, advantages, bias=None, **kw):
    """The models' way: the full logits in the input dtype, float32 log-softmax, then the loss."""
    logits = torch.nn.functional.linear(input, weight, bias).float() / kw.get("temperature", 1.0)
    logp = torch.log_softmax(logits, -1).gather(-1, selected_token_ids.unsqueeze(-1)).squeeze(-1)
    a = {**_DEFAULTS, **kw, "attention_mask": attention_mask, "advantages": advantages, "selected_token_ids": None}
    return _objective_from_logps(logp, a)[0]


def _bench_args(s, dt, dev, gen):
    # GRPO's batch: completions of s.tokens // 1024 sequences (at least 1) of up to 1024 tokens.
    n = min(s.tokens, 1024)
    b = max(1, s.tokens // n)
    x = B.normal((b, n, s.hidden), dt, dev, gen, grad=True)
    return dict(
        input=x,
        weight=B.lm_head(s, dt, dev, gen),
        selected_token_ids=torch.randint(0, s.vocab, (b, n), device=dev, generator=gen),
        attention_mask=torch.ones((b, n), dtype=torch.int64, device=dev),
        advantages=torch.randn((b,), device=dev, generator=gen),
        ref_per_token_logps=-torch.rand((b, n), device=dev, generator=gen) * 5,
        old_per_token_logps=-torch.rand((b, n), device=dev, generator=gen) * 5,
    )


_DEFAULTS = {
    name: p.default
    for name, p in inspect.signature(fused_linear_grpo).parameters.items()
    if p.default is not inspect.Parameter.empty
}


def _liger_kernel_grpo() -> B.Peer:
    """liger-kernel 0.8.5's chunked GRPO loss (its defaults: dapo, beta 0.04, one sequence a
    chunk, the loss math under torch.compile)."""

    def load():
        from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

        module = LigerFusedLinearGRPOLoss()

        def call(input, weight, selected_token_ids, attention_mask, advantages, **kw):
            return module(
                input, weight, selected_token_ids, attention_mask, advantages,
                ref_per_token_logps=kw.get("ref_per_token_logps"), old_per_token_logps=kw.get("old_per_token_logps"),
            )[0]  # fmt: skip

        return call

    return B.Peer(load)


OP = Op(
    fused_linear_grpo,
    since=(1, 6),
    math=math,
    grads=("input", "weight", "bias"),
    grads_in_forward=_always,
    outputs=("loss", "metrics"),
    no_grad_outputs=("metrics",),
    samples=samples,
    smoke=(sample(args, shape=(2, 3, 8, 5)), sample(args, shape=(3, 20, 16, 700), loss_type="grpo")),
    error_sample=sample(args),
    errors=(
        bad("loss_type", ValueError, r"loss_type must be one of \('grpo', .*\); got 'ppo'", loss_type="ppo"),
        bad(
            "importance_sampling_level",
            ValueError,
            r"importance_sampling_level must be one of \('token', 'sequence'\); got 'seq'",
            importance_sampling_level="seq",
        ),
        bad(
            "mask_shape",
            ValueError,
            r"attention_mask must have shape \(3, 7\) to match input; got \(3, 6\)",
            attention_mask=lambda m: m[:, :6],
        ),
        bad(
            "ids_shape",
            ValueError,
            r"selected_token_ids must have shape \(3, 7\) to match input; got \(7,\)",
            selected_token_ids=lambda t: t[0],
        ),
        bad(
            "ids_range",
            ValueError,
            r"selected_token_ids must be in \[0, 33\); 1 are not \(first: 33\)",
            selected_token_ids=lambda t: torch.where(
                torch.arange(t.numel(), device=t.device).view(t.shape) == 4, 33, t
            ),
        ),  # fmt: skip
        bad(
            "advantages_shape",
            ValueError,
            r"advantages must have shape \(3,\) to match input; got \(3, 1\)",
            advantages=lambda a: a[:, None],
        ),
        bad(
            "old_shape",
            ValueError,
            r"old_per_token_logps must have shape \(3, 7\) to match input; got \(3, 8\)",
            old_per_token_logps=lambda t: torch.cat([t, t[:, :1]], 1),
        ),
        bad(
            "vllm_shape",
            ValueError,
            r"vllm_is_ratio must have shape \(3, 7\), \(3, 1\) or \(3,\); got \(3, 2\)",
            vllm_is_ratio=lambda _: torch.ones(3, 2),
        ),
        bad("ref_missing", ValueError, r"ref_per_token_logps is required when beta != 0", ref_per_token_logps=None),
        bad(
            "dr_grpo_length",
            ValueError,
            r"max_completion_length must be an int > 0 for loss_type 'dr_grpo'; got None",
            loss_type="dr_grpo",
        ),
        bad("temperature", ValueError, r"temperature must be a number > 0; got 0", temperature=0),
        bad("delta", ValueError, r"delta must be None or a number > 0; got -1", delta=-1),
        bad(
            "weight_dtype",
            TypeError,
            r"weight must have input's dtype float32; got bfloat16",
            weight=lambda w: w.bfloat16(),
        ),
        bad(
            "input_2d",
            ValueError,
            r"input must be 3-D \(batch, seq, hidden\); got shape \(3, 16\)",
            input=lambda x: x[:, 0],
        ),  # fmt: skip
    ),
    checks=Checks(out_dtypes=lambda a: (torch.float32, torch.float32), atol_scales=_scales),
    bench=B.BenchSpec(
        group="losses",
        axes=("tokens", "hidden", "vocab"),
        layouts={"rows": _bench_args},
        torch_fn=_torch_grpo,
        # forward: the logits GEMM; backward: the input and weight gradient GEMMs.
        traffic=lambda s, e: (2 * (s.tokens + s.vocab) * s.hidden * e, 3 * (s.tokens + s.vocab) * s.hidden * e),
        describe=B.linear_text,
        flops=lambda s: (2 * s.tokens * s.hidden * s.vocab, 4 * s.tokens * s.hidden * s.vocab),
        peers={B.LIGER_KERNEL: _liger_kernel_grpo()},
    ),
)


# -- the chunked orchestration every backend runs, as an autograd Function ------------------------

# The kernels' ignore_index: never a token id (every id is checked to be in [0, vocab)).
NO_IGNORED_ID = -1


class GRPOKernels(L.LinearChunkKernels):
    """A backend's kernels under `autograd_functions`: its matmul steps (`L.LinearChunkKernels`)
    and cross-entropy's row kernels, with no ignored rows (``NO_IGNORED_ID``)."""

    def token_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """The flat sampled token ids as the kernels take them (once per call)."""
        return ids

    def cross_entropy_rows(self, logits: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per row of the float32 ``(rows, vocab)`` chunk: ``(-log softmax(logits)[id], lse)``."""
        raise NotImplementedError

    def cross_entropy_grad(self, logits: torch.Tensor, ids: torch.Tensor, lse: torch.Tensor, upstream: torch.Tensor):
        """Overwrite ``logits`` with ``upstream_r * (softmax(logits_r) - onehot(id_r))`` (the
        gradient of ``sum_r upstream_r * ce_r``; float32 ``upstream`` per row)."""
        raise NotImplementedError


def sequences_per_chunk(n_seq: int, seq_len: int, vocab: int, budget: int) -> int:
    """Whole sequences per chunk: their float32 logits within ``budget`` elements, at least one."""
    return max(1, min(n_seq, budget // max(seq_len * vocab, 1)))


def _rows(t: torch.Tensor | None, s: int, e: int) -> torch.Tensor | None:
    return None if t is None else t[s:e]


def autograd_functions(
    kernels: GRPOKernels, chunk_elements: Callable[[], int], module: str
) -> dict[str, type[torch.autograd.Function]]:
    """fused_linear_grpo's autograd Function over one backend's kernels, by op name
    (``LigerFusedLinearGRPOFunction``; the backend marks it with ``implements``).

    Per chunk of whole sequences (float32 logits within ``chunk_elements()``, read on every call
    so that tuning and tests may change it): the logits (plus the bias, over the temperature),
    cross-entropy's forward for the sampled tokens' ``-logp`` and the rows' lse, then
    `chunk_objective` on those ``(sequences, T)`` log-probabilities gives the chunk's share of the
    loss and metrics and, by autograd on those few values, ``dloss/dlogp``; cross-entropy's
    gradient kernel with the per-row upstream ``-dlogp / T`` writes ``dlogp * (onehot - softmax)
    / T`` over the chunk's logits, then ``grad_x_c = G @ W``, ``grad_W += G^T @ x_c`` and
    ``grad_b += sum(G)``. Gradients are computed in the forward; backward scales them.
    ``module``: the backend module that registers the Function (see `_losses.autograd_function`)."""

    def forward(
        ctx, input, weight, selected_token_ids, attention_mask, advantages, bias, ref_per_token_logps,
        old_per_token_logps, vllm_is_ratio, num_items_in_batch, beta, epsilon_low, epsilon_high, loss_type,
        max_completion_length, importance_sampling_level, sapo_temperature_pos, sapo_temperature_neg, temperature,
        delta, use_bias_correction_kl, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
    ):  # fmt: skip
        check_args(
            input, weight, selected_token_ids, attention_mask, advantages, bias, ref_per_token_logps,
            old_per_token_logps, vllm_is_ratio, num_items_in_batch, beta, epsilon_low, epsilon_high, loss_type,
            max_completion_length, importance_sampling_level, sapo_temperature_pos, sapo_temperature_neg,
            temperature, delta, use_bias_correction_kl, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
        )  # fmt: skip
        vocab = weight.shape[0]
        check_token_ids(selected_token_ids, vocab)
        opts = options(
            beta, epsilon_low, epsilon_high, loss_type, importance_sampling_level, sapo_temperature_pos,
            sapo_temperature_neg, delta, use_bias_correction_kl, vespo_k_pos, vespo_lambda_pos, vespo_k_neg,
            vespo_lambda_neg,
        )  # fmt: skip
        n_seq, seq_len, hidden = input.shape
        x = input.reshape(n_seq * seq_len, hidden).contiguous()
        w = weight.contiguous()
        ids = kernels.token_ids(selected_token_ids.reshape(-1)).contiguous()
        weights, metric_weights, seq_weight = token_weights(
            attention_mask, loss_type, max_completion_length, num_items_in_batch, torch.float32
        )
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = bias is not None and ctx.needs_input_grad[5]
        want = need_x or need_w or need_b
        gx, gw, gb = L.fused_grad_buffers(kernels, x, w, need_x, need_w, need_b)
        loss = torch.zeros((), dtype=torch.float32, device=x.device)
        metrics = torch.zeros(5, dtype=torch.float32, device=x.device)
        w_logits = kernels.logits_weight(w)
        step = sequences_per_chunk(n_seq, seq_len, vocab, chunk_elements())
        first = True
        for s in range(0, n_seq, step):
            e = min(s + step, n_seq)
            r0, r1 = s * seq_len, e * seq_len
            logits = kernels.logits(x[r0:r1], w_logits)
            if bias is not None:
                logits += bias.float()
            if temperature != 1.0:
                logits.div_(temperature)
            target = ids[r0:r1]
            row_loss, lse = kernels.cross_entropy_rows(logits, target)
            with torch.enable_grad():
                logp = row_loss.neg().view(e - s, seq_len).requires_grad_(want)
                part, part_metrics = chunk_objective(
                    logp, attention_mask[s:e], advantages[s:e], _rows(ref_per_token_logps, s, e),
                    _rows(old_per_token_logps, s, e), _rows(vllm_is_ratio, s, e), weights[s:e],
                    metric_weights[s:e], seq_weight, opts,
                )  # fmt: skip
                d_logp = torch.autograd.grad(part, logp)[0] if want else None
            loss += part.detach()
            metrics += part_metrics
            if want:
                # CE's gradient is upstream * (softmax - onehot); d(loss)/d(logits) is
                # d_logp * (onehot - softmax) / T.
                upstream = d_logp.reshape(-1).div(-temperature).contiguous()
                kernels.cross_entropy_grad(logits, target, lse, upstream)
                L.add_chunk_grads(kernels, logits, slice(r0, r1), x, w, gx, gw, gb, first)
            first = False
        if need_w and first:
            gw.zero_()  # no sequences
        ctx.fused_grads = (gx, gw, gb)  # not saved tensors: see `_losses.take_fused_grads`
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.input_shape = input.shape
        ctx.mark_non_differentiable(metrics)
        ctx.set_materialize_grads(False)
        return loss, metrics

    def backward(ctx, grad_loss, _grad_metrics=None):
        grads = L.take_fused_grads(ctx)
        if grad_loss is None:
            return (None,) * 25
        gx, gw, gb = L.scale_fused_grads(kernels, grads, grad_loss, ctx.bias_dtype)
        gx = None if gx is None else gx.view(ctx.input_shape)
        return (gx, gw, None, None, None, gb) + (None,) * 19

    return {OP_NAME: L.autograd_function("LigerFusedLinearGRPOFunction", module, forward, backward)}
