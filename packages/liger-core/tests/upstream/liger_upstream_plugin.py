"""A pytest plugin for running another project's test suite with a Liger patch applied first.

Loaded with ``-p liger_upstream_plugin`` (this folder on ``PYTHONPATH``) by
`run_transformers_modeling`. At ``pytest_configure``, before any test module is imported or any
model built, it applies ``apply_liger_kernel_to_<family>()`` for the family that
``LIGER_UPSTREAM_FAMILY`` names (unset or empty: the stock run, nothing patched). So the
transformers tests build their models from the patched classes, as a user's patched script does.

``LIGER_UPSTREAM_HIDDEN_ACT`` (optional) sets the ``hidden_act`` every model tester of the run
builds its config with (transformers' testers default to gelu; real checkpoints of the MoE
families use silu, which takes other code paths in the patched experts).
``LIGER_UPSTREAM_TESTER_KWARGS`` (optional, a JSON object) overrides more tester arguments, e.g.
``{"intermediate_size": 48}``: the testers' odd sizes (37) make stock's default ``grouped_mm``
experts fail on CPU (torch's CPU grouped_mm wants 16-byte strides), stock and patched alike, which
would hide every difference. Both apply to stock and patched runs alike.
"""

from __future__ import annotations

import functools
import inspect
import json
import os

import pytest

FAMILY_ENV = "LIGER_UPSTREAM_FAMILY"
HIDDEN_ACT_ENV = "LIGER_UPSTREAM_HIDDEN_ACT"
TESTER_KWARGS_ENV = "LIGER_UPSTREAM_TESTER_KWARGS"


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
    return f"liger upstream run: {'patched: ' + family if family else 'stock'}; tester overrides: {_tester_kwargs()}"


def _tester_kwargs() -> dict:
    kwargs = json.loads(os.environ.get(TESTER_KWARGS_ENV) or "{}")
    act = os.environ.get(HIDDEN_ACT_ENV, "").strip()
    if act:
        kwargs["hidden_act"] = act
    return kwargs


def _override(tester: type, overrides: dict) -> None:
    init = tester.__init__
    if getattr(init, "_liger_overrides", None) is not None:
        return
    accepted = {k: v for k, v in overrides.items() if k in inspect.signature(init).parameters}

    @functools.wraps(init)
    def wrapped(self, *args, **kwargs):
        kwargs.update(accepted)
        init(self, *args, **kwargs)

    wrapped._liger_overrides = accepted
    tester.__init__ = wrapped


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    overrides = _tester_kwargs()
    if not overrides:
        return
    for item in items:
        tester = getattr(getattr(item, "cls", None), "model_tester_class", None)
        if isinstance(tester, type):
            _override(tester, overrides)
