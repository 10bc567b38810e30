"""The stock-vs-patched diff of tests/upstream/run_transformers_modeling.py on JUnit reports."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

RUNNER = Path(__file__).parent / "upstream" / "run_transformers_modeling.py"
_spec = importlib.util.spec_from_file_location("run_transformers_modeling", RUNNER)
runner = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = runner  # dataclasses look their module up
_spec.loader.exec_module(runner)

_XML = """<?xml version="1.0"?><testsuites><testsuite>
<testcase classname="tests.models.m.test_m.MTest" name="test_a"/>
<testcase classname="tests.models.m.test_m.MTest" name="test_b">{b}</testcase>
<testcase classname="tests.models.m.test_m.MTest" name="test_c"><skipped message="no gpu"/></testcase>
</testsuite></testsuites>"""


def _run(tmp_path: Path, name: str, b: str):
    path = tmp_path / name
    path.write_text(_XML.format(b=b))
    return runner._junit(path)


def test_a_test_passing_stock_and_failing_patched_is_a_regression(tmp_path):
    stock = _run(tmp_path, "stock.xml", "")
    patched = _run(tmp_path, "patched.xml", '<failure message="AssertionError: router_logits not found">tb</failure>')
    assert stock.outcomes == {"MTest::test_a": "passed", "MTest::test_b": "passed", "MTest::test_c": "skipped"}
    lines, regressions = runner.compare("m", stock, patched)
    assert regressions == 1
    assert "| `MTest::test_b` | passed | failed | AssertionError: router_logits not found |" in lines
    assert "| patched | 1 / 1 / 1 | 0 |" in lines


def test_same_outcomes_are_no_regression(tmp_path):
    stock = _run(tmp_path, "stock.xml", '<error message="boom"/>')
    patched = _run(tmp_path, "patched.xml", '<failure message="boom"/>')
    lines, regressions = runner.compare("m", stock, patched)
    assert regressions == 0 and "Every test has the same outcome stock and patched." in lines
