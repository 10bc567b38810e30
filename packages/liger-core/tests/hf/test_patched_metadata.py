"""Every callable a patch installs carries its stock twin's metadata.

transformers' own tests (``test_moe_models_record_router_logits``) read the patched causal-LM
``forward.__annotations__["return"]`` to learn the output class; tools read ``__name__``,
``__qualname__``, ``__module__`` and follow ``__wrapped__`` to the stock function. Checked over every
family's patch (no model is built: the patch alone installs the callables)."""

from __future__ import annotations

import inspect

import pytest
from hf_models import require_family

from liger_core.transformers import MODEL_TYPE_TO_APPLY_LIGER_FN, layers
from liger_core.transformers import monkey_patch as mp

FAMILIES = sorted(MODEL_TYPE_TO_APPLY_LIGER_FN)


def _check(replacement, stock, where: str, *, named_as_stock: bool = True) -> None:
    assert inspect.unwrap(replacement, stop=lambda f: f is stock) is stock, f"{where}: __wrapped__ is not the stock one"
    assert replacement.__wrapped__ is stock, where
    for attr in ("__name__", "__qualname__", "__module__") if named_as_stock else ():
        assert getattr(replacement, attr) == getattr(stock, attr), f"{where}: {attr}"
    stock_annotations = getattr(stock, "__annotations__", {})
    annotations = replacement.__annotations__
    assert {k: v for k, v in annotations.items() if k in stock_annotations} == stock_annotations, where
    assert annotations is not stock_annotations, f"{where}: shares (and could change) the stock annotations"


@pytest.mark.parametrize("model_type", FAMILIES)
def test_every_patched_callable_carries_the_stock_metadata(model_type):
    require_family(model_type)
    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]()
    checked = 0
    for obj, name, _old in list(mp._SAVED.values()):
        new = getattr(obj, name)
        where = f"{getattr(obj, '__name__', obj)}.{name}"
        if isinstance(new, type):
            if not layers.is_liger_class(new):
                continue
            base = layers.stock_class(new)
            # The Liger class keeps its own name (it pickles by it); each method in place of a stock one
            # carries that one's metadata.
            for method, fn in vars(new).items():
                overrides = inspect.isfunction(getattr(base, method, None))
                if inspect.isfunction(fn) and not method.startswith("_liger") and overrides:
                    _check(fn, getattr(base, method), f"{where}.{method}")
                    checked += 1
        elif callable(new):
            stock = getattr(new, "_liger_stock", None)
            if stock is None:  # a plain function patch (fixed_cross_entropy): the saved stock value
                stock = _old
            # Liger's RoPE functions keep a module-level name of their own: attention modules hold them
            # (rotary_fn) and pickle by that name.
            _check(new, stock, where, named_as_stock=not new.__name__.startswith("liger_rope__"))
            checked += 1
    assert checked, f"{model_type}: its patch installed no callable"


def test_patched_causal_lm_forward_keeps_the_return_annotation():
    require_family("mixtral")
    from transformers.models.mixtral import modeling_mixtral

    stock = modeling_mixtral.MixtralForCausalLM.forward
    MODEL_TYPE_TO_APPLY_LIGER_FN["mixtral"]()
    patched = modeling_mixtral.MixtralForCausalLM.forward
    assert patched is not stock
    assert patched.__annotations__["return"] == stock.__annotations__["return"]
    assert "skip_logits" in inspect.signature(patched).parameters
