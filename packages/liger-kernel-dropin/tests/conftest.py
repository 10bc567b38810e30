"""Shared fixtures: stock transformers around each test, kernel-call counting, fallback detection.

The framework tests run each framework's own code (transformers' Trainer and its own Liger tests,
LLaMA-Factory's ``apply_liger_kernel``, OpenRLHF's and verl's calls) on tiny LLaMA-like models built
from configs, on CPU. ``nox -s hf-dropin`` runs them with liger-ops-cuda's kernels in the Triton
interpreter (``TRITON_INTERPRET=1 LIGER_BACKEND=cuda``); ``LIGER_DROPIN_FRAMEWORKS=1`` there turns a
missing framework from a skip into a failure.
"""

from __future__ import annotations

import collections
import importlib
import os
import warnings

import pytest
import torch

torch.set_num_threads(1)  # tiny models gain nothing from threads on a shared machine


def need(module: str):
    """``module``, imported; missing: a skip, or a failure under ``LIGER_DROPIN_FRAMEWORKS=1``."""
    if os.environ.get("LIGER_DROPIN_FRAMEWORKS") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module)


@pytest.fixture(autouse=True)
def stock_transformers():
    """Each test starts and ends with stock transformers classes and functions."""
    from liger_core.transformers import revert_liger_kernel_patches

    revert_liger_kernel_patches()
    yield
    revert_liger_kernel_patches()


@pytest.fixture
def kernel_calls(monkeypatch):
    """op name -> how many times a vendor backend's kernel ran (not the reference). Dispatch caches what
    `Backend.op` returns, so counting there counts every call; the cache is emptied around the test."""
    from liger_core import registry
    from liger_core.backend import Backend

    counts: collections.Counter = collections.Counter()
    stock_op = Backend.op

    def counting_op(self, name):
        fn = stock_op(self, name)
        if fn is None or self.name == registry.REFERENCE:
            return fn

        def counted(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)

        return counted

    registry.REGISTRY.cache.clear()
    monkeypatch.setattr(Backend, "op", counting_op)
    yield counts
    registry.REGISTRY.cache.clear()


@pytest.fixture
def no_fallback():
    """Records warnings; the test asserts that nothing fell back to the reference or to the stock layer."""
    from liger_core.registry import LigerFallbackWarning
    from liger_core.transformers import LigerStockFallbackWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
    fallbacks = [w for w in caught if issubclass(w.category, (LigerFallbackWarning, LigerStockFallbackWarning))]
    assert not fallbacks, [str(w.message) for w in fallbacks]


# The tiny models' sizes (any decoder family's config takes them).
TINY_SIZES = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)


def tiny_llama_config(**overrides):
    from transformers import LlamaConfig

    return LlamaConfig(**{**TINY_SIZES, **overrides})
