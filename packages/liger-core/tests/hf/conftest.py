"""The transformers integration's tests: they need transformers (``liger-core[transformers]``).

Without transformers installed (the plain ``core`` session) this directory is not collected;
the ``hf-interpreter`` and ``hf-oldest`` nox sessions install it and run it.

Where ops run: on an accelerator (``cuda``), natively with the vendor backend found there
(installed, or importable from the source tree); on CPU, wherever ``LIGER_BACKEND`` sends them
(``cuda`` with ``TRITON_INTERPRET=1`` in CI: liger-ops-cuda's kernels in the Triton interpreter).
The header of the run says which backend serves each op.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def _have_transformers() -> bool:
    # A real package, not a namespace match of some folder named transformers on sys.path.
    spec = importlib.util.find_spec("transformers")
    return spec is not None and spec.origin not in (None, "namespace")


if not _have_transformers():
    collect_ignore_glob = ["test_*.py"]
else:
    import pytest
    import torch

    sys.path.insert(0, os.path.dirname(__file__))  # hf_models.py, shared by the test modules

    DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
    if DEVICE == "cpu":
        # Tiny models gain nothing from threads, and on a busy machine OpenMP spinning makes the
        # stock runs many times slower.
        torch.set_num_threads(1)

    if DEVICE == "cuda" and importlib.util.find_spec("liger_ops_cuda") is not None:
        # A GPU machine running from the source tree has no entry point: the one way to load it.
        os.environ.setdefault("LIGER_EXTRA_BACKENDS", "liger_ops_cuda")

    def pytest_configure(config):
        config.addinivalue_line("markers", "mid: mid-size convergence runs, for an H100/H200 (LIGER_HF_SIZE=mid)")

    def pytest_report_header(config):
        import transformers

        from liger_core.registry import REGISTRY

        backend = REGISTRY.backend_for_device(DEVICE)
        name = backend.name if backend is not None else "reference"
        served = {op: ("yes" if backend is not None and op in backend.ops else "reference") for op in _OPS}
        return [
            f"transformers {transformers.__version__}, torch {torch.__version__}, device {DEVICE}, "
            f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '')!r}",
            f"liger backend for {DEVICE}: {name}; ops it serves: {served}",
        ]

    _OPS = ("rms_norm", "swiglu", "geglu", "rope", "fused_linear_cross_entropy", "cross_entropy")

    @pytest.fixture(autouse=True)
    def _revert_patches():
        """Each test starts and ends with stock transformers classes."""
        from liger_core.transformers import revert_liger_kernel_patches

        revert_liger_kernel_patches()
        yield
        revert_liger_kernel_patches()

    @pytest.fixture
    def device() -> str:
        return DEVICE
