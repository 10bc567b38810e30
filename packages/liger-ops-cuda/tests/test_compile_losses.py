"""The compiled path of the loss kernels without a GPU (`compile_loss_kernels.py`)."""

import subprocess
import sys
from pathlib import Path

import pytest
from compile_sm90 import SKIP, compile_env, skip_reason


def test_loss_kernels_compile_for_h100():
    """The real Triton compiler (not the interpreter) builds a variant of every loss kernel path
    for sm_90a with its bundled ptxas; no GPU needed. `compile_loss_kernels.py --all` does all."""
    script = Path(__file__).with_name("compile_loss_kernels.py")
    env = compile_env(TRITON_DEFAULT_FP_FUSION="1")
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=900)
    if run.returncode == SKIP:
        pytest.skip(skip_reason(run) or "no NVIDIA Triton backend here")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "compiled" in run.stdout
