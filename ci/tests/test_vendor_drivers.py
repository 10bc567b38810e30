"""Issue 40: the autograd drivers live once in liger-core. A vendor package defines no autograd
Function class except where its module says why ("Own driver: ..." in its docstring) and the
exception is listed here; a planted Function is caught."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENDOR_SOURCES = sorted(ROOT.glob("packages/liger-ops-*/src"))

# (package, module): the documented exceptions. A new one is added here and explained in its module.
OWN_DRIVERS = {
    ("liger-ops-xpu", "liger_ops_xpu/divergence.py"),
}


def autograd_function_classes(source: str) -> list[str]:
    """Names of the classes in ``source`` that subclass torch.autograd.Function (by any spelling:
    ``torch.autograd.Function``, ``autograd.Function``, ``Function``) or a class of the same module
    that does."""
    tree = ast.parse(source)
    found: list[str] = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        for base in node.bases:
            name = ast.unparse(base)
            if name.split(".")[-1] == "Function" or name in found:
                found.append(node.name)
                break
    return found


def vendor_functions() -> dict[tuple[str, str], list[str]]:
    out = {}
    for src in VENDOR_SOURCES:
        package = src.parent.name
        for path in sorted(src.rglob("*.py")):
            classes = autograd_function_classes(path.read_text())
            if classes:
                out[(package, str(path.relative_to(src)))] = classes
    return out


def test_vendor_packages_define_autograd_functions_only_where_documented() -> None:
    assert VENDOR_SOURCES, "no vendor package found"
    found = vendor_functions()
    undocumented = {k: v for k, v in found.items() if k not in OWN_DRIVERS}
    assert undocumented == {}, f"autograd Functions outside liger_core.drivers: {undocumented}"
    for package, module in OWN_DRIVERS:
        doc = ast.get_docstring(ast.parse((ROOT / "packages" / package / "src" / module).read_text())) or ""
        assert "Own driver" in doc, f"{package}/{module} keeps its own driver without saying why"
    # Every listed exception still exists (a stale entry would hide a future one).
    assert set(OWN_DRIVERS) <= set(found)


def test_a_planted_function_is_found() -> None:
    planted = (
        "import torch\n"
        "class A(torch.autograd.Function):\n    pass\n"
        "class B(A):\n    pass\n"
        "from torch.autograd import Function\n"
        "class C(Function):\n    pass\n"
        "class D:\n    pass\n"
    )
    assert autograd_function_classes(planted) == ["A", "B", "C"]
