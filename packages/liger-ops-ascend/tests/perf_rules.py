"""A static check of this package's Triton kernels against triton-ascend's performance rules.

The Triton interpreter runs the kernels correctly on a CPU but cannot see what makes them slow
or unsafe on an Atlas A2/A3 vector core. This module reads the ``@triton.jit`` functions' Python
AST (no NPU, no CANN, no Triton import) and follows values from their sources to their uses: a
small abstract interpreter over each kernel, with its jit helpers inlined at every call, that
knows a value's kind (int, float, pointer), whether it is a vector, and where it came from.

Each rule has an id, what it flags, why, and its source in triton-ascend's documentation or
code (``RULES``; the package README lists them). ``check_paths`` returns findings as
``file:line: ID message``; ``python perf_rules.py [files]`` prints them (default: the package).

What the AST cannot know, and how the check decides:
- The element type of a load: unknown, so a compare of loaded values with scalars is not an
  ASC001 finding (kernels convert loaded integers with ``.to(tl.float32)`` where they compare
  them, which the check sees). Scalar kernel arguments in lower case are sizes, strides or
  scalars of unknown type: arithmetic with an integer keeps them integer, with a float makes
  them float.
- Pointers: kernel arguments in upper case (CONTRIBUTING.md: "Pointer arguments are upper
  case") and what is added to them.
- ``if CONSTEXPR:`` branches are all checked; loops are run twice so loop-carried values flow.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "liger_ops_ascend"

PERF_GUIDE = "triton-ascend docs/en/migration_guide/performance_guidelines.md"
UB_GUIDE = "triton-ascend docs/en/debug_guide/ub_overflow.md"


@dataclass(frozen=True)
class Rule:
    id: str
    flags: str
    why: str
    source: str


RULES = {
    r.id: r
    for r in (
        Rule(
            "ASC001",
            "an integer vector compare used for anything but a load/store mask: a tl.where condition, "
            "or data (cast, arithmetic)",
            "A2/A3 vector units have no int32/int64 compare, so it runs as scalar code; the compiler "
            "vectorises load/store masks itself, other uses must compare in fp32 (e.g. `_jit.below`) or "
            "avoid the compare (a fill through `other=`, a scalar correction)",
            f'{PERF_GUIDE}, "Optimizing Data Types" (Vector Cmp: int64/int32 unsupported); triton-ascend '
            'docs/en/debug_guide/profiling.md, "i64/i32 Comparison Failing to Vectorize"; triton-ascend-ops '
            "tutorial/basic/002-vector_cmp (tl.where needs the fp32 compare by hand)",
        ),
        Rule(
            "ASC002",
            "tl.maximum / tl.minimum / tl.clamp on float data without propagate_nan=tl.PropagateNan.ALL",
            "the default, PropagateNan.NONE, makes the compiler add NaN detection and handling: more UB "
            "and more time in every call",
            f'{UB_GUIDE}, "1. Using Interface Parameters That Increase UB Overhead" (propagate_nan)',
        ),
        Rule(
            "ASC003",
            "a masked tl.load that fills its padded lanes (other=, or the default zero fill) when no "
            "padded lane ever reaches a reduction, an address, a control decision or a store whose mask "
            "lacks one of the load mask's conditions",
            "the NPU first writes the fill value over the whole tile with the vector unit and only then "
            "starts the DMA, which serialises the two; care_padding=False (without other=) skips the fill",
            f'{PERF_GUIDE}, "Optimizing Instruction Parallelism", example 1; triton-ascend-ops '
            "tutorial/basic/003-load_care_padding",
        ),
        Rule(
            "ASC006",
            "a care_padding=False load whose padded lanes do reach a reduction, an address, a control "
            "decision or memory",
            "without the fill the padded lanes hold whatever the UB held: a wrong result on the NPU that "
            "the interpreter (which zero-fills) cannot show",
            "triton-ascend-ops tutorial/basic/003-load_care_padding (the note: keep the fill where the "
            "computation depends on it); triton-ascend python/triton/language/core.py, tl.load docstring "
            "(care_padding=False: masked places hold random values)",
        ),
        Rule(
            "ASC007",
            "a masked gather (a load whose offset comes from loaded data) with care_padding=False",
            "triton-ascend 3.2.0's DiscreteMaskAccessConversion pass aborts on it ('Unsupported type for "
            "constant creation'): a compile failure on the NPU. Gathers keep their fill (other=); ASC003 "
            "does not ask otherwise",
            "triton-ascend 3.2.0 triton-adapter-opt, DiscreteMaskAccessConversionPass.cpp:114 (reproduced "
            "on a CPU by tests/test_compiled_access.py)",
        ),
        Rule(
            "ASC004",
            "a load or store whose pointer offset is computed from a compare, or from // or % of a vector index",
            "the compiler's offset analysis (TritonToUnstructure) cannot follow such offsets, marks the "
            "access unstructured and turns it into a loop of scalar loads/stores",
            "triton-ascend third_party/ascend TritonToUnstructure pass, OffsetAnalysis.cpp (cmpi, andi, "
            "remsi, divsi of non-scalar operands and unhandled extui give unstructured offsets)",
        ),
        Rule(
            "ASC005",
            "an int32 product of an index vector that includes a runtime offset (rows = row0 + arange, "
            "head0 + arange), or an index vector widened to int64",
            "only in-tile products (arange x stride) are bounded by the tile plan (the launch guard's "
            "int32 extent); an offset index times a stride can wrap past 2**31. Widening the vector to "
            "int64 instead runs as scalar code: keep the runtime part in an int64 scalar base",
            f'{PERF_GUIDE}, "Optimizing Data Types" (Vector Add: int64 unsupported); triton-ascend '
            'docs/en/programming_guide.md, "Multi-Core Task Parallelism" (int64 scalar offsets)',
        ),
    )
}

# Calls that reduce a tile: the padded lanes of what flows into them matter.
_REDUCTIONS = {"sum", "max", "min", "reduce", "cumsum", "cumprod", "argmax", "argmin", "dot", "xor_sum", "sort"}
_FLOAT_RESULT = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "sin", "cos", "erf", "fdiv", "div_rn"}
_MINMAX = {"maximum", "minimum", "clamp"}
_KEEP_KIND = {"abs", "reshape", "broadcast_to", "trans", "expand_dims", "view", "ravel", "permute", "flip"}


@dataclass(frozen=True)
class Val:
    """What the check knows about a value."""

    kind: str = "num"  # int, float, bool, ptr, num (numeric, type unknown), dtype, other
    vec: bool = False  # a tensor (not a scalar)
    const: bool = False  # a literal or constexpr
    dtype: str = ""  # for kind == "dtype": int, float, bool or ""
    idx: bool = False  # an integer vector derived from tl.arange
    runtime_idx: bool = False  # ... with a runtime scalar added
    cmp_int: frozenset = frozenset()  # sites of integer vector compares this bool comes from
    taint: frozenset = frozenset()  # (what, site) making an offset unstructured
    loads: frozenset = frozenset()  # (site, mask conditions) of masked loads whose lanes flow here
    data: bool = False  # derived from loaded data (as an offset: a gather, unstructured by design)
    conds: frozenset = frozenset()  # sites of every compare a (mask) value is computed from
    items: tuple = ()  # for tuples


def join(a: Val, b: Val) -> Val:
    if a.items or b.items:
        if len(a.items) == len(b.items):
            return Val(kind="tuple", items=tuple(join(x, y) for x, y in zip(a.items, b.items)))
        return a if a.items else b
    kind = a.kind if a.kind == b.kind else ("float" if "float" in (a.kind, b.kind) else "num")
    return Val(
        kind=kind,
        vec=a.vec or b.vec,
        const=a.const and b.const,
        dtype=a.dtype if a.dtype == b.dtype else "",
        idx=a.idx or b.idx,
        runtime_idx=a.runtime_idx or b.runtime_idx,
        cmp_int=a.cmp_int | b.cmp_int,
        taint=a.taint | b.taint,
        loads=a.loads | b.loads,
        data=a.data or b.data,
        conds=a.conds | b.conds,
    )


def _flow(*vals: Val) -> dict:
    """The provenance a result inherits from its operands."""
    return {
        "taint": frozenset().union(*(v.taint for v in vals)),
        "loads": frozenset().union(*(v.loads for v in vals)),
        "vec": any(v.vec for v in vals),
        "data": any(v.data for v in vals),
        "conds": frozenset().union(*(v.conds for v in vals)),
    }


@dataclass
class Finding:
    rule: str
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.rule} {self.message}"


@dataclass
class JitFunction:
    name: str
    file: str
    node: ast.FunctionDef
    module_consts: dict


def _is_jit(node: ast.FunctionDef) -> bool:
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Attribute) and target.attr == "jit":
            return True
        if isinstance(target, ast.Name) and target.id == "jit":
            return True
    return False


def _module_consts(tree: ast.Module) -> dict:
    """Module-level integer constants (``SILU = 0``): compile-time values inside a kernel."""
    consts = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and isinstance(node.value.value, (int, float)):
                consts[target.id] = node.value.value
    return consts


def collect(paths: Iterable[Path], root: Path | None = None) -> dict[str, JitFunction]:
    """Every @triton.jit function of ``paths`` by name."""
    found: dict[str, JitFunction] = {}
    for path in paths:
        tree = ast.parse(path.read_text(), filename=str(path))
        consts = _module_consts(tree)
        rel = str(path.relative_to(root)) if root else str(path)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and _is_jit(node):
                if node.name in found:
                    raise ValueError(f"two @triton.jit functions named {node.name}: {found[node.name].file}, {rel}")
                found[node.name] = JitFunction(node.name, rel, node, consts)
    return found


def _is_constexpr(arg: ast.arg) -> bool:
    return arg.annotation is not None and "constexpr" in ast.unparse(arg.annotation)


class Checker:
    def __init__(self, functions: dict[str, JitFunction]):
        self.functions = functions
        self.findings: dict[tuple, Finding] = {}
        self.filled_loads: dict[tuple, str] = {}  # load site -> call text
        self.unfilled_loads: dict[tuple, str] = {}  # care_padding=False load site -> call text
        self.used_loads: set = set()
        self.visited: set = set()
        self.depth = 0

    # -- reporting ---------------------------------------------------------------------------

    def report(self, rule: str, fn: JitFunction, node: ast.AST, message: str) -> None:
        key = (rule, fn.file, node.lineno)
        self.findings.setdefault(key, Finding(rule, fn.file, node.lineno, message))

    def use(self, v: Val) -> None:
        """The padded lanes of ``v`` matter (a reduction, an address, a scalar decision)."""
        self.used_loads |= {site for site, _ in v.loads}
        for item in v.items:
            self.use(item)

    # -- entry points --------------------------------------------------------------------------

    def check_kernel(self, fn: JitFunction) -> None:
        env = {}
        for arg in fn.node.args.args:
            if _is_constexpr(arg):
                env[arg.arg] = Val(kind="num", const=True)
            elif arg.arg.isupper():
                env[arg.arg] = Val(kind="ptr")
            else:
                env[arg.arg] = Val(kind="num")
        self.run_function(fn, env)

    def run_function(self, fn: JitFunction, env: dict) -> Val:
        self.visited.add(fn.name)
        self.depth += 1
        if self.depth > 20:
            raise RecursionError(f"helper calls nested too deep at {fn.name}")
        returns: list[Val] = []
        self.block(fn, fn.node.body, env, returns)
        self.depth -= 1
        out = returns[0] if returns else Val(kind="other")
        for r in returns[1:]:
            out = join(out, r)
        return out

    def finish(self) -> list[Finding]:
        for site, text in self.filled_loads.items():
            if site not in self.used_loads:
                file, line = site[0], site[1]
                key = ("ASC003", file, line)
                self.findings.setdefault(
                    key,
                    Finding(
                        "ASC003",
                        file,
                        line,
                        f"`{text}` fills padded lanes that never reach a reduction, an address or memory: "
                        "use care_padding=False (and no other=)",
                    ),
                )
        for site, text in self.unfilled_loads.items():
            if site in self.used_loads:
                file, line = site
                self.findings.setdefault(
                    ("ASC006", file, line),
                    Finding(
                        "ASC006",
                        file,
                        line,
                        f"`{text}` leaves padded lanes unfilled but they reach a reduction, an address or "
                        "memory: fill them (other=)",
                    ),
                )
        return sorted(self.findings.values(), key=lambda f: (f.file, f.line, f.rule))

    # -- statements ----------------------------------------------------------------------------

    def block(self, fn: JitFunction, body: Sequence[ast.stmt], env: dict, returns: list) -> None:
        for stmt in body:
            self.stmt(fn, stmt, env, returns)

    def assign(self, target: ast.expr, value: Val, env: dict) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, ast.Tuple):
            items = value.items or tuple(value for _ in target.elts)
            for t, v in zip(target.elts, items):
                self.assign(t, v, env)

    def stmt(self, fn: JitFunction, stmt: ast.stmt, env: dict, returns: list) -> None:
        if isinstance(stmt, ast.Assign):
            v = self.expr(fn, stmt.value, env)
            for t in stmt.targets:
                self.assign(t, v, env)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            self.assign(stmt.target, self.expr(fn, stmt.value, env), env)
        elif isinstance(stmt, ast.AugAssign):
            cur = self.expr(fn, stmt.target, env)
            v = self.binop(fn, stmt, stmt.op, cur, self.expr(fn, stmt.value, env))
            self.assign(stmt.target, v, env)
        elif isinstance(stmt, ast.Expr):
            self.expr(fn, stmt.value, env)
        elif isinstance(stmt, ast.Return):
            if stmt.value is not None:
                returns.append(self.expr(fn, stmt.value, env))
        elif isinstance(stmt, ast.If):
            self.use(self.expr(fn, stmt.test, env))
            a, b = dict(env), dict(env)
            self.block(fn, stmt.body, a, returns)
            self.block(fn, stmt.orelse, b, returns)
            for name in set(a) | set(b):
                if name in a and name in b:
                    env[name] = join(a[name], b[name])
                else:
                    env[name] = a.get(name) or b.get(name)
        elif isinstance(stmt, (ast.For, ast.While)):
            if isinstance(stmt, ast.For):
                for arg in getattr(stmt.iter, "args", []):
                    self.use(self.expr(fn, arg, env))
                # A loop variable: a runtime integer scalar.
                self.assign(stmt.target, Val(kind="int"), env)
            else:
                self.use(self.expr(fn, stmt.test, env))
            for _ in range(2):  # twice: loop-carried values reach the loop's start
                inner = dict(env)
                self.block(fn, stmt.body, inner, returns)
                for name, v in inner.items():
                    env[name] = join(env[name], v) if name in env else v
        elif isinstance(stmt, (ast.Pass, ast.Assert, ast.Import, ast.ImportFrom)):
            pass
        else:
            raise NotImplementedError(f"{fn.file}:{stmt.lineno}: statement {type(stmt).__name__}")

    # -- expressions ---------------------------------------------------------------------------

    def expr(self, fn: JitFunction, node: ast.expr, env: dict) -> Val:
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, bool):
                return Val(kind="int", const=True)
            if isinstance(value, int):
                return Val(kind="int", const=True)
            if isinstance(value, float):
                return Val(kind="float", const=True)
            return Val(kind="other", const=True)
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in fn.module_consts:
                value = fn.module_consts[node.id]
                return Val(kind="float" if isinstance(value, float) else "int", const=True)
            return Val(kind="other", const=True)
        if isinstance(node, ast.Tuple):
            return Val(kind="tuple", items=tuple(self.expr(fn, e, env) for e in node.elts))
        if isinstance(node, ast.Subscript):
            base = self.expr(fn, node.value, env)
            return base  # x[:, None]: a broadcast view of the same data
        if isinstance(node, ast.Attribute):
            return self.attribute(fn, node, env)
        if isinstance(node, ast.BinOp):
            return self.binop(fn, node, node.op, self.expr(fn, node.left, env), self.expr(fn, node.right, env))
        if isinstance(node, ast.UnaryOp):
            v = self.expr(fn, node.operand, env)
            if isinstance(node.op, ast.Not):
                return replace(v, kind="bool")
            if isinstance(node.op, ast.USub) and v.cmp_int:
                self.report("ASC001", fn, node, f"integer compare from {self.sites(v)} used as data (negated)")
            return v
        if isinstance(node, ast.Compare):
            return self.compare(fn, node, env)
        if isinstance(node, ast.BoolOp):
            vals = [self.expr(fn, v, env) for v in node.values]
            for v in vals:
                self.use(v)
            out = vals[0]
            for v in vals[1:]:
                out = join(out, v)
            return replace(out, kind="bool")
        if isinstance(node, ast.IfExp):
            self.use(self.expr(fn, node.test, env))
            return join(self.expr(fn, node.body, env), self.expr(fn, node.orelse, env))
        if isinstance(node, ast.Call):
            return self.call(fn, node, env)
        if isinstance(node, (ast.List, ast.Slice)):
            return Val(kind="other", const=True)
        raise NotImplementedError(f"{fn.file}:{node.lineno}: expression {type(node).__name__}")

    @staticmethod
    def sites(v: Val) -> str:
        return ", ".join(sorted(f"{f}:{line}" for f, line in v.cmp_int)) or "?"

    def attribute(self, fn: JitFunction, node: ast.Attribute, env: dict) -> Val:
        if _module_path(node) is not None:
            name = node.attr
            if name in ("float16", "bfloat16", "float32", "float64", "float8e5", "float8e4nv"):
                return Val(kind="dtype", dtype="float", const=True)
            if name.startswith(("int", "uint")):
                return Val(kind="dtype", dtype="bool" if name == "int1" else "int", const=True)
            return Val(kind="other", const=True)
        base = self.expr(fn, node.value, env)
        if node.attr == "dtype":
            return Val(kind="dtype", dtype={"int": "int", "float": "float", "bool": "bool"}.get(base.kind, ""))
        return Val(kind="other", const=base.const)

    def compare(self, fn: JitFunction, node: ast.Compare, env: dict) -> Val:
        operands = [self.expr(fn, node.left, env)] + [self.expr(fn, c, env) for c in node.comparators]
        site = (fn.file, node.lineno)
        vec = any(v.vec for v in operands)
        # The compare's type is the operands' common type: float as soon as one is a float.
        integer = (
            vec
            and not any(v.kind == "float" for v in operands)
            and all(v.kind in ("int", "num", "bool") for v in operands)
        )
        integer = integer and any(v.vec and v.kind == "int" for v in operands)
        flow = _flow(*operands)
        taint = flow["taint"] | ({("compare", site)} if vec else set())
        return Val(
            kind="bool",
            vec=vec,
            cmp_int=frozenset({site}) if integer else frozenset(),
            taint=frozenset(taint),
            loads=flow["loads"],
            data=flow["data"],
            conds=flow["conds"] | {site},
        )

    def binop(self, fn: JitFunction, node: ast.AST, op: ast.operator, a: Val, b: Val) -> Val:
        flow = _flow(a, b)
        if a.kind == "ptr" or b.kind == "ptr":
            offset = b if a.kind == "ptr" else a
            base = a if a.kind == "ptr" else b
            # What is added to a pointer is an offset: its padded lanes matter, and its provenance
            # marks the access. An offset from loaded data is a gather, unstructured by design.
            self.use(offset)
            taint = base.taint | (frozenset() if offset.data else offset.taint)
            return Val(kind="ptr", vec=flow["vec"], taint=taint, data=base.data or offset.data)
        if isinstance(op, (ast.BitAnd, ast.BitOr, ast.BitXor)) and "bool" in (a.kind, b.kind):
            return Val(
                kind="bool",
                vec=flow["vec"],
                cmp_int=a.cmp_int | b.cmp_int,
                taint=flow["taint"],
                loads=flow["loads"],
                data=flow["data"],
                conds=flow["conds"],
            )
        for v in (a, b):
            if v.cmp_int:
                self.report("ASC001", fn, node, f"integer compare from {self.sites(v)} used as data (arithmetic)")
        kinds = {a.kind, b.kind}
        if isinstance(op, ast.Div) or "float" in kinds:
            kind = "float"
        elif "int" in kinds and kinds <= {"int", "num", "bool"}:
            kind = "int"
        else:
            kind = "num"
        taint = set(flow["taint"])
        if isinstance(op, (ast.FloorDiv, ast.Mod)) and flow["vec"]:
            taint.add(("divmod", (fn.file, node.lineno)))
        idx = kind == "int" and (a.idx or b.idx)
        runtime_idx = False
        if idx and isinstance(op, (ast.Add, ast.Sub)):
            other = b if a.idx else a
            runtime_idx = a.runtime_idx or b.runtime_idx or (not other.const and not other.vec)
        elif idx:
            runtime_idx = a.runtime_idx or b.runtime_idx
        if isinstance(op, ast.Mult) and kind == "int":
            for v in (a, b):
                if v.runtime_idx and not (isinstance(node, ast.BinOp) and _is_one(node)):
                    self.report(
                        "ASC005",
                        fn,
                        node,
                        "int32 product of an index vector with a runtime offset: unbounded by the tile plan, "
                        "move the offset into an int64 scalar base",
                    )
        return Val(
            kind=kind,
            vec=flow["vec"],
            const=a.const and b.const,
            idx=idx,
            runtime_idx=runtime_idx,
            taint=frozenset(taint),
            loads=flow["loads"],
            data=flow["data"],
            conds=flow["conds"],
        )

    def call(self, fn: JitFunction, node: ast.Call, env: dict) -> Val:
        func = node.func
        kwargs = {k.arg: k.value for k in node.keywords if k.arg}
        # Method calls on values: x.to(dtype), tl.load(...).to(dtype), ...
        if isinstance(func, ast.Attribute) and _module_path(func) is None:
            base = self.expr(fn, func.value, env)
            if func.attr == "to":
                dtype = self.expr(fn, node.args[0], env) if node.args else Val(kind="other")
                if base.cmp_int:
                    self.report("ASC001", fn, node, f"integer compare from {self.sites(base)} used as data (cast)")
                kind = {"float": "float", "int": "int", "bool": "bool"}.get(dtype.dtype, "num")
                if base.idx and base.vec and dtype.dtype == "int" and "int64" in ast.unparse(node.args[0]):
                    self.report(
                        "ASC005",
                        fn,
                        node,
                        "an index vector widened to int64: int64 vector arithmetic runs as scalar code",
                    )
                return replace(base, kind=kind, cmp_int=frozenset(), idx=base.idx and kind == "int")
            return replace(base, kind="num", cmp_int=frozenset())
        name = ast.unparse(func)
        if name in ("range", "tl.range", "tl.static_range", "min", "max", "len", "int", "float"):
            for a in node.args:
                self.use(self.expr(fn, a, env))
            return Val(kind="int")
        if name.startswith(("tl.", "triton.language.")):
            return self.builtin(fn, node, name.split(".")[-1], kwargs, env)
        if name in self.functions:
            return self.helper(fn, node, self.functions[name], env)
        # Something else (a host function, a Python builtin): values flow through it.
        vals = [self.expr(fn, a, env) for a in node.args]
        for v in vals:
            self.use(v)
        return Val(kind="other")

    def helper(self, fn: JitFunction, node: ast.Call, callee: JitFunction, env: dict) -> Val:
        params = [a.arg for a in callee.node.args.args]
        inner = {}
        args = [self.expr(fn, a, env) for a in node.args]
        for p, v in zip(params, args):
            inner[p] = v
        for k in node.keywords:
            inner[k.arg] = self.expr(fn, k.value, env)
        for a in callee.node.args.args:
            if a.arg not in inner:
                inner[a.arg] = Val(kind="num", const=_is_constexpr(a))
        return self.run_function(callee, inner)

    def builtin(self, fn: JitFunction, node: ast.Call, name: str, kwargs: dict, env: dict) -> Val:
        args = [self.expr(fn, a, env) for a in node.args]
        kw = {k: self.expr(fn, v, env) for k, v in kwargs.items()}
        if name == "arange":
            return Val(kind="int", vec=True, idx=True)
        if name in ("program_id", "num_programs"):
            return Val(kind="int")
        if name in ("zeros", "full", "empty"):
            dtype = kw.get("dtype") or (args[-1] if len(args) >= 2 else Val())
            kind = {"float": "float", "int": "int", "bool": "bool"}.get(dtype.dtype, "num")
            return Val(kind=kind, vec=True)
        if name == "load":
            return self.load(fn, node, args, kw)
        if name == "store":
            ptr = args[0]
            self.check_access(fn, node, ptr)
            value = args[1] if len(args) > 1 else kw.get("value", Val())
            store_mask = kw.get("mask") or (args[2] if len(args) > 2 else None)
            if store_mask is None:
                self.use(value)  # an unmasked store writes the padded lanes too
            else:
                self.use_mask(fn, store_mask)
                # A load's padded lanes reach memory unless the store's mask holds every
                # condition of the load's mask.
                for site, conds in value.loads:
                    if not conds <= store_mask.conds:
                        self.used_loads.add(site)
            return Val(kind="other")
        if name in ("atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas"):
            for v in args + list(kw.values()):
                self.use(v)
            return Val(kind="num", vec=args[1].vec if len(args) > 1 else False)
        if name == "where":
            cond, a, b = (args + [Val(), Val(), Val()])[:3]
            if cond.cmp_int:
                self.report("ASC001", fn, node, f"tl.where condition from an integer compare at {self.sites(cond)}")
            flow = _flow(cond, a, b)
            # The select decides the lanes its condition's compares cover: a branch's padded lanes
            # masked by those compares do not pass (a heuristic: the polarity is not checked).
            flow["loads"] = cond.loads | frozenset((site, conds - cond.conds) for site, conds in a.loads | b.loads)
            kind = a.kind if a.kind == b.kind else ("float" if "float" in (a.kind, b.kind) else "num")
            if {a.kind, b.kind} <= {"int", "num"} and "int" in (a.kind, b.kind):
                kind = "int"
            return Val(kind=kind, vec=flow["vec"], taint=flow["taint"], loads=flow["loads"], data=flow["data"])
        if name in _MINMAX:
            prop = kwargs.get("propagate_nan")
            operands = args[:3]
            floaty = any(v.kind in ("float", "num") for v in operands) and not all(
                v.kind == "int" or (v.kind == "num" and v.const) for v in operands
            )
            if floaty and any(v.kind == "int" for v in operands) and not any(v.kind == "float" for v in operands):
                floaty = False  # an int operand with scalars of unknown type: an int min/max
            if floaty and (prop is None or not ast.unparse(prop).endswith("ALL")):
                self.report(
                    "ASC002",
                    fn,
                    node,
                    f"tl.{name} without propagate_nan=tl.PropagateNan.ALL: the default adds NaN handling",
                )
            flow = _flow(*operands)
            kind = "float" if any(v.kind == "float" for v in operands) else operands[0].kind
            return Val(kind=kind, vec=flow["vec"], taint=flow["taint"], loads=flow["loads"], data=flow["data"])
        if name in _REDUCTIONS:
            for v in args:
                self.use(v)
            x = args[0] if args else Val()
            return Val(kind=x.kind, vec=x.vec and ("axis" in kwargs or len(args) > 1), taint=x.taint, data=x.data)
        if name in _FLOAT_RESULT:  # tl.exp, tl.math.rsqrt, ...
            flow = _flow(*args)
            return Val(kind="float", vec=flow["vec"], taint=flow["taint"], loads=flow["loads"], data=flow["data"])
        if name == "cast":
            dtype = args[1] if len(args) > 1 else kw.get("dtype", Val())
            x = args[0]
            if x.cmp_int:
                self.report("ASC001", fn, node, f"integer compare from {self.sites(x)} used as data (cast)")
            return replace(x, kind={"float": "float", "int": "int"}.get(dtype.dtype, "num"), cmp_int=frozenset())
        if name in _KEEP_KIND or name in ("multiple_of", "max_contiguous", "debug_barrier"):
            return args[0] if args else Val()
        # Anything else: the result depends on all operands.
        flow = _flow(*args, *kw.values())
        for v in args:
            if v.cmp_int:
                self.report("ASC001", fn, node, f"integer compare from {self.sites(v)} used as data (tl.{name})")
        return Val(kind="num", vec=flow["vec"], taint=flow["taint"], loads=flow["loads"])

    def use_mask(self, fn: JitFunction, mask: Val) -> None:
        """A load/store mask: the compiler turns it into DMA bounds (no vector compare), but the
        data a mask is computed from matters."""
        self.use(mask)

    def check_access(self, fn: JitFunction, node: ast.Call, ptr: Val) -> None:
        bad = sorted({what for what, _ in ptr.taint})
        if bad:
            sites = ", ".join(sorted({f"{f}:{line}" for _, (f, line) in ptr.taint}))
            kinds = " and ".join("a compare" if b == "compare" else "// or % of a vector" for b in bad)
            self.report(
                "ASC004",
                fn,
                node,
                f"pointer offset computed from {kinds} ({sites}): the access is scalarised (unstructured)",
            )

    def load(self, fn: JitFunction, node: ast.Call, args: list, kw: dict) -> Val:
        ptr = args[0] if args else kw.get("pointer", Val())
        self.check_access(fn, node, ptr)
        kwargs = {k.arg: k.value for k in node.keywords if k.arg}
        masked = "mask" in kwargs or len(args) > 1
        if "mask" in kw:
            self.use_mask(fn, kw["mask"])
        no_fill = "care_padding" in kwargs and ast.unparse(kwargs["care_padding"]) == "False" and "other" not in kwargs
        loads = frozenset()
        if masked and ptr.vec and ptr.data:
            # A gather: its fill cannot be dropped (ASC007), so ASC003 does not track it.
            if no_fill:
                self.report(
                    "ASC007",
                    fn,
                    node,
                    "care_padding=False on a masked gather: triton-ascend 3.2.0's DiscreteMaskAccessConversion "
                    "aborts (keep other=)",
                )
        elif masked and ptr.vec:
            site = (fn.file, node.lineno)
            text = ast.unparse(node) if len(ast.unparse(node)) < 60 else "tl.load(...)"
            (self.unfilled_loads if no_fill else self.filled_loads).setdefault(site, text)
            mask = kw.get("mask") or (args[1] if len(args) > 1 else Val())
            loads = frozenset({(site, mask.conds)})
        return Val(kind="num", vec=ptr.vec, loads=loads, data=True)


def _module_path(node: ast.expr) -> str | None:
    """``tl.math.rsqrt`` for an attribute chain rooted at the Triton module, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in ("tl", "triton"):
        return ".".join([node.id, *reversed(parts)])
    return None


def _is_one(node: ast.BinOp) -> bool:
    return any(isinstance(v, ast.Constant) and v.value == 1 for v in (node.left, node.right))


def check_paths(paths: Iterable[Path], root: Path | None = None) -> list[Finding]:
    """Findings of every kernel (a @triton.jit function named ``*_kernel``) in ``paths``; the
    other jit functions are checked where the kernels call them."""
    functions = collect(paths, root)
    checker = Checker(functions)
    for fn in functions.values():
        if fn.name.endswith("_kernel"):
            checker.check_kernel(fn)
    return checker.finish()


def package_paths() -> list[Path]:
    return sorted(SRC.glob("*.py"))


def check_package() -> list[Finding]:
    return check_paths(package_paths(), SRC.parents[1])


if __name__ == "__main__":
    paths = [Path(p) for p in sys.argv[1:]] or package_paths()
    found = check_paths(paths, None if sys.argv[1:] else SRC.parents[1])
    for f in found:
        print(f)
    print(f"{len(found)} finding(s); rules: {', '.join(RULES)}", file=sys.stderr)
    sys.exit(1 if found else 0)
