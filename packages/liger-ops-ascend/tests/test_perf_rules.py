"""The static check of the kernels against triton-ascend's performance rules (perf_rules.py):
zero findings on this package, and each rule shown to fire on a planted example while staying
quiet on its fixed twin."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from perf_rules import RULES, SRC, Checker, check_package, check_paths, collect, package_paths

README = (Path(__file__).parents[1] / "README.md").read_text()

HEADER = """\
import triton
import triton.language as tl


"""

# rule -> (planted example, its fixed twin, the planted example's flagged line). Lines count from
# the kernel's first line (the decorator).
PLANTED = {
    "ASC001 where": (
        """
        @triton.jit
        def _centre_kernel(X, Y, n_cols, BLOCK: tl.constexpr):
            cols = tl.arange(0, BLOCK)
            mask = cols < n_cols
            x = tl.load(X + cols, mask=mask, other=0.0)
            xc = tl.where(mask, x - tl.sum(x, axis=0) / n_cols, 0.0)
            tl.store(Y + cols, xc * xc, mask=mask)
        """,
        """
        @triton.jit
        def _centre_kernel(X, Y, n_cols, BLOCK: tl.constexpr):
            cols = tl.arange(0, BLOCK)
            mask = cols < n_cols
            x = tl.load(X + cols, mask=mask, other=0.0)
            xc = tl.where(cols.to(tl.float32) < n_cols, x - tl.sum(x, axis=0) / n_cols, 0.0)
            tl.store(Y + cols, xc * xc, mask=mask)
        """,
        6,
    ),
    "ASC001 data": (
        """
        @triton.jit
        def _count_kernel(X, Y, n_cols, BLOCK: tl.constexpr):
            cols = tl.arange(0, BLOCK)
            inside = (cols < n_cols).to(tl.float32)
            tl.store(Y, tl.sum(inside, axis=0))
        """,
        """
        @triton.jit
        def _count_kernel(X, Y, n_cols, BLOCK: tl.constexpr):
            cols = tl.arange(0, BLOCK)
            inside = (cols.to(tl.float32) < n_cols).to(tl.float32)
            tl.store(Y, tl.sum(inside, axis=0))
        """,
        4,
    ),
    "ASC002": (
        """
        @triton.jit
        def _relu_kernel(X, Y, n, BLOCK: tl.constexpr):
            i = tl.arange(0, BLOCK)
            mask = i < tl.minimum(n - tl.program_id(0) * BLOCK, BLOCK)  # an int minimum: no NaN
            x = tl.load(X + i, mask=mask, care_padding=False)
            tl.store(Y + i, tl.maximum(x, 0.0), mask=mask)
        """,
        """
        @triton.jit
        def _relu_kernel(X, Y, n, BLOCK: tl.constexpr):
            i = tl.arange(0, BLOCK)
            mask = i < tl.minimum(n - tl.program_id(0) * BLOCK, BLOCK)  # an int minimum: no NaN
            x = tl.load(X + i, mask=mask, care_padding=False)
            tl.store(Y + i, tl.maximum(x, 0.0, propagate_nan=tl.PropagateNan.ALL), mask=mask)
        """,
        6,
    ),
    "ASC003": (
        """
        @triton.jit
        def _scale_kernel(X, W, Y, n_cols, BLOCK: tl.constexpr):
            cols = tl.arange(0, BLOCK)
            mask = cols < n_cols
            x = tl.load(X + cols, mask=mask, other=0.0)
            w = tl.load(W + cols, mask=mask, other=0.0)
            tl.store(Y + cols, x * w / tl.sum(x, axis=0), mask=mask)
        """,
        """
        @triton.jit
        def _scale_kernel(X, W, Y, n_cols, BLOCK: tl.constexpr):
            cols = tl.arange(0, BLOCK)
            mask = cols < n_cols
            x = tl.load(X + cols, mask=mask, other=0.0)
            w = tl.load(W + cols, mask=mask, care_padding=False)
            tl.store(Y + cols, x * w / tl.sum(x, axis=0), mask=mask)
        """,
        6,
    ),
    "ASC006": (
        """
        @triton.jit
        def _total_kernel(X, Y, n_cols, BLOCK: tl.constexpr):
            cols = tl.arange(0, BLOCK)
            x = tl.load(X + cols, mask=cols < n_cols, care_padding=False)
            tl.store(Y, tl.sum(x, axis=0))
        """,
        """
        @triton.jit
        def _total_kernel(X, Y, n_cols, BLOCK: tl.constexpr):
            cols = tl.arange(0, BLOCK)
            x = tl.load(X + cols, mask=cols < n_cols, other=0.0)
            tl.store(Y, tl.sum(x, axis=0))
        """,
        4,
    ),
    "ASC007": (
        """
        @triton.jit
        def _pick_kernel(X, T, Y, n_rows, BLOCK: tl.constexpr):
            rows = tl.arange(0, BLOCK)
            y = tl.load(T + rows, mask=rows < n_rows, other=0)
            keep = y.to(tl.float32) >= 0.0
            x_y = tl.load(X + rows * 0 + y, mask=keep, care_padding=False)
            tl.store(Y + rows, x_y, mask=keep)
        """,
        """
        @triton.jit
        def _pick_kernel(X, T, Y, n_rows, BLOCK: tl.constexpr):
            rows = tl.arange(0, BLOCK)
            y = tl.load(T + rows, mask=rows < n_rows, other=0)
            keep = y.to(tl.float32) >= 0.0
            x_y = tl.load(X + rows * 0 + y, mask=keep, other=0.0)
            tl.store(Y + rows, x_y, mask=keep)
        """,
        6,
    ),
    "ASC004": (
        """
        @triton.jit
        def _sections_kernel(COS, Y, st, sec0, half, BLOCK: tl.constexpr):
            cols = tl.arange(0, BLOCK)
            col_mask = cols < half
            section = (cols.to(tl.float32) >= sec0).to(tl.int32)  # an fp32 compare: not ASC001
            c = tl.load(COS + section * st + cols, mask=col_mask, care_padding=False)
            tl.store(Y + cols, c, mask=col_mask)
        """,
        """
        @triton.jit
        def _sections_kernel(COS, Y, st, sec0, half, BLOCK: tl.constexpr):
            cols = tl.arange(0, BLOCK)
            col_mask = cols < half
            a = tl.load(COS + cols, mask=col_mask & (cols < sec0), other=0.0)
            b = tl.load(COS + st + cols, mask=col_mask & (cols >= sec0), other=0.0)
            tl.store(Y + cols, a + b, mask=col_mask)
        """,
        6,
    ),
    "ASC005 product": (
        """
        @triton.jit
        def _rows_kernel(X, Y, stride, n_rows, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            row0 = tl.program_id(0) * BLOCK_M
            rows = row0 + tl.arange(0, BLOCK_M)
            cols = tl.arange(0, BLOCK_N)
            mask = (rows < n_rows)[:, None]
            x = tl.load(X + rows[:, None] * stride + cols[None, :], mask=mask, care_padding=False)
            tl.store(Y + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + cols[None, :], x, mask=mask)
        """,
        """
        @triton.jit
        def _rows_kernel(X, Y, stride, n_rows, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            row0 = tl.program_id(0) * BLOCK_M
            rows = row0 + tl.arange(0, BLOCK_M)
            cols = tl.arange(0, BLOCK_N)
            mask = (rows < n_rows)[:, None]
            base = X + row0.to(tl.int64) * stride
            x = tl.load(base + tl.arange(0, BLOCK_M)[:, None] * stride + cols[None, :], mask=mask, care_padding=False)
            tl.store(Y + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + cols[None, :], x, mask=mask)
        """,
        7,
    ),
    "ASC005 int64": (
        """
        @triton.jit
        def _wide_kernel(X, Y, n, BLOCK: tl.constexpr):
            start = tl.program_id(0) * BLOCK
            idx = (start + tl.arange(0, BLOCK)).to(tl.int64)
            mask = idx < n
            x = tl.load(X + idx, mask=mask, care_padding=False)
            tl.store(Y + idx, x, mask=mask)
        """,
        """
        @triton.jit
        def _wide_kernel(X, Y, n, BLOCK: tl.constexpr):
            start = tl.program_id(0).to(tl.int64) * BLOCK
            idx = tl.arange(0, BLOCK)
            mask = idx < n - start
            x = tl.load(X + start + idx, mask=mask, care_padding=False)
            tl.store(Y + start + idx, x, mask=mask)
        """,
        4,
    ),
}


def _write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body).lstrip("\n"))
    return path


def test_the_package_has_no_findings():
    findings = check_package()
    assert not findings, "\n" + "\n".join(map(str, findings))


def test_every_kernel_and_helper_is_read():
    # A rule that passes only because it reads nothing proves nothing: every jit function of the
    # package is a kernel or reached from one, and the check follows loads in all of them.
    functions = collect(package_paths(), SRC.parents[1])
    checker = Checker(functions)
    for fn in functions.values():
        if fn.name.endswith("_kernel"):
            checker.check_kernel(fn)
    assert len([f for f in functions if f.endswith("_kernel")]) >= 25
    assert checker.visited == set(functions), set(functions) - checker.visited
    assert len(checker.filled_loads) + len(checker.unfilled_loads) > 100


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_each_rule_fires_on_its_planted_example(tmp_path, case):
    rule = case.split()[0]
    bad, good, line = PLANTED[case]
    found = check_paths([_write(tmp_path, "bad.py", bad)], tmp_path)
    lines = HEADER.count("\n")
    assert [(f.rule, f.file, f.line) for f in found] == [(rule, "bad.py", lines + line)], found
    assert str(found[0]).startswith(f"bad.py:{lines + line}: {rule} ")
    assert check_paths([_write(tmp_path, "good.py", good)], tmp_path) == []


def test_a_finding_in_a_helper_names_the_helper_line(tmp_path):
    src = """
        @triton.jit
        def _live(cols, n):
            return tl.where(cols < n, 1.0, 0.0)


        @triton.jit
        def _uses_helper_kernel(Y, n, BLOCK: tl.constexpr):
            cols = tl.arange(0, BLOCK)
            tl.store(Y + cols, _live(cols, n), mask=cols < n)
        """
    found = check_paths([_write(tmp_path, "helper.py", src)], tmp_path)
    assert [(f.rule, f.line) for f in found] == [("ASC001", HEADER.count("\n") + 3)]


def test_the_planted_examples_cover_every_rule():
    assert {case.split()[0] for case in PLANTED} == set(RULES)


def test_readme_lists_every_rule_with_its_source():
    for rule in RULES.values():
        assert f"| {rule.id} |" in README, rule.id
        assert rule.source.split(",")[0] in README, (rule.id, rule.source)
