"""Sum the JUnit XML files the nox sessions wrote and print one closing line.

    python ci/junit_summary.py DIR

Prints 'ci: N passed, N failed, N skipped' and exits non-zero when a test failed or
when no test ran at all (an empty run is not a green run).
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def summarize(folder: Path) -> tuple[int, int, int]:
    passed = failed = skipped = 0
    for path in sorted(folder.glob("*.xml")):
        root = ET.parse(path).getroot()
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        for suite in suites:
            tests = int(suite.get("tests", 0))
            bad = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
            skip = int(suite.get("skipped", 0))
            print(f"  {path.stem}: {tests - bad - skip} passed, {bad} failed, {skip} skipped")
            passed, failed, skipped = passed + tests - bad - skip, failed + bad, skipped + skip
    return passed, failed, skipped


def main() -> int:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    passed, failed, skipped = summarize(folder)
    print(f"ci: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    raise SystemExit(main())
