"""What the README's commands write into a checkout is ignored by git (issue 37 item 7: `liger bench` on a
CPU wrote its 91 result files into ./bench-results/, which showed up as untracked files)."""

from __future__ import annotations

import shutil
import subprocess

import liger_ci
import pytest

WRITTEN_BY_README_COMMANDS = ("bench-results/summary.md", "bench-results/rms_norm/full.json")


@pytest.mark.parametrize("path", WRITTEN_BY_README_COMMANDS)
def test_outputs_of_readme_commands_are_ignored(path: str) -> None:
    if shutil.which("git") is None or not (liger_ci.ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", path], cwd=liger_ci.ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{path} is not ignored by .gitignore: {done.stderr}"
