"""Mini models of every patched family, from their configs (random weights), and a training loop.

Sizes: ``tiny`` (CI, the Triton interpreter on CPU: hidden 32-64, 2 layers, vocab 256,
sequence 24) and ``mid`` (an H100/H200: hidden 1024, 4 layers, vocab 32000, sequence 512).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from transformers import AutoConfig, AutoModelForCausalLM

FAMILIES = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi3",
    "granite",
    "olmo2",
)


@dataclass(frozen=True)
class Size:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    batch: int
    seq: int
    steps: int
    lr: float  # AdamW's; must keep training stable, or the two runs drift apart chaotically


SIZES = {
    # Odd-ish shapes on purpose: rows shorter than a block, vocab not a power of two.
    # CI runs tiny in the Triton interpreter, whose cost grows with rows (batch x seq) and launches.
    "tiny": Size(
        hidden=32,
        layers=2,
        heads=4,
        kv_heads=2,
        head_dim=8,
        intermediate=64,
        vocab=128,
        batch=2,
        seq=16,
        steps=10,
        lr=3e-3,
    ),
    "mid": Size(
        hidden=1024,
        layers=4,
        heads=16,
        kv_heads=4,
        head_dim=64,
        intermediate=2816,
        vocab=32000,
        batch=4,
        seq=512,
        steps=32,
        # On an H200 at 3e-3 the stock loss *rose* (llama 10.59 -> 11.08 in 32 steps) and any two
        # runs diverged (fp32 loss 0.1 apart); at 3e-4 it learns (10.59 -> 10.21) and stock vs
        # patched agree to ~2e-6 in fp32.
        lr=3e-4,
    ),
}


def mini_config(model_type: str, size: Size, **overrides):
    """A small config of ``model_type`` exercising each family's particular paths; ``overrides`` last."""
    kw = dict(
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads,
        head_dim=size.head_dim,
        vocab_size=size.vocab,
        max_position_embeddings=max(64, size.seq),
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        attention_dropout=0.0,
    )
    if model_type in ("mixtral",):
        kw.update(num_local_experts=4, num_experts_per_tok=2, output_router_logits=True, router_aux_loss_coef=0.02)
    if model_type == "qwen3_moe":
        # layer 0 sparse (experts), layer 1 dense (Qwen3MoeMLP): both paths patched.
        kw.update(
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=size.intermediate // 2,
            decoder_sparse_step=1,
            mlp_only_layers=[1],
            output_router_logits=True,
            router_aux_loss_coef=0.02,
            norm_topk_prob=True,
        )
    if model_type.startswith("gemma"):
        kw.update(hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True)
    if model_type in ("gemma2", "gemma3_text"):
        kw.update(
            query_pre_attn_scalar=size.head_dim,
            sliding_window=size.seq // 2,
            final_logit_softcapping=30.0,
            attn_logit_softcapping=50.0 if model_type == "gemma2" else None,
        )
    if model_type == "phi3":
        kw.pop("head_dim")
        kw.update(partial_rotary_factor=0.5)  # Phi-3's partial RoPE path
    if model_type == "granite":
        kw.update(logits_scaling=4.0, embedding_multiplier=2.0, residual_multiplier=0.5, attention_multiplier=0.1)
    kw.update(overrides)
    return AutoConfig.for_model(model_type, **kw)


# Non-default configs of each family, for the tests that patched classes serve every config stock serves:
# "kernel" keeps the activation Liger's MLP computes, "other_act" swaps it (the MLP then runs the stock
# forward); both flip tied/untied embeddings from mini_config's and set the family's sliding window and partial
# RoPE where it has them. Window 4 is shorter than the test sequences, so the window masks something.
VARIANTS = ("kernel", "other_act")
_SLIDING = {
    "mistral": {"sliding_window": 4},
    "mixtral": {"sliding_window": 4},
    "phi3": {"sliding_window": 4},
    # Layers from max_window_layers on use the window: layer 0 full, layer 1 sliding.
    "qwen2": {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
    "qwen3": {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
    "qwen3_moe": {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
    "gemma2": {"sliding_window": 4},
    "gemma3_text": {"sliding_window": 4},
}


def variant_config(model_type: str, variant: str, size: Size):
    """``mini_config`` of ``model_type`` changed as ``variant`` (one of VARIANTS) says."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}; got {variant!r}")
    gemma = model_type.startswith("gemma")
    kw = dict(_SLIDING.get(model_type, {}))
    kw["tie_word_embeddings"] = not gemma  # mini_config ties gemma's only
    if model_type == "gemma3_text":
        kw["layer_types"] = ["sliding_attention", "full_attention"]  # both RoPE tables (local and global)
    if model_type == "phi3":
        kw["partial_rotary_factor"] = 0.75  # head_dim 8: rotates 6 of 8 dims (mini_config's 0.5 rotates 4)
    if model_type in ("llama", "granite"):
        kw["mlp_bias"] = True  # biased projections into the fused MLP
    if model_type in ("llama", "granite", "qwen3", "olmo2"):
        kw["attention_bias"] = True
    if variant == "other_act":
        # silu families get gelu (exact erf); gemma's tanh-GELU families get silu (Gemma reads hidden_act,
        # Gemma 2/3 hidden_activation).
        kw["hidden_act"] = "silu" if gemma else "gelu"
        if gemma:
            kw["hidden_activation"] = "silu"
    kw["classifier_dropout"] = 0.0  # token classification heads: no dropout, so stock and patched runs agree
    config = mini_config(model_type, size, **kw)
    config._attn_implementation = "eager"
    return config


def build(model_type: str, size: Size, dtype: torch.dtype, device: str, state: dict | None = None):
    """A model from ``mini_config``; ``state`` (a state dict) makes its weights exactly those."""
    config = mini_config(model_type, size)
    config._attn_implementation = "eager"  # the same attention in both runs, on every device
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(device)
    if state is not None:
        model.load_state_dict(state)
    return model


def batches(size: Size, steps: int, device: str, seed: int = 1234) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Generated token batches with something to learn: a fixed random successor table, followed
    with probability 3/4 (so the loss falls over a few dozen steps). Each row ignores a 'prompt' of
    random length (labels -100), so the mean is over a varying number of tokens.
    """
    g = torch.Generator().manual_seed(seed)
    successor = torch.randint(3, size.vocab, (size.vocab,), generator=g)
    out = []
    for _ in range(steps):
        ids = torch.empty(size.batch, size.seq, dtype=torch.long)
        ids[:, 0] = torch.randint(3, size.vocab, (size.batch,), generator=g)
        noise = torch.randint(3, size.vocab, (size.batch, size.seq), generator=g)
        follow = torch.rand(size.batch, size.seq, generator=g) < 0.75
        for t in range(1, size.seq):
            ids[:, t] = torch.where(follow[:, t], successor[ids[:, t - 1]], noise[:, t])
        labels = ids.clone()
        prompt = torch.randint(1, size.seq // 3, (size.batch,), generator=g)
        labels[torch.arange(size.seq)[None, :] < prompt[:, None]] = -100
        out.append((ids.to(device), labels.to(device)))
    return out


@dataclass
class Run:
    losses: list[float]
    params: dict[str, torch.Tensor]
    eval_logprobs: torch.Tensor  # (positions, vocab) float32, on CPU


def train(model, data, lr: float) -> Run:
    """AdamW over ``data``; then the model's log-probs on an eval batch (first row of the first batch)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, eps=1e-6)
    model.train()
    losses = []
    for ids, labels in data:
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=data[0][0][:1, :128]).logits
    logp = torch.log_softmax(logits.float(), dim=-1)[0].cpu()
    params = {n: p.detach().float().cpu().clone() for n, p in model.named_parameters()}
    return Run(losses, params, logp)


def initial_state(model) -> dict:
    return copy.deepcopy(model.state_dict())


@contextlib.contextmanager
def stock_transformers(reapply: Callable[[], None]) -> Iterator[None]:
    """Stock transformers inside the block, ``reapply()`` (the test's patch) after it.

    A class-level patch also changes models built before it: ``<Family>ForCausalLM.forward`` and the
    module-level ``apply_rotary_pos_emb`` are looked up at call time. A stock reference must therefore
    run (forward, generate) with the patches reverted, and so must its backward under gradient
    checkpointing, which runs the forward again.
    """
    from liger_core.transformers import revert_liger_kernel_patches

    revert_liger_kernel_patches()
    try:
        yield
    finally:
        reapply()
