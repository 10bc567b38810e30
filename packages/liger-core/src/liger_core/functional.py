"""The functional API: each op dispatched to the backend serving its input's device."""

from __future__ import annotations

import torch

from liger_core import distributed
from liger_core.memory_budget import takes_memory_budget
from liger_core.registry import resolve

# A DTensor (tensor parallelism) takes `liger_core.distributed.call`; testing the first argument's
# type is the whole cost to plain tensors.
Tensor = torch.Tensor


def _device(op: str, name: str, value: object) -> torch.device:
    """``value.device``, or a TypeError naming the argument when ``value`` is not a tensor (a list
    would otherwise fail as ``AttributeError: 'list' object has no attribute 'device'``)."""
    try:
        return value.device
    except AttributeError:
        raise TypeError(f"{op}: {name} must be a torch.Tensor; got {type(value).__name__}") from None


def liger_rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> torch.Tensor:
    """RMSNorm; see `liger_core.ops.rms_norm.rms_norm` for the contract."""
    if type(x) is not Tensor:
        return distributed.call("rms_norm", (x, weight, eps, offset, casting_mode, in_place))
    return resolve("rms_norm", _device("rms_norm", "x", x))(x, weight, eps, offset, casting_mode, in_place)


def liger_fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add + RMSNorm, returning ``(y, x + residual)``; see
    `liger_core.ops.fused_add_rms_norm.fused_add_rms_norm` for the contract."""
    if type(x) is not Tensor:
        return distributed.call("fused_add_rms_norm", (x, residual, weight, eps, offset, casting_mode, in_place))
    return resolve("fused_add_rms_norm", _device("fused_add_rms_norm", "x", x))(
        x, residual, weight, eps, offset, casting_mode, in_place
    )


def liger_layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """LayerNorm over the last dimension; see `liger_core.ops.layer_norm.layer_norm` for the contract."""
    if type(x) is not Tensor:
        return distributed.call("layer_norm", (x, weight, bias, eps))
    return resolve("layer_norm", _device("layer_norm", "x", x))(x, weight, bias, eps)


def liger_group_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    num_channels: int,
    num_groups: int,
    eps: float = 1e-5,
) -> torch.Tensor:
    """GroupNorm over (batch, channels, ...); see `liger_core.ops.group_norm.group_norm` for the contract."""
    return resolve("group_norm", _device("group_norm", "x", x))(x, weight, bias, num_channels, num_groups, eps)


def liger_poly_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """PolyNorm; see `liger_core.ops.poly_norm.poly_norm` for the contract."""
    return resolve("poly_norm", _device("poly_norm", "x", x))(x, weight, bias, eps)


def liger_dyt(x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None) -> torch.Tensor:
    """Dynamic Tanh ``gamma * tanh(alpha * x) + beta``; see `liger_core.ops.dyt.dyt` for the contract."""
    return resolve("dyt", _device("dyt", "x", x))(x, alpha, gamma, beta)


def liger_swiglu(a: torch.Tensor, b: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """``silu(a) * b``; see `liger_core.ops.swiglu.swiglu` for the contract (``in_place`` included)."""
    if type(a) is not Tensor:
        return distributed.call("swiglu", (a, b, in_place))
    return resolve("swiglu", _device("swiglu", "a", a))(a, b, in_place)


def liger_geglu(a: torch.Tensor, b: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """``gelu_tanh(a) * b``; see `liger_core.ops.geglu.geglu` for the contract."""
    if type(a) is not Tensor:
        return distributed.call("geglu", (a, b, in_place))
    return resolve("geglu", _device("geglu", "a", a))(a, b, in_place)


def liger_rope(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate-half RoPE on q and k; see `liger_core.ops.rope.rope` for the contract."""
    if type(q) is not Tensor:
        return distributed.call("rope", (q, k, cos, sin, position_ids, unsqueeze_dim))
    return resolve("rope", _device("rope", "q", q))(q, k, cos, sin, position_ids, unsqueeze_dim)


# Drop-in for transformers' ``apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1)``
# (LLaMA, Mistral, Qwen2...), under its liger-kernel name.
liger_rotary_pos_emb = liger_rope


def liger_qwen2vl_mrope(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mrope_section: list[int],
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen2-VL's multimodal RoPE; see `liger_core.ops.qwen2vl_mrope.qwen2vl_mrope` for the contract."""
    return resolve("qwen2vl_mrope", _device("qwen2vl_mrope", "q", q))(q, k, cos, sin, mrope_section, unsqueeze_dim)


# Drop-in for transformers' Qwen2-VL ``apply_multimodal_rotary_pos_emb``, under its liger-kernel name.
liger_multimodal_rotary_pos_emb = liger_qwen2vl_mrope


def liger_relu_squared(x: torch.Tensor) -> torch.Tensor:
    """``relu(x) ** 2`` (Nemotron's activation); see `liger_core.ops.relu_squared.relu_squared` for the contract."""
    return resolve("relu_squared", _device("relu_squared", "x", x))(x)


def liger_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension; see `liger_core.ops.softmax.softmax` for the contract."""
    return resolve("softmax", _device("softmax", "x", x))(x)


def liger_sparsemax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Sparsemax along ``dim``; see `liger_core.ops.sparsemax.sparsemax` for the contract."""
    return resolve("sparsemax", _device("sparsemax", "x", x))(x, dim)


def liger_cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    lse_square_scale: float = 0.0,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    softcap: float | None = None,
    return_z_loss: bool = False,
    in_place: bool = False,
):
    """Cross-entropy with z-loss and softcapping; see `liger_core.ops.cross_entropy.cross_entropy`
    (``in_place=True``: the gradient may overwrite ``logits``; do not read them afterwards)."""
    return resolve("cross_entropy", _device("cross_entropy", "logits", logits))(
        logits,
        target,
        weight,
        ignore_index,
        lse_square_scale,
        label_smoothing,
        reduction,
        softcap,
        return_z_loss,
        in_place,
    )


def liger_vocab_parallel_cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    group: torch.distributed.ProcessGroup | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    in_place: bool = False,
) -> torch.Tensor:
    """Cross-entropy over this rank's vocabulary shard of ``group`` (every rank calls it with the
    same targets and gets the same loss); see
    `liger_core.ops.vocab_parallel_cross_entropy.vocab_parallel_cross_entropy` for the contract."""
    return resolve("vocab_parallel_cross_entropy", _device("vocab_parallel_cross_entropy", "logits", logits))(
        logits, target, group, ignore_index, reduction, in_place
    )


@takes_memory_budget
def liger_fused_linear_cross_entropy(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    ce_weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    lse_square_scale: float = 0.0,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    softcap: float | None = None,
    return_z_loss: bool = False,
    accum_dtype: torch.dtype | None = None,
):
    """lm_head + cross-entropy without the full logits; see
    `liger_core.ops.fused_linear_cross_entropy.fused_linear_cross_entropy`."""
    return resolve("fused_linear_cross_entropy", _device("fused_linear_cross_entropy", "input", input))(
        input,
        weight,
        target,
        bias,
        ce_weight,
        ignore_index,
        lse_square_scale,
        label_smoothing,
        reduction,
        softcap,
        return_z_loss,
        accum_dtype,
    )


def liger_kl_div(
    y_pred: torch.Tensor,
    y_true: torch.Tensor,
    reduction: str = "batchmean",
    log_target: bool = False,
    eps: float = 1e-10,
) -> torch.Tensor:
    """KL divergence; see `liger_core.ops.kl_div.kl_div` for the contract."""
    return resolve("kl_div", _device("kl_div", "y_pred", y_pred))(y_pred, y_true, reduction, log_target, eps)


def liger_jsd(
    student_logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    beta: float = 0.5,
    ignore_index: int = -100,
) -> torch.Tensor:
    """Generalised Jensen-Shannon divergence; see `liger_core.ops.jsd.jsd` for the contract."""
    return resolve("jsd", _device("jsd", "student_logp", student_logp))(
        student_logp, teacher_logp, shift_labels, beta, ignore_index
    )


@takes_memory_budget
def liger_fused_linear_jsd(
    student_input: torch.Tensor,
    student_weight: torch.Tensor,
    teacher_input: torch.Tensor,
    teacher_weight: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    jsd_beta: float = 0.5,
    ignore_index: int = -100,
    temperature: float = 1.0,
) -> torch.Tensor:
    """lm_heads + JSD without the full logits; see `liger_core.ops.fused_linear_jsd.fused_linear_jsd`."""
    return resolve("fused_linear_jsd", _device("fused_linear_jsd", "student_input", student_input))(
        student_input, student_weight, teacher_input, teacher_weight, shift_labels, jsd_beta, ignore_index, temperature
    )


def liger_tvd(
    p: torch.Tensor,
    q: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    reduction: str = "batchmean",
    ignore_index: int = -100,
) -> torch.Tensor:
    """Total variation distance; see `liger_core.ops.tvd.tvd` for the contract."""
    return resolve("tvd", _device("tvd", "p", p))(p, q, shift_labels, reduction, ignore_index)


def liger_fused_gate_up_swiglu(gate_up: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """``silu(gate) * up`` of one fused ``(..., 2 * I)`` gate-up projection output (gate first);
    see `liger_core.ops.fused_gate_up_swiglu.fused_gate_up_swiglu` for the contract."""
    return resolve("fused_gate_up_swiglu", _device("fused_gate_up_swiglu", "gate_up", gate_up))(gate_up, in_place)


def liger_tiled_mlp(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
    activation: str = "silu",
    num_shards: int | None = None,
) -> torch.Tensor:
    """The gated MLP over tiles of tokens, recomputed in backward (activation memory of one tile);
    see `liger_core.ops.tiled_mlp.tiled_mlp` for the contract."""
    return resolve("tiled_mlp", _device("tiled_mlp", "x", x))(
        x, gate_weight, up_weight, down_weight, activation, num_shards
    )


def liger_llama4_rope(q: torch.Tensor, k: torch.Tensor, freqs_cis: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Llama 4's complex-form RoPE; see `liger_core.ops.llama4_rope.llama4_rope` for the contract."""
    return resolve("llama4_rope", _device("llama4_rope", "q", q))(q, k, freqs_cis)


# Drop-in for transformers' Llama4 ``apply_rotary_emb(xq, xk, freqs_cis)``, under liger-kernel's name.
liger_llama4_text_rotary_pos_emb = liger_llama4_rope


def liger_fused_moe(
    hidden_states: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
) -> torch.Tensor:
    """The routed SwiGLU experts of an MoE MLP (liger-kernel's ``LigerFusedMoEFunction``); see
    `liger_core.ops.fused_moe.fused_moe` for the contract."""
    return resolve("fused_moe", _device("fused_moe", "hidden_states", hidden_states))(
        hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights
    )


def liger_fused_moe_clamped_swiglu(
    hidden_states: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    gate_up_bias: torch.Tensor | None = None,
    down_bias: torch.Tensor | None = None,
    limit: float = 7.0,
    alpha: float = 1.702,
    up_offset: float = 1.0,
    interleaved: bool = True,
) -> torch.Tensor:
    """The routed experts of GPT-OSS's MoE MLP (biased projections, interleaved gate and up, the
    clamped SwiGLU); see `liger_core.ops.fused_moe_clamped_swiglu.fused_moe_clamped_swiglu`."""
    return resolve("fused_moe_clamped_swiglu", _device("fused_moe_clamped_swiglu", "hidden_states", hidden_states))(
        hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights, gate_up_bias, down_bias,
        limit, alpha, up_offset, interleaved,
    )  # fmt: skip


@takes_memory_budget
def liger_fused_linear_grpo(
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
    """lm_head + the GRPO-family losses of TRL without the logits: ``(loss, metrics)``; see
    `liger_core.ops.fused_linear_grpo.fused_linear_grpo`."""
    return resolve("fused_linear_grpo", _device("fused_linear_grpo", "input", input))(
        input, weight, selected_token_ids, attention_mask, advantages, bias, ref_per_token_logps,
        old_per_token_logps, vllm_is_ratio, num_items_in_batch, beta, epsilon_low, epsilon_high, loss_type,
        max_completion_length, importance_sampling_level, sapo_temperature_pos, sapo_temperature_neg, temperature,
        delta, use_bias_correction_kl, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
    )  # fmt: skip


def liger_grpo_loss(
    logits: torch.Tensor,
    old_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None,
    completion_ids: torch.Tensor,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor | None = None,
    temperature: float = 0.9,
    beta: float = 0.04,
    eps_low: float = 0.2,
    eps_high: float = 0.4,
    in_place: bool = False,
    loss_type: str = "dapo",
    max_completion_length: int | None = None,
    importance_sampling_level: str = "token",
    reduce: bool = False,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    vllm_is_ratio: torch.Tensor | None = None,
    delta: float | None = None,
    use_bias_correction_kl: bool = False,
    num_items_in_batch: float | None = None,
    vespo_k_pos: float = 2.0,
    vespo_lambda_pos: float = 3.0,
    vespo_k_neg: float = 3.0,
    vespo_lambda_neg: float = 2.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The GRPO loss from logits (liger-kernel's ``triton_grpo_loss``); see
    `liger_core.ops.grpo_loss.grpo_loss`."""
    return resolve("grpo_loss", _device("grpo_loss", "logits", logits))(
        logits, old_logp, ref_logp, completion_ids, advantages, completion_mask, temperature, beta, eps_low,
        eps_high, in_place, loss_type, max_completion_length, importance_sampling_level, reduce,
        sapo_temperature_pos, sapo_temperature_neg, vllm_is_ratio, delta, use_bias_correction_kl, num_items_in_batch,
        vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
    )  # fmt: skip


@takes_memory_budget
def liger_fused_linear_kl_div(
    student_input: torch.Tensor,
    student_weight: torch.Tensor,
    target: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    reduction: str = "batchmean",
    ignore_index: int = -100,
    temperature: float = 1.0,
    eps: float = 1e-10,
) -> torch.Tensor:
    """The student's lm_head + KL from a target distribution without the logits; see
    `liger_core.ops.fused_linear_kl_div.fused_linear_kl_div`."""
    return resolve("fused_linear_kl_div", _device("fused_linear_kl_div", "student_input", student_input))(
        student_input, student_weight, target, shift_labels, reduction, ignore_index, temperature, eps
    )


@takes_memory_budget
def liger_fused_linear_cosine_similarity(
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
    """lm_heads + cosine-similarity distillation (and hard CE) without the logits: ``(loss,
    soft_loss, hard_loss)``; see `liger_core.ops.fused_linear_cosine_similarity`."""
    device = _device("fused_linear_cosine_similarity", "student_input", student_input)
    return resolve("fused_linear_cosine_similarity", device)(
        student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias, teacher_bias,
        weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature,
    )  # fmt: skip


@takes_memory_budget
def liger_fused_linear_jsd_loss(
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
    """lm_heads + JSD distillation with a hard cross-entropy term, without the logits: ``(loss,
    soft_loss, hard_loss)``; see `liger_core.ops.fused_linear_jsd_loss`."""
    return resolve("fused_linear_jsd_loss", _device("fused_linear_jsd_loss", "student_input", student_input))(
        student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias, teacher_bias,
        weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature,
    )  # fmt: skip


def liger_embedding(weight: torch.Tensor, indices: torch.Tensor, padding_idx: int | None = None) -> torch.Tensor:
    """``weight[indices]`` (nn.Embedding); see `liger_core.ops.embedding.embedding` for the contract."""
    return resolve("embedding", _device("embedding", "weight", weight))(weight, indices, padding_idx)


def liger_modulated_rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    scale: torch.Tensor,
    shift: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> torch.Tensor:
    """``(1 + scale) * rms_norm(x) + shift``; see `liger_core.ops.modulated_rms_norm.modulated_rms_norm`."""
    return resolve("modulated_rms_norm", _device("modulated_rms_norm", "x", x))(
        x, weight, scale, shift, eps, offset, casting_mode, in_place
    )


@takes_memory_budget
def liger_fused_linear_dpo(
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
    """lm_head + DPO loss over (chosen, rejected) halves of one batch, returning ``(loss,
    chosen_logps, rejected_logps, chosen_logits_mean, rejected_logits_mean, nll_loss,
    chosen_rewards, rejected_rewards)``; see `liger_core.ops.fused_linear_dpo.fused_linear_dpo`
    for the contract."""
    return resolve("fused_linear_dpo", _device("fused_linear_dpo", "input", input))(
        input, weight, target, bias, ref_input, ref_weight, ref_bias, ignore_index, beta, compute_nll_loss,
        use_ref_model, average_log_prob, loss_type, label_smoothing, discopop_tau, alpha,
    )  # fmt: skip


@takes_memory_budget
def liger_fused_linear_orpo(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    ignore_index: int = -100,
    beta: float = 0.1,
    compute_nll_loss: bool = True,
) -> tuple[torch.Tensor, ...]:
    """lm_head + ORPO loss over (chosen, rejected) halves of one batch, returning ``(loss,
    chosen_logps, rejected_logps, chosen_logits_mean, rejected_logits_mean, nll_loss,
    chosen_rewards, rejected_rewards)``; see `liger_core.ops.fused_linear_orpo.fused_linear_orpo`
    for the contract."""
    return resolve("fused_linear_orpo", _device("fused_linear_orpo", "input", input))(
        input, weight, target, bias, ignore_index, beta, compute_nll_loss
    )


@takes_memory_budget
def liger_fused_linear_cpo(
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
    """lm_head + CPO loss (``loss_type`` sigmoid, hinge, ipo or simpo); outputs as
    `liger_fused_linear_dpo`'s; see `liger_core.ops.fused_linear_cpo.fused_linear_cpo` for the contract."""
    return resolve("fused_linear_cpo", _device("fused_linear_cpo", "input", input))(
        input, weight, target, bias, ignore_index, beta, alpha, label_smoothing, compute_nll_loss, average_log_prob,
        loss_type, simpo_gamma,
    )  # fmt: skip


@takes_memory_budget
def liger_fused_linear_simpo(
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
    """lm_head + SimPO loss; outputs as `liger_fused_linear_dpo`'s; see
    `liger_core.ops.fused_linear_simpo.fused_linear_simpo` for the contract."""
    return resolve("fused_linear_simpo", _device("fused_linear_simpo", "input", input))(
        input, weight, target, bias, ignore_index, beta, alpha, label_smoothing, compute_nll_loss, gamma
    )


def liger_attn_res(
    V: torch.Tensor | list[torch.Tensor] | tuple[torch.Tensor, ...],
    w_query: torch.Tensor,
    w_norm: torch.Tensor,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Attention Residuals: softmax attention of a pseudo-query over ``N`` stacked block outputs
    (``V``: ``(N, ..., hidden)``, or a list of the ``N`` blocks, stacked here as liger-kernel does);
    see `liger_core.ops.attn_res.attn_res` for the contract."""
    if isinstance(V, (list, tuple)):
        if not all(isinstance(block, torch.Tensor) for block in V):
            raise TypeError(f"attn_res: V must be a torch.Tensor or a list of them; got a {type(V).__name__} of others")
        V = torch.stack(V)
    return resolve("attn_res", _device("attn_res", "V", V))(V, w_query, w_norm, eps)


def liger_fused_ce_tvd(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    target: torch.Tensor,
    ignore_index: int = -100,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token ``(ce, tvd)`` of student logits against a teacher's, unreduced; see
    `liger_core.ops.fused_ce_tvd.fused_ce_tvd` for the contract."""
    return resolve("fused_ce_tvd", _device("fused_ce_tvd", "student_logits", student_logits))(
        student_logits, teacher_logits, target, ignore_index
    )


@takes_memory_budget
def liger_fused_linear_kto(
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
    """lm_head + KTO loss over a batch of labelled (unpaired) completions, returning ``(loss,
    chosen_logps_sum, rejected_logps_sum, chosen_logits_sum, rejected_logits_sum,
    chosen_rewards_sum, rejected_rewards_sum)``; see `liger_core.ops.fused_linear_kto.fused_linear_kto`
    for the contract."""
    return resolve("fused_linear_kto", _device("fused_linear_kto", "input", input))(
        input, weight, target, preference_labels, bias, ref_input, ref_weight, ref_bias, kl, ignore_index, beta,
        use_ref_model, average_log_prob, desirable_weight, undesirable_weight,
    )  # fmt: skip


def liger_multi_token_attention(
    scores: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    groups: int = 1,
    sparse: bool = False,
) -> torch.Tensor:
    """Multi-token attention's convolution over causal softmax (or sparsemax) probabilities; see
    `liger_core.ops.multi_token_attention.multi_token_attention` for the contract."""
    return resolve("multi_token_attention", _device("multi_token_attention", "scores", scores))(
        scores, weight, bias, stride, padding, dilation, groups, sparse
    )


@takes_memory_budget
def liger_fused_linear_scaled_cross_entropy(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    temperature: float = 1.0,
    ignore_index: int = -100,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token ``(nll, entropy)`` of ``softmax(input @ weight.T / temperature)``, unreduced, without
    the logits; see `liger_core.ops.fused_linear_scaled_cross_entropy` for the contract."""
    return resolve("fused_linear_scaled_cross_entropy", _device("fused_linear_scaled_cross_entropy", "input", input))(
        input, weight, target, temperature, ignore_index
    )


def liger_mhc_coeffs(
    x: torch.Tensor,
    phi: torch.Tensor,
    b: torch.Tensor,
    alpha_pre: torch.Tensor,
    alpha_post: torch.Tensor,
    alpha_res: torch.Tensor,
    tmax: int = 20,
    rms_eps: float = 1e-6,
    pre_eps: float = 0.0,
    sinkhorn_eps: float = 1e-6,
    post_mult: float = 2.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """mHC routing coefficients ``(h_pre, h_post, h_res)`` of ``HC`` residual streams ``x``
    (``(..., HC, C)``): sigmoid maps and the Sinkhorn-normalised mixing matrix; see
    `liger_core.ops.mhc_coeffs.mhc_coeffs` for the contract."""
    return resolve("mhc_coeffs", _device("mhc_coeffs", "x", x))(
        x, phi, b, alpha_pre, alpha_post, alpha_res, tmax, rms_eps, pre_eps, sinkhorn_eps, post_mult
    )


def liger_mhc_pre(x: torch.Tensor, h_pre: torch.Tensor) -> torch.Tensor:
    """mHC pre-mix: the wrapped layer's input ``sum_s h_pre[..., s] * x[..., s, :]`` of ``HC``
    residual streams ``x`` (``(..., HC, C)``); see `liger_core.ops.mhc_pre.mhc_pre` for the contract."""
    return resolve("mhc_pre", _device("mhc_pre", "x", x))(x, h_pre)


def liger_mhc_post_res(x: torch.Tensor, f_out: torch.Tensor, h_post: torch.Tensor, h_res: torch.Tensor) -> torch.Tensor:
    """mHC post + residual mix: ``h_res @ x + h_post * f_out`` per token, back to ``HC`` streams;
    see `liger_core.ops.mhc_post_res.mhc_post_res` for the contract."""
    return resolve("mhc_post_res", _device("mhc_post_res", "x", x))(x, f_out, h_post, h_res)


def liger_fused_neighborhood_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    kernel_size: int = 7,
    dilation: int = 1,
    scale: float | None = None,
) -> torch.Tensor:
    """Softmax attention over a sliding window of ``kernel_size`` keys (spaced by ``dilation``)
    around each query, ``(batch, heads, seq, head_dim)``; see
    `liger_core.ops.fused_neighborhood_attention` for the contract."""
    return resolve("fused_neighborhood_attention", _device("fused_neighborhood_attention", "query", query))(
        query, key, value, kernel_size, dilation, scale
    )


# Built last, so that every entry point above is exported (an early `__all__` once hid 13 of them).
__all__ = sorted(name for name in dir() if name.startswith("liger_"))
