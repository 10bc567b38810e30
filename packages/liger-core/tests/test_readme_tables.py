"""The README's op and family tables are what liger-core generates now (`docs/readme_tables.py`).

A new op or model family, or a changed op docstring, fails here until the README is regenerated:
``python docs/readme_tables.py``. Needs the repository checkout (the README and the script sit
above the package); a liger-core test run from an sdist has neither.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "docs" / "readme_tables.py"

pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="not a repository checkout (no docs/readme_tables.py)")


@pytest.fixture(scope="module")
def tables():
    spec = importlib.util.spec_from_file_location("readme_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_tables_are_up_to_date(tables):
    stale = tables.stale_tables((ROOT / "README.md").read_text())
    assert stale == [], f"README.md tables out of date: {stale}; run python docs/readme_tables.py"


def test_a_stale_or_missing_table_is_caught(tables):
    text = (ROOT / "README.md").read_text()
    assert "| `rms_norm` | 1.0 |" in text
    assert tables.stale_tables(text.replace("| `rms_norm` | 1.0 |", "| `rms_norm` | 1.1 |")) == ["ops"]
    without_families = tables._block("families").sub("", text)
    with pytest.raises(ValueError, match="families"):
        tables.render(without_families)
