"""Every distribution carries the repository's LICENSE (a copy per package, named by
``license-files``), and the build session's archive check notices a wheel or sdist without it."""

from __future__ import annotations

import dataclasses
import shutil
import tarfile
import zipfile
from pathlib import Path

import liger_ci


def test_every_package_carries_the_licence() -> None:
    assert (liger_ci.ROOT / "LICENSE").is_file()
    for pkg in liger_ci.packages().values():
        assert liger_ci.licence_problems(pkg) == [], pkg.name


def test_a_missing_or_stale_licence_copy_is_caught(tmp_path: Path) -> None:
    pkg = liger_ci.packages()["liger-core"]
    moved = dataclasses.replace(pkg, path=tmp_path / "liger-core")
    moved.path.mkdir()
    shutil.copy(pkg.path / "pyproject.toml", moved.path)
    (tmp_path / "LICENSE").write_text((liger_ci.ROOT / "LICENSE").read_text())
    assert "not a copy of the root LICENSE" in liger_ci.licence_problems(moved, tmp_path)[0]  # no copy
    (moved.path / "LICENSE").write_text("another licence\n")
    assert "not a copy of the root LICENSE" in liger_ci.licence_problems(moved, tmp_path)[0]  # a stale one
    (moved.path / "LICENSE").write_text((liger_ci.ROOT / "LICENSE").read_text())
    assert liger_ci.licence_problems(moved, tmp_path) == []


def _archives(tmp_path: Path, with_licence: bool) -> tuple[Path, Path]:
    wheel, sdist = tmp_path / "pkg-1.0-py3-none-any.whl", tmp_path / "pkg-1.0.tar.gz"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/__init__.py", "")
        if with_licence:
            zf.writestr("pkg-1.0.dist-info/licenses/LICENSE", "BSD")
    src = tmp_path / "pkg-1.0"
    src.mkdir()
    (src / "pyproject.toml").write_text("")
    if with_licence:
        (src / "LICENSE").write_text("BSD")
    with tarfile.open(sdist, "w:gz") as tf:
        tf.add(src, arcname="pkg-1.0")
    return wheel, sdist


def test_archives_without_the_licence_are_caught(tmp_path: Path) -> None:
    (tmp_path / "with").mkdir()
    (tmp_path / "without").mkdir()
    assert liger_ci.missing_licence(*_archives(tmp_path / "with", True)) == []
    assert len(liger_ci.missing_licence(*_archives(tmp_path / "without", False))) == 2
