"""Fixtures for the CI configuration's tests: the matrix, the nox sessions, the workflows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "ci"))

import liger_ci  # noqa: E402


@pytest.fixture(scope="session")
def matrix() -> dict:
    return liger_ci.load_matrix()


@pytest.fixture(scope="session")
def sessions() -> list[dict]:
    return liger_ci.nox_sessions()


@pytest.fixture(scope="session")
def default_sessions() -> list[dict]:
    return liger_ci.nox_sessions(default_only=True)


@pytest.fixture(scope="session")
def workflows() -> dict[str, dict]:
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted((ROOT / ".github" / "workflows").glob("*.yml"))}
