"""The op declarations (`liger_core.op`, ``liger_core/ops/<op>.py``): every declaration is
complete and consistent, and the public entry points agree with it."""

from __future__ import annotations

import inspect

import pytest
import torch

from liger_core import functional
from liger_core.interface import CATALOGUE
from liger_core.op import BadInput, Op, bad, on_other_device, sample, set_item
from liger_core.ops import rms_norm

OPS = list(CATALOGUE)


def test_catalogue_keys_are_the_contracts_names():
    assert all(name == op.name == op.reference.__name__ for name, op in CATALOGUE.items())
    assert all(isinstance(op, Op) for op in CATALOGUE.values())


@pytest.mark.parametrize("name", OPS)
def test_declaration_is_consistent(name):
    op = CATALOGUE[name]
    params = list(op.signature.parameters)
    assert op.doc, "the contract needs its docstring"
    assert set(op.grads) <= set(params), "grads must name contract parameters"
    assert not set(op.no_grad_outputs) - set(op.outputs)
    # math takes every contract argument positionally, in order.
    assert len(inspect.signature(op.math).parameters) == len(params)
    samples = list(op.samples())
    ids = [s.id for s in samples]
    assert len(samples) >= 4 and len(set(ids)) == len(ids)
    assert len(op.smoke) >= 2 and len(op.errors) >= 2
    assert len({b.name for b in op.errors}) == len(op.errors)


@pytest.mark.parametrize("name", OPS)
def test_samples_build_contract_arguments_the_reference_accepts(name):
    op = CATALOGUE[name]
    for s in [*op.samples(), op.error_sample, *(x.with_params(dtype=torch.float32) for x in op.smoke)]:
        args = op.bind(s.args("cpu"))
        assert list(args) == list(op.signature.parameters)
        if not s.forward_only:
            op.reference(*args.values())  # valid arguments: no error


@pytest.mark.parametrize("name", OPS)
def test_every_bad_input_is_rejected_by_the_reference(name):
    op = CATALOGUE[name]
    for b in op.errors:
        args = op.bind(b.apply(op.error_sample.args("cpu")))
        with pytest.raises(b.error, match=b.match):
            op.reference(*args.values())


@pytest.mark.parametrize("name", OPS)
def test_functional_entry_point_has_the_contract_signature(name):
    fn = getattr(functional, f"liger_{name}")

    def shape(sig):
        return [(p.name, p.kind, p.default) for p in sig.parameters.values()]

    got = shape(inspect.signature(fn))
    if name.startswith("fused_linear_"):
        # The fused linear losses take one more argument, for the call alone: their chunk budget.
        assert got[-1] == ("memory_budget", inspect.Parameter.KEYWORD_ONLY, None)
        got = got[:-1]
    assert got == shape(CATALOGUE[name].signature)
    assert f"{name}" in (fn.__doc__ or ""), "the functional's docstring points at its contract"


def test_sample_ids_and_params():
    s = sample(rms_norm.args, shape=(3, 5), dtype=torch.bfloat16, grad_scalar=-2.0, frozen=("weight",))
    assert s.id == "shape=3x5-dtype=bfloat16-dy=-2-frozen=weight"
    assert s.with_params(dtype=torch.float32).params == {"shape": (3, 5), "dtype": torch.float32}
    assert s.args("cpu")["x"].dtype == torch.bfloat16
    assert sample(rms_norm.args).id == "default"


def test_bad_input_changes():
    base = {"x": torch.ones(2, 3), "eps": 1e-6, "t": torch.arange(3)}
    changed = bad("b", ValueError, "m", x=lambda x: x[:1], eps=-1, t=set_item(1, 7)).apply(base)
    assert changed["x"].shape == (1, 3) and changed["eps"] == -1 and changed["t"].tolist() == [0, 7, 2]
    assert base["t"].tolist() == [0, 1, 2], "set_item changes a copy"
    assert on_other_device(torch.ones(1)).device.type == "meta"
    assert isinstance(BadInput("n", TypeError, "m", {"dtype": torch.int32}).apply({})["dtype"], torch.dtype)


def test_bind_names_the_op_and_fills_defaults():
    op = CATALOGUE["rms_norm"]
    assert op.bind({"x": 1})["casting_mode"] == "llama"
    with pytest.raises(TypeError, match="rms_norm: .*bogus"):
        op.bind({"x": 1, "bogus": 2})
