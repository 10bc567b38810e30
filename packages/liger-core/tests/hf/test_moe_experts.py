"""``fused_moe`` (through `LigerExperts`) against transformers' own experts modules on the same
weights: the eager loop and the grouped-GEMM implementation (``experts_implementation``
``"grouped_mm"``, which runs on CPU through torch's grouped_mm or transformers' fallback), forward
and every gradient (hidden states, both expert weights, routing weights); whichever backend serves
the op in this session (see conftest.py)."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch
from hf_models import require_family
from transformers import MixtralConfig, Qwen3MoeConfig
from transformers.models.mixtral.modeling_mixtral import MixtralExperts
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

from liger_core import LigerExperts

HIDDEN, INTERMEDIATE, EXPERTS, TOP_K, TOKENS = 40, 24, 5, 2, 13


def _qwen3():
    config = Qwen3MoeConfig(
        hidden_size=HIDDEN, moe_intermediate_size=INTERMEDIATE, num_experts=EXPERTS, num_experts_per_tok=TOP_K
    )
    return config, Qwen3MoeExperts


def _mixtral():
    config = MixtralConfig(
        hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_local_experts=EXPERTS, num_experts_per_tok=TOP_K
    )
    return config, MixtralExperts


def _routing(gen: torch.Generator, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    # A softmax router's top-k, normalised, in the experts' dtype (as Qwen3MoeTopKRouter returns
    # it); expert 4 takes no token, so its gradients must be zero.
    logits = torch.randn(TOKENS, EXPERTS, generator=gen)
    logits[:, 4] = -1e4
    weights, index = torch.topk(torch.softmax(logits, -1), TOP_K, dim=-1)
    return index, (weights / weights.sum(-1, keepdim=True)).to(dtype)


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    # bf16: the stock modules round each projection to bf16 (the eager loop also each expert's
    # partial sum); relative to the largest element, as the conformance suite's atol.
    rel = 1e-5 if dtype == torch.float32 else 3e-2
    scale = float(want.detach().abs().max().clamp_min(1e-3))
    torch.testing.assert_close(got, want, rtol=rel, atol=rel * scale, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("implementation", ("eager", "grouped_mm"))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("float32", "bfloat16"))
@pytest.mark.parametrize("family", (_qwen3, _mixtral), ids=("qwen3_moe", "mixtral"))
def test_liger_experts_equal_transformers_experts(family, dtype, implementation):
    config, stock_class = family()
    config._experts_implementation = implementation
    gen = torch.Generator().manual_seed(0)
    stock = stock_class(config)
    with torch.no_grad():
        stock.gate_up_proj.copy_(torch.randn(stock.gate_up_proj.shape, generator=gen) * HIDDEN**-0.5)
        stock.down_proj.copy_(torch.randn(stock.down_proj.shape, generator=gen) * INTERMEDIATE**-0.5)
    stock.to(dtype)
    liger = LigerExperts(config).to(dtype)
    liger.load_state_dict(stock.state_dict())  # the same parameter names and shapes

    x = torch.randn(TOKENS, HIDDEN, generator=gen).to(dtype)
    index, weights = _routing(gen, dtype)
    dy = torch.randn(TOKENS, HIDDEN, generator=gen).to(dtype)
    results = []
    for module in (liger, stock):
        x_leaf, w_leaf = x.clone().requires_grad_(), weights.clone().requires_grad_()
        out = module(x_leaf, index, w_leaf)
        out.backward(dy)
        grads = (x_leaf.grad, module.gate_up_proj.grad, module.down_proj.grad, w_leaf.grad)
        results.append((out, *grads))
    names = ("output", "grad_hidden_states", "grad_gate_up_proj", "grad_down_proj", "grad_top_k_weights")
    for name, got, want in zip(names, *results):
        assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
        _close(got.detach().float(), want.detach().float(), dtype, name)
    # The expert no token chose: no gradient.
    assert not liger.gate_up_proj.grad[4].any() and not liger.down_proj.grad[4].any()


def test_liger_experts_take_batched_tokens():
    config, _ = _qwen3()
    liger = LigerExperts(config)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in liger.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    x = torch.randn(2, 7, HIDDEN, generator=gen)
    index = torch.randint(0, EXPERTS, (2, 7, TOP_K), generator=gen)
    weights = torch.rand(2, 7, TOP_K, generator=gen)
    flat = liger(x.reshape(14, HIDDEN), index.reshape(14, TOP_K), weights.reshape(14, TOP_K))
    torch.testing.assert_close(liger(x, index, weights), flat.view(2, 7, HIDDEN))


def test_liger_experts_refuse_other_activations():
    config, _ = _qwen3()
    config.hidden_act = "gelu"
    with pytest.raises(ValueError, match="hidden_act must be one of"):
        LigerExperts(config)


@pytest.mark.parametrize("flag", ("1", "0"))
def test_patched_experts_run_fused_moe_where_a_backend_serves_it(monkeypatch, flag):
    """The transformers patch's experts (`layers.experts_class`) take the fused_moe op where a vendor
    backend serves it and the flag is on (else the stock forward): equal to stock either way."""
    from liger_core import registry
    from liger_core.transformers import layers

    monkeypatch.setenv(layers.FUSED_MOE_ENV, flag)
    config, _ = _qwen3()
    config._experts_implementation = "grouped_mm"  # transformers' default, the one the fused op stands in for
    gen = torch.Generator().manual_seed(2)
    stock = Qwen3MoeExperts(config)
    with torch.no_grad():
        stock.gate_up_proj.copy_(torch.randn(stock.gate_up_proj.shape, generator=gen) * HIDDEN**-0.5)
        stock.down_proj.copy_(torch.randn(stock.down_proj.shape, generator=gen) * INTERMEDIATE**-0.5)
    patched = layers.experts_class(Qwen3MoeExperts)(config)
    patched.load_state_dict(stock.state_dict())
    x = torch.randn(TOKENS, HIDDEN, generator=gen)
    index, weights = _routing(gen, torch.float32)

    reason = layers.fused_moe_reason(patched, x)
    vendor = registry.serving("fused_moe", "cpu").backend not in (None, registry.REFERENCE)
    if flag == "0":
        assert reason == "LIGER_FUSED_MOE=0"
    elif vendor:
        assert reason is None
    else:
        assert reason == "no vendor backend serves fused_moe here"
    results = []
    for module in (patched, stock):
        x_leaf = x.clone().requires_grad_()
        out = module(x_leaf, index, weights)
        out.backward(torch.ones_like(out))
        results.append((out, x_leaf.grad, module.gate_up_proj.grad, module.down_proj.grad))
    for name, got, want in zip(("output", "grad_x", "grad_gate_up", "grad_down"), *results):
        _close(got.detach(), want.detach(), torch.float32, name)


# -- Llama 4: the router scales each token before its experts -------------------------------------


def _graph_has(out: torch.Tensor, fragment: str) -> bool:
    """Whether ``out``'s autograd graph has a node whose name contains ``fragment``."""
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if fragment in type(node).__name__:
            return True
        todo.extend(next_node for next_node, _ in node.next_functions)
    return False


@pytest.mark.parametrize("flag", ("1", "0"))
@pytest.mark.parametrize("top_k", (1, 2))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("float32", "bfloat16"))
def test_llama4_moe_block_equals_transformers(monkeypatch, dtype, top_k, flag):
    """`layers.scaled_input_moe_class` (Llama 4's MoE block, experts stored (E, H, 2I) and (E, I, H))
    against transformers' ``Llama4TextMoe`` on the same weights: output, router logits and every
    gradient (hidden states, router, both expert weights, shared expert). Where a vendor backend
    serves fused_moe and the flag is on, the fused op runs (its node in the graph); otherwise the
    stock block, bit for bit. Neither warns."""
    from transformers import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import Llama4TextMoe

    from liger_core import registry
    from liger_core.transformers import layers
    from liger_core.transformers.layers import LigerStockFallbackWarning

    monkeypatch.setenv(layers.FUSED_MOE_ENV, flag)
    config = Llama4TextConfig(
        hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, intermediate_size_mlp=2 * INTERMEDIATE,
        num_local_experts=EXPERTS, num_experts_per_tok=top_k,
    )  # fmt: skip
    gen = torch.Generator().manual_seed(3)
    stock = Llama4TextMoe(config)
    with torch.no_grad():
        for name, p in stock.named_parameters():
            fan_in = INTERMEDIATE if "down_proj" in name else HIDDEN
            p.copy_(torch.randn(p.shape, generator=gen) * fan_in**-0.5)
    stock.to(dtype)
    liger = layers.scaled_input_moe_class(Llama4TextMoe)(config).to(dtype)
    liger.load_state_dict(stock.state_dict())
    assert liger._liger_fallback is None

    x = torch.randn(2, TOKENS, HIDDEN, generator=gen).to(dtype)  # (batch, seq, hidden), as the layer passes it
    dy = torch.randn(2 * TOKENS, HIDDEN, generator=gen).to(dtype)
    dlogits = torch.randn(2 * TOKENS, EXPERTS, generator=gen).to(dtype)
    fused = flag == "1" and registry.serving("fused_moe", "cpu").backend not in (None, registry.REFERENCE)
    results = []
    for module in (liger, stock):
        x_leaf = x.clone().requires_grad_()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out, logits = module(x_leaf)
        fallbacks = [w for w in caught if w.category is LigerStockFallbackWarning]
        if module is liger:
            assert _graph_has(out, "FusedMoE") == fused
            assert fallbacks == [], [str(w.message) for w in fallbacks]
        torch.autograd.backward((out, logits), (dy, dlogits))
        grads = {name: p.grad for name, p in module.named_parameters()}
        results.append({"output": out, "router_logits": logits, "grad_hidden_states": x_leaf.grad, **grads})
    got, want = results
    assert got.keys() == want.keys() and len(got) == 9
    if not fused:
        assert all(torch.equal(got[name], want[name]) for name in want), "not the stock computation"
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        _close(got[name].detach().float(), want[name].detach().float(), dtype, name)


# -- clamped SwiGLU experts: GPT-OSS (biased, interleaved gate/up, transposed) and DeepSeek-V4 ------


def _on_eighths(t: torch.Tensor, gen: torch.Generator, low: int, high: int, scale: float) -> None:
    with torch.no_grad():
        t.copy_(torch.randint(low, high, t.shape, generator=gen) * scale)


def _gpt_oss_experts(gen: torch.Generator, implementation: str):
    require_family("gpt_oss")
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    config = GptOssConfig(
        hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_local_experts=EXPERTS, num_experts_per_tok=TOP_K,
        swiglu_limit=0.9375,
    )  # fmt: skip
    config._experts_implementation = implementation
    stock = GptOssExperts(config)
    _on_eighths(stock.gate_up_proj_bias, gen, -4, 5, 0.125)
    with torch.no_grad():
        stock.down_proj_bias.copy_(torch.randn(stock.down_proj_bias.shape, generator=gen) * 0.5)

    def gate_and_up(x: torch.Tensor, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        h = x @ stock.gate_up_proj[e].float() + stock.gate_up_proj_bias[e].float()
        return h[:, 0::2], h[:, 1::2]

    return config, GptOssExperts, stock, "gpt_oss", gate_and_up


def _deepseek_v4_experts(gen: torch.Generator, implementation: str):
    require_family("deepseek_v4")
    from transformers import DeepseekV4Config
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Experts

    config = DeepseekV4Config(
        hidden_size=HIDDEN, moe_intermediate_size=INTERMEDIATE, n_routed_experts=EXPERTS, num_experts_per_tok=TOP_K,
        swiglu_limit=0.9375,
    )  # fmt: skip
    config._experts_implementation = implementation
    stock = DeepseekV4Experts(config)

    def gate_and_up(x: torch.Tensor, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (x @ stock.gate_up_proj[e].float().t()).chunk(2, dim=-1)

    return config, DeepseekV4Experts, stock, "deepseek_v4", gate_and_up


@pytest.mark.parametrize("flag", ("1", "0"))
@pytest.mark.parametrize("implementation", ("eager", "grouped_mm"))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("float32", "bfloat16"))
@pytest.mark.parametrize("family", (_gpt_oss_experts, _deepseek_v4_experts), ids=("gpt_oss", "deepseek_v4"))
def test_clamped_experts_equal_transformers(monkeypatch, family, dtype, implementation, flag):
    """`layers.clamped_experts_class` against transformers' own ``GptOssExperts`` and
    ``DeepseekV4Experts`` (each one's eager loop and grouped-GEMM implementation) on the same
    weights: output and the gradients of the hidden states, the weights, GPT-OSS's biases and the
    routing weights. The gate-up projection's inputs are on a 1/8 grid (tokens in {-1, 0, 1}), so
    gate and up are exact in bf16 on both sides and a limit of 0.9375 clamps the same elements;
    where a vendor backend serves the op, the flag is on and the implementation is grouped_mm
    (transformers' default), the fused op runs (its node in the graph), else the stock forward,
    never a warning."""
    from liger_core import registry
    from liger_core.transformers import layers
    from liger_core.transformers.layers import LigerStockFallbackWarning

    monkeypatch.setenv(layers.FUSED_MOE_ENV, flag)
    gen = torch.Generator().manual_seed(4)
    config, stock_class, stock, layout, gate_and_up = family(gen, implementation)
    _on_eighths(stock.gate_up_proj, gen, -2, 3, 0.125)
    with torch.no_grad():
        stock.down_proj.copy_(torch.randn(stock.down_proj.shape, generator=gen) * INTERMEDIATE**-0.5)
    stock.to(dtype)
    liger = layers.clamped_experts_class(stock_class, layout)(config).to(dtype)
    liger.load_state_dict(stock.state_dict())
    assert liger._liger_fallback is None

    x = torch.randint(-1, 2, (TOKENS, HIDDEN), generator=gen).to(dtype)
    # A top-k of router logits, softmax over those k, in the experts' dtype; expert 4 unused.
    logits = torch.randn(TOKENS, EXPERTS, generator=gen)
    logits[:, 4] = -1e4
    top, index = torch.topk(logits, TOP_K, dim=-1)
    weights = torch.softmax(top, dim=1).to(dtype)
    dy = torch.randn(TOKENS, HIDDEN, generator=gen).to(dtype)
    # The fused op stands in for transformers' default grouped_mm only; eager runs stock.
    fused = flag == "1" and implementation == "grouped_mm" and registry.vendor_serves("fused_moe_clamped_swiglu", "cpu")
    # The eager experts by keyword, under each stock class's own names (GPT-OSS: router_indices,
    # routing_weights); transformers' grouped_mm wrapper takes them by position only, as the models pass them.
    names = list(inspect.signature(stock_class.forward).parameters)[1:4] if implementation == "eager" else None
    results = []
    for module in (liger, stock):
        x_leaf, w_leaf = x.clone().requires_grad_(), weights.clone().requires_grad_()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            routed = (x_leaf, index, w_leaf)
            out = module(**dict(zip(names, routed, strict=True))) if names else module(*routed)
        if module is liger:
            assert _graph_has(out, "FusedMoEClampedSwiGLU") == fused
            assert [w for w in caught if w.category is LigerStockFallbackWarning] == []
        out.backward(dy)
        grads = {name: p.grad for name, p in module.named_parameters()}
        results.append({"output": out, "grad_hidden_states": x_leaf.grad, "grad_routing_weights": w_leaf.grad, **grads})
    got, want = results
    assert got.keys() == want.keys() and len(got) == (7 if layout == "gpt_oss" else 5)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        _close(got[name].detach().float(), want[name].detach().float(), dtype, name)
    # The clamps cut (expert 0's gate and up on every token): some gates above the limit, some up
    # values outside it, whose gradients both sides zero.
    with torch.no_grad():
        gate, up = gate_and_up(x.float(), 0)
    assert (gate > config.swiglu_limit).any() and (up.abs() > config.swiglu_limit).any()
    unused = [p.grad[4] for name, p in liger.named_parameters()]
    assert not any(g.any() for g in unused)


# -- the stock computation where the fused op does not run (issue 37, item 5) ---------------------


def _experts_of_every_family() -> list:
    """(model type, experts class name, Liger class factory) for every family whose experts the
    patch swaps (`experts_class` and `clamped_experts_class`)."""
    from liger_core.transformers import layers
    from liger_core.transformers.monkey_patch import FAMILIES

    found, seen = [], set()
    for model_type, fam in FAMILIES.items():
        named = [(name, layers.experts_class) for name in fam.experts]
        named += [
            (name, lambda base, layout=layout: layers.clamped_experts_class(base, layout))
            for name, layout in fam.clamped_experts
        ]
        for name, make in named:
            if name not in seen:
                seen.add(name)
                found.append(pytest.param(model_type, name, make, id=f"{model_type}-{name}"))
    return found


def _stock_experts(model_type: str, name: str, implementation: str):
    """transformers' own experts module ``name`` of ``model_type``'s tiny config (hf_models), weights
    drawn, the experts implementation chosen as ``from_pretrained(experts_implementation=...)`` sets it."""
    from hf_models import SIZES, mini_config

    from liger_core.transformers.monkey_patch import FAMILIES, _modeling

    require_family(model_type)
    stock_cls = getattr(_modeling(model_type, FAMILIES[model_type]), name, None)
    if stock_cls is None:
        pytest.skip(f"this transformers has no {name}")
    config = mini_config(model_type, SIZES["tiny"]).get_text_config()
    config.hidden_act = "silu"  # every real checkpoint's
    config._experts_implementation = implementation
    gen = torch.Generator().manual_seed(5)
    stock = stock_cls(config)
    with torch.no_grad():
        for p in stock.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return config, stock_cls, stock, gen


@pytest.mark.parametrize("flag", ("1", "0"))
@pytest.mark.parametrize("implementation", ("eager", "batched_mm", "grouped_mm"))
@pytest.mark.parametrize(("model_type", "name", "make"), _experts_of_every_family())
def test_patched_experts_run_stock_unless_the_fused_op_runs(monkeypatch, model_type, name, make, implementation, flag):
    """Every patched experts class runs the fused op only for transformers' default experts
    implementation (``grouped_mm``), where a vendor backend serves it and LIGER_FUSED_MOE is not 0.
    Everywhere else it runs the stock forward: the chosen implementation's own function is called
    (spied in transformers' experts registry) and the output is bit for bit stock's."""
    from transformers.integrations import moe as hf_moe

    from liger_core import registry
    from liger_core.transformers import layers

    monkeypatch.setenv(layers.FUSED_MOE_ENV, flag)
    config, stock_cls, stock, gen = _stock_experts(model_type, name, implementation)
    liger_cls = make(stock_cls)
    liger = liger_cls(config)
    liger.load_state_dict(stock.state_dict())
    assert liger._liger_fallback is None

    calls = []
    mapping = hf_moe.ALL_EXPERTS_FUNCTIONS._global_mapping
    for impl in ("batched_mm", "grouped_mm"):
        if impl in mapping:

            def spy(*args, _impl=impl, _fn=mapping[impl], **kwargs):
                calls.append(_impl)
                return _fn(*args, **kwargs)

            monkeypatch.setitem(mapping, impl, spy)

    n_experts = stock.gate_up_proj.shape[0]
    hidden = config.hidden_size
    x = torch.randn(TOKENS, hidden, generator=gen)
    index = torch.stack([torch.randperm(n_experts, generator=gen)[:TOP_K] for _ in range(TOKENS)])
    weights = torch.softmax(torch.randn(TOKENS, TOP_K, generator=gen), -1)

    op = "fused_moe_clamped_swiglu" if getattr(liger_cls, "_liger_clamped", None) else "fused_moe"
    fused = flag == "1" and implementation == "grouped_mm" and registry.vendor_serves(op, "cpu")
    x_leaf = x.clone().requires_grad_()
    got = liger(x_leaf, index, weights)
    assert _graph_has(got, "FusedMoE") == fused
    assert calls == ([] if fused or implementation == "eager" else [implementation])
    calls.clear()
    want = stock(x, index, weights)
    if fused:
        _close(got.detach(), want.detach(), torch.float32, "output")
    else:
        assert torch.equal(got, want)


def test_explicit_grouped_mm_cannot_be_told_from_the_default(tmp_path):
    """Why an explicit ``experts_implementation="grouped_mm"`` takes the fused op as the default does
    (`layers.FUSED_STANDS_IN_FOR`): transformers keeps no record of who chose it. A Mixtral built with it
    left unset, given in the config, given to ``from_config`` and ``from_pretrained``, or set back by
    ``set_experts_implementation`` after another choice holds the same config state and the same model
    and experts attributes, so `fused_moe_reason` answers the same for every one. Should a transformers
    release start recording the user's choice, this fails: an explicit "grouped_mm" can be honoured then."""
    from transformers import AutoModelForCausalLM, MixtralConfig, MixtralForCausalLM

    from liger_core.transformers import MODEL_TYPE_TO_APPLY_LIGER_FN, layers

    MODEL_TYPE_TO_APPLY_LIGER_FN["mixtral"]()  # reverted after the test (conftest)

    def config(**kwargs):
        return MixtralConfig(
            vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=2, hidden_act="silu", **kwargs,
        )  # fmt: skip

    MixtralForCausalLM(config()).save_pretrained(tmp_path)
    switched_back = MixtralForCausalLM(config())
    switched_back.set_experts_implementation("eager")
    switched_back.set_experts_implementation("grouped_mm")
    # (how the choice was made, the model given it, the model built the same way with it left unset)
    pairs = (
        ("config", MixtralForCausalLM(config(experts_implementation="grouped_mm")), MixtralForCausalLM(config())),
        (
            "from_config",
            AutoModelForCausalLM.from_config(config(), experts_implementation="grouped_mm"),
            AutoModelForCausalLM.from_config(config()),
        ),
        (
            "from_pretrained",
            MixtralForCausalLM.from_pretrained(tmp_path, experts_implementation="grouped_mm"),
            MixtralForCausalLM.from_pretrained(tmp_path),
        ),
        ("set_experts_implementation", switched_back, MixtralForCausalLM(config())),
    )
    x = torch.zeros(3, 32)
    for how, chosen, defaulted in pairs:
        experts, want = chosen.model.layers[0].mlp.experts, defaulted.model.layers[0].mlp.experts
        assert type(experts).__name__ == "LigerMixtralExperts" and type(experts)._liger_dispatches, how
        assert chosen.config._experts_implementation == "grouped_mm", how
        assert vars(chosen.config) == vars(defaulted.config), how
        assert vars(chosen).keys() == vars(defaulted).keys(), how
        plain = ({k: v for k, v in vars(m).items() if not isinstance(v, dict)} for m in (experts, want))
        assert next(plain) == next(plain), how  # every attribute but the module/parameter/buffer tables
        assert layers.experts_choice_reason(experts) is None, how
        assert layers.fused_moe_reason(experts, x) == layers.fused_moe_reason(want, x), how


@pytest.mark.parametrize("flag", ("1", "0"))
@pytest.mark.parametrize("model_type", ("mixtral", "qwen3_moe"))
def test_patched_moe_model_compiles_fullgraph(monkeypatch, model_type, flag):
    """A tiny patched SiLU Mixtral / Qwen3-MoE compiles with ``fullgraph=True`` (transformers'
    test_generate_compile_model_forward_fullgraph compiles its forward so), with the fused op
    (where a vendor backend serves it) and without: logits equal the uncompiled patched model's.
    The experts module alone compiles too on a registry not yet loaded (its lookup is a constant)."""
    import transformers
    from hf_models import SIZES, batches, build

    from liger_core import registry
    from liger_core.transformers import MODEL_TYPE_TO_APPLY_LIGER_FN

    def compiled_logits(model, batch):
        with torch.no_grad():
            want = model(**batch).logits  # eager first, as generate's warm-up: transformers' own hooks install
            return want, torch.compile(model, fullgraph=True, backend="eager")(**batch).logits

    # The stock model first (patches are reverted around each test): where it does not compile either
    # (transformers 5.0's grouped_mm experts take bf16 only), the patched model owes no more than stock.
    stock = build(model_type, SIZES["tiny"], torch.float32, "cpu", hidden_act="silu").eval()
    batch = batches(SIZES["tiny"], 1, "cpu", model_type=model_type, config=stock.config)[0]
    batch = {k: v for k, v in batch.items() if k != "labels"}
    try:
        compiled_logits(stock, batch)
        stock_error = None
    except Exception as error:  # noqa: BLE001 - any failure of the stock model's compile
        stock_error = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    torch._dynamo.reset()
    del stock

    monkeypatch.setenv("LIGER_FUSED_MOE", flag)
    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]()
    try:
        model = build(model_type, SIZES["tiny"], torch.float32, "cpu", hidden_act="silu").eval()
        try:
            want, got = compiled_logits(model, batch)
        except Exception:
            if stock_error is not None:
                pytest.skip(
                    f"stock {model_type} does not compile with fullgraph=True on transformers "
                    f"{transformers.__version__} either ({stock_error})"
                )
            raise
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        with torch.no_grad():
            experts = model.model.layers[0].mlp.experts
            assert type(experts).__name__.startswith("Liger")
            x = torch.randn(TOKENS, model.config.hidden_size)
            index = torch.randint(0, experts.gate_up_proj.shape[0], (TOKENS, TOP_K))
            weights = torch.softmax(torch.randn(TOKENS, TOP_K), -1)
            want = experts(x, index, weights)
            registry.reset()
            torch._dynamo.reset()
            got = torch.compile(experts, fullgraph=True, backend="eager")(x, index, weights)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    finally:
        from liger_core.transformers import revert_liger_kernel_patches

        revert_liger_kernel_patches()
        torch._dynamo.reset()
