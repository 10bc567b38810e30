"""Training steps of ``torch.compile``-d Liger-patched models against stock transformers (issue 39).

A compiled patched model whose forward agrees with stock's can still train wrongly: a gradient that
is wrong or missing under AOTAutograd shows in neither the first loss nor a forward-only check. So
each case runs a few AdamW steps, stock eager and patched compiled (whole model, ``torch.compile``,
same weights, data and seed), and compares the loss of every step and every parameter's gradient at
every step (both from the same weights at step 1; after it, from weights the two runs each updated).

Families: the 11 text families of the original Liger Kernel (float32, tiny configs), through
``aot_eager`` (AOTAutograd's joint graph and partition, the path Inductor takes for the ``liger::``
custom ops, without Inductor's compile time on a 2-core CI host); gradient checkpointing on in some
(it re-runs the forward inside the compiled backward). Inductor itself on one family, checkpointed.
Every run also counts Dynamo's graph breaks: there must be none.

CI cost: a compiled tiny model costs 40-200 s here (2 shared cores, the Triton interpreter), so the
hf sessions run the three checkpointed cases of ``CI_CASES`` (LLaMA, Gemma 3, Qwen3); the other
families and Inductor run with ``LIGER_COMPILE_SWEEP=1`` (skipped otherwise, saying so).

Tolerances: test_families'/the convergence tests' for the patched against stock model (loss 1e-4
over the steps, gradients atol 5e-5 / rtol 1e-3), float32.
"""

from __future__ import annotations

import os

import pytest
import torch
from hf_models import SIZES, batches, build, require_family

from liger_core.transformers import MODEL_TYPE_TO_APPLY_LIGER_FN, revert_liger_kernel_patches

TINY = SIZES["tiny"]
STEPS = 2
LOSS_TOL = {"atol": 1e-4, "rtol": 1e-5}
GRAD_TOL = {"atol": 5e-5, "rtol": 1e-3}
# (family, gradient checkpointing): the original Liger Kernel's text families; the sandwich-norm (Gemma 2/3) and
# query/key-norm (Qwen3, OLMo2) layouts checkpointed, and LLaMA both ways.
CASES = [
    ("llama", False),
    ("llama", True),
    ("mistral", False),
    ("mixtral", False),
    ("gemma", True),
    ("gemma2", True),
    ("gemma3_text", True),
    ("qwen2", False),
    ("qwen3", True),
    ("phi3", False),
    ("granite", False),
    ("olmo2", True),
]


CI_CASES = {("llama", True), ("gemma3_text", True), ("qwen3", True)}
SWEEP_ENV = "LIGER_COMPILE_SWEEP"
# Known open: Mixtral's patched MoE block breaks the graph (the registry's lock, taken by fused_moe_reason's
# registry.serving call, and transformers' hook handles), 8 breaks per step at transformers 5.24.
KNOWN_BREAKS = {"mixtral"}


def _sweep_only(case) -> None:
    if case not in CI_CASES and os.environ.get(SWEEP_ENV) != "1":
        pytest.skip(f"the full compile sweep runs with {SWEEP_ENV}=1 (CI runs {sorted(CI_CASES)})")


def _train(model, data, compile_backend: str | None, checkpointing: bool):
    """``STEPS`` AdamW steps; per step the loss and every parameter's gradient (float32 copies)."""
    model.config.use_cache = False  # transformers' own warning about caches under checkpointing breaks the graph
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=TINY.lr, eps=1e-6)
    run = torch.compile(model, backend=compile_backend) if compile_backend else model
    losses, grads = [], []
    for batch in data:
        loss = run(**batch).loss
        loss.backward()
        losses.append(loss.detach().clone())
        grads.append({n: None if p.grad is None else p.grad.detach().clone() for n, p in model.named_parameters()})
        opt.step()
        opt.zero_grad(set_to_none=True)
    return torch.stack(losses), grads


def compiled_against_stock(model_type: str, backend: str, checkpointing: bool) -> dict:
    """Asserts the losses and gradients; returns Dynamo's graph breaks (reason -> count)."""
    require_family(model_type)
    apply = MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]
    torch._dynamo.reset()
    stock = build(model_type, TINY, torch.float32, "cpu")
    state = {k: v.clone() for k, v in stock.state_dict().items()}
    data = batches(TINY, STEPS, "cpu", model_type=model_type, config=stock.config)
    want_losses, want_grads = _train(stock, data, None, checkpointing)
    apply()
    try:
        patched = build(model_type, TINY, torch.float32, "cpu", state=state)
        torch._dynamo.utils.counters.clear()
        losses, grads = _train(patched, data, backend, checkpointing)
        breaks = dict(torch._dynamo.utils.counters["graph_break"])
    finally:
        revert_liger_kernel_patches()
        torch._dynamo.reset()
    where = f"{model_type} ({backend}, checkpointing {checkpointing})"
    torch.testing.assert_close(losses, want_losses, **LOSS_TOL, msg=lambda m: f"{where} losses per step: {m}")
    for step, (got, want) in enumerate(zip(grads, want_grads, strict=True), 1):
        assert got.keys() == want.keys()
        for name, g in got.items():
            w = want[name]
            assert (g is None) == (w is None), f"{where} step {step}: gradient of {name} is {g} against stock's {w}"
            if g is not None:
                torch.testing.assert_close(
                    g, w, **GRAD_TOL, msg=lambda m, n=name, s=step: f"{where} step {s}, gradient of {n}: {m}"
                )
    return breaks


def _assert_no_breaks(model_type: str, breaks: dict) -> None:
    if model_type in KNOWN_BREAKS:
        assert breaks, f"{model_type} compiles without graph breaks now: take it out of KNOWN_BREAKS"
        pytest.xfail(f"{model_type}: {sum(breaks.values())} graph breaks (known, open): {sorted(breaks)[:2]}")
    assert breaks == {}, f"{model_type}: graph breaks {breaks}"


@pytest.mark.parametrize(("model_type", "checkpointing"), CASES, ids=[f"{m}-{'gc' if c else 'nogc'}" for m, c in CASES])
def test_compiled_training_matches_stock(model_type, checkpointing):
    _sweep_only((model_type, checkpointing))
    _assert_no_breaks(model_type, compiled_against_stock(model_type, "aot_eager", checkpointing))


@pytest.mark.parametrize("model_type", ["gemma3_text"])
def test_inductor_training_matches_stock(model_type):
    _sweep_only((model_type, "inductor"))
    _assert_no_breaks(model_type, compiled_against_stock(model_type, "inductor", True))
