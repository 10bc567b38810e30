"""Tiny models from configs, and a counter of the ops Liger's functional API dispatches."""

from __future__ import annotations

import contextlib
import warnings
from collections import Counter

import torch

from liger_core import functional, registry
from liger_core.registry import LigerFallbackWarning

VOCAB = 103  # the word-level tokenizer's: 3 special ids, 100 words


def config(family: str):
    """A two-layer config of ``family`` (``llama`` or ``qwen3``), float32, no download."""
    common = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    if family == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(**common, architectures=["LlamaForCausalLM"])
    if family == "qwen3":
        from transformers import Qwen3Config

        return Qwen3Config(**common, head_dim=16, architectures=["Qwen3ForCausalLM"])
    raise ValueError(f"family must be 'llama' or 'qwen3'; got {family!r}")


def save_tiny(family: str, path, seed: int = 0) -> str:
    """Build ``family``'s tiny causal LM from its config with seeded weights, save it to ``path``."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config(family), dtype=torch.float32)
    model.save_pretrained(path)
    return str(path)


@contextlib.contextmanager
def count_ops(device_type: str = "cpu"):
    """Count the ops dispatched through `liger_core.functional` while inside; each must be served by a
    vendor backend (not the reference) on ``device_type``; a Liger fallback warning is an error."""
    calls: Counter = Counter()
    resolve = functional.resolve

    def counting(op, device):
        calls[op] += 1
        return resolve(op, device)

    functional.resolve = counting
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", LigerFallbackWarning)
            yield calls
    finally:
        functional.resolve = resolve
    for op in calls:
        serving = registry.serving(op, device_type)
        assert serving.backend not in (None, registry.REFERENCE), (op, serving)


WORDS = [f"w{i}" for i in range(VOCAB - 3)]


def tokenizer():
    """A word-level tokenizer over the tiny vocabulary (no download): ids 0-2 special, 3-102 words."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>")


def sentences(n: int, seed: int) -> list[str]:
    """Word sequences with structure (each word mostly followed by one successor), so training learns."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(6, 14, (1,), generator=g))
        word = int(torch.randint(0, len(WORDS), (1,), generator=g))
        words = []
        for _ in range(length):
            words.append(WORDS[word])
            follow = torch.rand(1, generator=g) < 0.75
            word = (word * 7 + 3) % len(WORDS) if follow else int(torch.randint(0, len(WORDS), (1,), generator=g))
        out.append(" ".join(words))
    return out


def restore_stock_functions(model) -> None:
    """Give back the stock forward to the function layers ``model``'s modules hold (``_kernel_funcs``).

    transformers decorates a module-level function (``apply_rotary_pos_emb``) that ``kernels`` turns into
    one module instance, shared by every attention layer of every model of that family in the process;
    ``kernelize`` swaps that instance's forward. So a stock model built after a switched one would run
    the switched RoPE: the stock runs here call this first.
    """
    for module in model.modules():
        for fn in getattr(module, "_kernel_funcs", {}).values():
            fn.__dict__.pop("forward", None)
