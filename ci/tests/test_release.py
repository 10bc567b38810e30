"""Release tags, changelog checks, compat's choice of liger-core builds, and a dry run showing
that bumping and tagging one vendor package touches no other package."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import liger_ci
import pytest
from conftest import ROOT


def _git(root: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "ci",
        "GIT_AUTHOR_EMAIL": "ci@example.invalid",
        "GIT_COMMITTER_NAME": "ci",
        "GIT_COMMITTER_EMAIL": "ci@example.invalid",
    }
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True, env=env).stdout


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """The committed repository (git archive HEAD) as a fresh git repository of its own."""
    data = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(tmp_path, filter="data")
    _git(tmp_path, "init", "-q", "-b", "main")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "base")
    return tmp_path


def _released(tree: Path, name: str, fragments: bool = False) -> liger_ci.Package:
    """Make `name`'s changelog releasable as it stands: a heading for its version, no Unreleased,
    and (unless `fragments`) no fragments left, as if they had been compiled."""
    pkg = liger_ci.packages(tree)[name]
    if not fragments:
        for left in liger_ci.unreleased_fragments(pkg):
            (pkg.fragments_dir / left).unlink()
    text = re.sub(r"^#+\s*\[?unreleased\]?\s*$", "", pkg.changelog.read_text(), flags=re.M | re.I)
    if not liger_ci.changelog_has(text, pkg.version):
        text += f"\n## {pkg.version}\n\n- notes\n"
    pkg.changelog.write_text(text)
    return pkg


@pytest.mark.parametrize(
    ("tag", "said"),
    [
        ("liger-ops-ascend-0.1.0", "is not <distribution>-v<version>"),
        ("liger-ops-npu-v0.1.0", "not a package here"),
        ("liger-ops-ascend-v9.9.9", "ascend 9.9.9, but"),
    ],
)
def test_release_refuses_a_bad_tag(tree: Path, tag: str, said: str) -> None:
    _released(tree, "liger-ops-ascend")
    with pytest.raises(liger_ci.CIError, match=re.escape(said)):
        liger_ci.release_check(tag, tree)


def test_release_accepts_the_packages_own_tag(tree: Path) -> None:
    pkg = _released(tree, "liger-ops-ascend")
    assert liger_ci.release_check(f"refs/tags/liger-ops-ascend-v{pkg.version}", tree).name == "liger-ops-ascend"


def test_release_refuses_a_changelog_without_the_version(tree: Path) -> None:
    pkg = _released(tree, "liger-ops-xpu")
    pkg.changelog.write_text(
        re.sub(rf"^#+ .*{re.escape(pkg.version)}.*$", "## 0.0.1", pkg.changelog.read_text(), flags=re.M)
    )
    with pytest.raises(liger_ci.CIError, match="has no heading for"):
        liger_ci.release_check(f"liger-ops-xpu-v{pkg.version}", tree)


def test_release_refuses_notes_left_unreleased(tree: Path) -> None:
    pkg = _released(tree, "liger-ops-cuda")
    pkg.changelog.write_text(pkg.changelog.read_text() + "\n## Unreleased\n\n- more\n")
    with pytest.raises(liger_ci.CIError, match="Unreleased"):
        liger_ci.release_check(f"liger-ops-cuda-v{pkg.version}", tree)
    _released(tree, "liger-ops-cuda")
    (pkg.fragments_dir / "+x.added.md").write_text("x\n")
    with pytest.raises(liger_ci.CIError, match=r"\+x.added.md"):
        liger_ci.release_check(f"liger-ops-cuda-v{pkg.version}", tree)


@pytest.mark.parametrize(
    ("text", "version", "found"),
    [
        ("## 0.3.1 (2026-11-21)\n", "0.3.1", True),
        ("## [0.3.1] - 2026\n", "0.3.1", True),
        ("## 0.3.10\n", "0.3.1", False),
        ("- 0.3.1 fixed\n", "0.3.1", False),
    ],
)
def test_changelog_headings(text: str, version: str, found: bool) -> None:
    assert liger_ci.changelog_has(text, version) is found


def test_compat_builds_the_oldest_allowed_core_from_its_tag(tree: Path) -> None:
    core = liger_ci.packages(tree)["liger-core"]
    old = core.version
    _git(tree, "tag", f"liger-core-v{old}")
    _git(tree, "tag", "liger-core-v0.0.9")  # outside the range below
    liger_ci.bump("liger-core", "0.1.7", tree)
    targets = liger_ci.compat_targets(f">={old},<0.2", tree)
    assert [(t.version, t.ref) for t in targets] == [(old, f"liger-core-v{old}"), ("0.1.7", None)]
    src = liger_ci.export_core(targets[0], tree / "export", tree)
    assert liger_ci.packages(tree)["liger-core"].version == "0.1.7"
    assert liger_ci.read_version((src / "src" / "liger_core" / "__about__.py").read_text()) == old
    assert liger_ci.export_core(targets[1], tree / "unused", tree) == core.path
    # A floor equal to the tree's version and no tag: the tree is the one build (said so).
    assert [t.describe() for t in liger_ci.compat_targets(">=0.1.7", tree)] == ["liger-core 0.1.7 (working tree)"]
    # The floor 0.1.7 is the tree's version: nothing below it to check, nothing to warn about.
    assert liger_ci.floor_gap(">=0.1.7", targets[1]) is None
    assert liger_ci.floor_gap(">=0.1.7,<0.2", liger_ci.CoreSource("0.1.7.0", None)) is None
    assert "no liger-core-v tag below it" in liger_ci.floor_gap(">=0.1.2", targets[1])
    with pytest.raises(liger_ci.CIError, match="no liger-core build"):
        liger_ci.compat_targets(">=0.3", tree)


def _nox(tree: Path, *args: str) -> subprocess.CompletedProcess:
    # A nox of its own in the copy: drop the variables of the nox session running these tests.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOX_", "UV_PYTHON", "UV_PROJECT", "VIRTUAL_ENV"))}
    if env.get("PIP_FIND_LINKS") and not env.get("UV_FIND_LINKS"):
        env["UV_FIND_LINKS"] = env["PIP_FIND_LINKS"]
    return subprocess.run([sys.executable, "-m", "nox", *args], cwd=tree, capture_output=True, text=True, env=env)


def test_dry_run_bump_and_tag_one_vendor_touches_no_other_package(tree: Path) -> None:
    """The release of liger-ops-ascend 0.1.1, start to end, in a copy of the repository."""
    if shutil.which("uv") is None:
        pytest.fail("the build sessions need uv on PATH")
    name = "liger-ops-ascend"
    pkg = liger_ci.packages(tree)[name]
    major, minor, patch = (int(x) for x in re.match(r"(\d+)\.(\d+)\.(\d+)", pkg.version).groups())
    version = f"{major}.{minor}.{patch + 1}"
    (pkg.fragments_dir / "+dry-run.fixed.md").write_text("A fix only Ascend users see.\n")
    _released(tree, name, fragments=True)  # the release PR also moves any hand-written Unreleased notes
    r = _nox(tree, "-s", "bump", "--", name, version)
    assert r.returncode == 0, r.stdout + r.stderr

    changed = _git(tree, "status", "--porcelain", "--untracked-files=all").splitlines()
    paths = [line[3:] for line in changed]
    assert paths and all(p.startswith("packages/liger-ops-ascend/") for p in paths), paths
    assert liger_ci.packages(tree)[name].version == version
    assert "A fix only Ascend users see." in pkg.changelog.read_text()
    assert liger_ci.affected(paths, liger_ci.load_matrix(tree / "ci" / "matrix.toml"), tree) == {name}
    _git(tree, "commit", "-q", "-am", f"{name} {version}")
    _git(tree, "tag", f"{name}-v{version}")

    # Tagging another package at that version is refused: its version did not move.
    r = _nox(tree, "-s", "release", "--", f"liger-ops-cuda-v{version}")
    cuda = liger_ci.packages(tree)["liger-ops-cuda"].version
    assert r.returncode != 0 and f"says {cuda}" in r.stdout + r.stderr
    r = _nox(tree, "-s", "release", "--", f"{name}-v{version}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted(p.name for p in (tree / "dist").iterdir()) == [name]
    built = sorted(p.name for p in (tree / "dist" / name).iterdir())
    assert built == [f"liger_ops_ascend-{version}-py3-none-any.whl", f"liger_ops_ascend-{version}.tar.gz"]
    assert f"smoke: {name} {version}: ok" in r.stdout + r.stderr
