"""A pytest plugin for running another project's test suite with a Liger patch applied first.

Loaded with ``-p liger_upstream_plugin`` (this folder on ``PYTHONPATH``) by
`run_transformers_modeling`. At ``pytest_configure``, before any test module is imported or any
model built, it applies ``apply_liger_kernel_to_<family>()`` for the family that
``LIGER_UPSTREAM_FAMILY`` names (unset or empty: the stock run, nothing patched). So the
transformers tests build their models from the patched classes, as a user's patched script does.

``LIGER_UPSTREAM_HIDDEN_ACT`` (optional) sets the ``hidden_act`` every model tester of the run
builds its config with (transformers' testers default to gelu; real checkpoints of the MoE
families use silu, which takes other code paths in the patched experts). It applies to stock and
patched runs alike.
"""

from __future__ import annotations

import functools
import inspect
import os

import pytest

FAMILY_ENV = "LIGER_UPSTREAM_FAMILY"
HIDDEN_ACT_ENV = "LIGER_UPSTREAM_HIDDEN_ACT"


def pytest_configure(config: pytest.Config) -> None:
    family = os.environ.get(FAMILY_ENV, "").strip()
    config.stash[_applied] = family or None
    if family:
        import liger_core.transformers as lt

        apply = getattr(lt, f"apply_liger_kernel_to_{family}", None)
        if apply is None:
            raise pytest.UsageError(f"{FAMILY_ENV}={family!r}: liger_core has no apply_liger_kernel_to_{family}")
        apply()


_applied = pytest.StashKey[object]()


def pytest_report_header(config: pytest.Config) -> str:
    family = config.stash.get(_applied, None)
    act = os.environ.get(HIDDEN_ACT_ENV) or "the testers' default"
    return f"liger upstream run: {'patched: ' + family if family else 'stock'}; hidden_act: {act}"


def _force_hidden_act(tester: type, act: str) -> None:
    init = tester.__init__
    if getattr(init, "_liger_hidden_act", None) == act or "hidden_act" not in inspect.signature(init).parameters:
        return

    @functools.wraps(init)
    def wrapped(self, *args, **kwargs):
        kwargs["hidden_act"] = act
        init(self, *args, **kwargs)

    wrapped._liger_hidden_act = act
    tester.__init__ = wrapped


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    act = os.environ.get(HIDDEN_ACT_ENV, "").strip()
    if not act:
        return
    for item in items:
        tester = getattr(getattr(item, "cls", None), "model_tester_class", None)
        if isinstance(tester, type):
            _force_hidden_act(tester, act)
