"""Installed beside upstream liger-kernel 0.8.5, the drop-in says so at import and refuses to mix.

Builds a clean venv with uv (no torch needed: the check runs before anything else is imported):
upstream's wheel from the package index, then this package's wheel over it, as a user who adds the
drop-in to an environment that has liger-kernel would. ``nox -s hf-dropin`` sets
``LIGER_DROPIN_UPSTREAM=1``, which makes a missing uv or index a failure instead of a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent
UPSTREAM = "liger-kernel==0.8.5"


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        if os.environ.get("LIGER_DROPIN_UPSTREAM") == "1":
            pytest.fail("uv is not on PATH")
        pytest.skip("uv is not on PATH (LIGER_DROPIN_UPSTREAM=1 makes this a failure)")
    return uv


def test_import_beside_liger_kernel_is_a_clear_error(tmp_path):
    uv = _uv()
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PYTHON", "PYTHONPATH")}
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, env=env)
    python = str(venv / "bin" / "python")
    install = [uv, "pip", "install", "-q", "--python", python, "--no-deps"]
    subprocess.run([*install, UPSTREAM], check=True, env=env)
    subprocess.run([*install, str(PACKAGE)], check=True, env=env)
    out = subprocess.run([python, "-c", "import liger_kernel"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.returncode != 0, out.stdout
    said = out.stderr.strip().splitlines()[-1]
    assert said.startswith("liger_kernel.LigerKernelConflictError: both liger-kernel 0.8.5 and liger-kernel-dropin")
    assert "liger-kernel-dropin owns the name" in said
    assert "pip uninstall -y liger-kernel liger-kernel-dropin && pip install liger-kernel-dropin" in said
