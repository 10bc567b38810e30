"""The backend object and the package metadata that liger-core and pip rely on."""

from __future__ import annotations

import re
from pathlib import Path

from liger_core.backend import validate

from liger_ops_ascend import BACKEND, __version__

PYPROJECT = (Path(__file__).parents[1] / "pyproject.toml").read_text()


def test_backend_is_valid_for_this_core():
    validate(BACKEND)
    assert (BACKEND.name, BACKEND.device_types, BACKEND.interface_version) == ("ascend", ("npu",), "1.3")
    assert (BACKEND.distribution, BACKEND.version) == ("liger-ops-ascend", __version__)
    assert "triton" in BACKEND.runtime()


def test_entry_point_and_dependencies():
    assert 'ascend = "liger_ops_ascend.backend:BACKEND"' in PYPROJECT
    deps = re.search(r"^dependencies = \[(.*)\]$", PYPROJECT, re.MULTILINE).group(1)
    # triton-ascend installs the module `triton`; the `triton` distribution must never join it.
    assert '"triton-ascend>=3.2"' in deps and '"triton>' not in deps and '"triton"' not in deps
    assert '"liger-core>=0.1,<0.2"' in deps and '"pybind11"' in deps
    assert 'npu = ["torch-npu"]' in PYPROJECT
