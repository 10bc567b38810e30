"""The top-level public API: every catalogue op's functional entry point is importable from
``liger_core`` and listed in its ``__all__``."""

from __future__ import annotations

import inspect

import pytest

import liger_core
from liger_core import functional
from liger_core.interface import CATALOGUE


@pytest.mark.parametrize("op", list(CATALOGUE))
def test_every_catalogue_op_has_a_top_level_entry_point(op):
    name = f"liger_{op}"
    assert callable(getattr(functional, name, None)), f"liger_core.functional lacks {name}"
    assert name in functional.__all__, f"{name} is missing from liger_core.functional.__all__"
    assert getattr(liger_core, name, None) is getattr(functional, name), f"liger_core.{name} is not exported"
    assert name in liger_core.__all__


def test_functional_all_lists_every_entry_point():
    defined = sorted(n for n in dir(functional) if n.startswith("liger_") and callable(getattr(functional, n)))
    assert functional.__all__ == defined


@pytest.mark.parametrize("name", functional.__all__)
def test_a_non_tensor_argument_is_a_type_error_naming_it(name):
    fn = getattr(functional, name)
    params = [p for p in inspect.signature(fn).parameters.values() if p.default is p.empty]
    args = [[[1.0, 2.0]] for _ in params]  # a nested list where each tensor belongs
    with pytest.raises(TypeError, match=rf"^\w+: {params[0].name} must be a torch.Tensor\b.*; got (a )?list"):
        fn(*args)


def test_the_fused_linear_memory_budget_is_exported():
    """The budget's context manager is where users look (the top level), and it sets the budget in force."""
    from liger_core import memory_budget

    assert "fused_linear_memory_budget" in liger_core.__all__
    with liger_core.fused_linear_memory_budget("1MiB"):
        assert memory_budget.current_memory_budget(None) == 2**20
