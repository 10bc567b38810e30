"""Tests of the switches other projects offer (transformers' ``use_kernels``/``kernelize`` through the
``kernels`` library, TRL's ``model_init_kwargs``, axolotl's plugins), each against that project's own
code. The ``hf-kernels`` nox session installs them and sets ``LIGER_FRAMEWORK_TESTS=1``, which makes a
missing package a failure; elsewhere (the ``core`` and ``hf-*`` sessions, which lack ``kernels``) this
directory is not collected.
"""

from __future__ import annotations

import importlib.util
import os
import sys

REQUIRED = ("transformers", "kernels")

if os.environ.get("LIGER_FRAMEWORK_TESTS") != "1" and any(importlib.util.find_spec(m) is None for m in REQUIRED):
    collect_ignore_glob = ["test_*.py"]
else:
    import pytest
    import torch

    sys.path.insert(0, os.path.dirname(__file__))  # tiny.py
    # Tiny models gain nothing from threads; OpenMP spinning slows a busy machine down.
    torch.set_num_threads(1)

    @pytest.fixture(autouse=True)
    def _revert_patches():
        """Each test starts and ends with stock transformers classes (the axolotl plugin patches them)."""
        from liger_core.transformers import revert_liger_kernel_patches

        revert_liger_kernel_patches()
        yield
        revert_liger_kernel_patches()
