"""Model shapes the benchmarks run at: named configs and the axes a sweep can vary.

Sizes come from the models' published configs (hidden_size, intermediate_size,
vocab_size, num_attention_heads, num_key_value_heads, head_dim). ``tokens`` is the
number of rows an op sees per call (batch x sequence), ``batch`` splits it for the ops
that keep a (batch, seq, ...) layout (RoPE, group norm).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden: int
    intermediate: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    tokens: int = 4096
    batch: int = 1
    # Mixture-of-experts models: routed experts and experts per token (0: a dense model; `intermediate`
    # is then the MLP's, else one expert's).
    experts: int = 0
    top_k: int = 0

    @property
    def seq(self) -> int:
        return max(1, self.tokens // self.batch)

    def with_axis(self, axis: str, value: int) -> ModelShape:
        """This shape with one axis set to ``value`` (a sweep point)."""
        if axis not in AXES:
            raise ValueError(f"sweep axis must be one of {', '.join(AXES)}; got {axis!r}")
        if value < 1:
            raise ValueError(f"sweep values must be >= 1; got {axis}={value}")
        return replace(self, **{axis: int(value)})

    def as_dict(self) -> dict[str, int | str]:
        return asdict(self)


# The axes a sweep may vary: every integer field of ModelShape.
AXES: tuple[str, ...] = tuple(f.name for f in fields(ModelShape) if f.name != "name")
MOE_AXES = ("experts", "top_k")

MODEL_CONFIGS: dict[str, ModelShape] = {
    s.name: s
    for s in (
        ModelShape("llama-3-8b", hidden=4096, intermediate=14336, vocab=128256, heads=32, kv_heads=8, head_dim=128),
        ModelShape("llama-3-70b", hidden=8192, intermediate=28672, vocab=128256, heads=64, kv_heads=8, head_dim=128),
        ModelShape("llama-3.2-1b", hidden=2048, intermediate=8192, vocab=128256, heads=32, kv_heads=8, head_dim=64),
        ModelShape("llama-3.2-3b", hidden=3072, intermediate=8192, vocab=128256, heads=24, kv_heads=8, head_dim=128),
        ModelShape("mistral-7b", hidden=4096, intermediate=14336, vocab=32768, heads=32, kv_heads=8, head_dim=128),
        ModelShape("qwen2.5-7b", hidden=3584, intermediate=18944, vocab=152064, heads=28, kv_heads=4, head_dim=128),
        ModelShape("qwen2-vl-7b", hidden=3584, intermediate=18944, vocab=152064, heads=28, kv_heads=4, head_dim=128),
        ModelShape("gemma-2-9b", hidden=3584, intermediate=14336, vocab=256000, heads=16, kv_heads=8, head_dim=256),
        ModelShape("phi-3-mini", hidden=3072, intermediate=8192, vocab=32064, heads=32, kv_heads=32, head_dim=96),
        # google/gemma-3-1b-pt config.json (Gemma3TextConfig): hidden_size 1152, intermediate_size 6912,
        # num_attention_heads 4, num_key_value_heads 1, head_dim 256, vocab_size 262144.
        ModelShape("gemma-3-1b", hidden=1152, intermediate=6912, vocab=262144, heads=4, kv_heads=1, head_dim=256),
        # Qwen/Qwen3-1.7B config.json: hidden_size 2048, intermediate_size 6144, 16 heads, 8 KV heads,
        # head_dim 128, vocab_size 151936.
        ModelShape("qwen3-1.7b", hidden=2048, intermediate=6144, vocab=151936, heads=16, kv_heads=8, head_dim=128),
        # Mixture-of-experts (fused_moe): intermediate is one expert's (moe_intermediate_size).
        ModelShape(
            "qwen3-30b-a3b",
            hidden=2048,
            intermediate=768,
            vocab=151936,
            heads=32,
            kv_heads=4,
            head_dim=128,
            experts=128,
            top_k=8,
        ),
        ModelShape(
            "mixtral-8x7b",
            hidden=4096,
            intermediate=14336,
            vocab=32000,
            heads=32,
            kv_heads=8,
            head_dim=128,
            experts=8,
            top_k=2,
        ),
        # openai/gpt-oss-20b config.json: hidden_size 2880, intermediate_size 2880, 32 local experts, 4 per
        # token, 64 heads of 64, 8 KV heads, vocab_size 201088 (fused_moe_clamped_swiglu).
        ModelShape(
            "gpt-oss-20b",
            hidden=2880,
            intermediate=2880,
            vocab=201088,
            heads=64,
            kv_heads=8,
            head_dim=64,
            experts=32,
            top_k=4,
        ),
        # For a CPU smoke run: odd sizes, every op finishes in milliseconds on the reference.
        ModelShape("tiny", hidden=48, intermediate=80, vocab=96, heads=4, kv_heads=2, head_dim=16, tokens=24, batch=2),
    )
}


def _at(config: str, tokens: int) -> ModelShape:
    return replace(MODEL_CONFIGS[config], name=f"{config}@{tokens}t", tokens=tokens)


# Named sets of shapes that differ in more than one axis, run together (``liger bench --shapes NAME``);
# each point's rows carry its name as their x (axis "shape").
SHAPE_SETS: dict[str, tuple[ModelShape, ...]] = {
    # The fused linear losses at training micro-batches (tokens > hidden): a batch of 8 x 2048 tokens
    # (4 x 2048 for the 8B) against each model's LM head (issue 14's five shapes, tokens x hidden x vocab).
    "flce-training": (
        _at("llama-3.2-1b", 16384),  # 16384 x 2048 x 128256
        _at("llama-3-8b", 16384),  # 16384 x 4096 x 128256
        _at("gemma-3-1b", 16384),  # 16384 x 1152 x 262144
        _at("qwen3-1.7b", 16384),  # 16384 x 2048 x 151936
        _at("llama-3-8b", 8192),  # 8192 x 4096 x 128256
    ),
    # The same layouts at sizes the PyTorch reference finishes in milliseconds: CPU smoke runs of --shapes.
    "tiny": (_at("tiny", 24), replace(MODEL_CONFIGS["tiny"], name="tiny-wide@40t", hidden=64, vocab=130, tokens=40)),
}


def get_shape_set(name: str) -> tuple[ModelShape, ...]:
    try:
        return SHAPE_SETS[name]
    except KeyError:
        raise ValueError(f"unknown shape set {name!r}; known: {', '.join(SHAPE_SETS)}") from None


def get_config(name: str) -> ModelShape:
    try:
        return MODEL_CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown model config {name!r}; known: {', '.join(MODEL_CONFIGS)}") from None


def custom_shape(base: ModelShape, **sizes: int | None) -> ModelShape:
    """``base`` with explicit sizes (``tokens=8192, hidden=5120``...) set; None leaves a size as is."""
    given = {k: v for k, v in sizes.items() if v is not None}
    shape = base
    for axis, value in given.items():
        shape = shape.with_axis(axis, value)
    return replace(shape, name=base.name + ("*" if given else ""))
