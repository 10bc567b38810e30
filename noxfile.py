"""Build and test every package against its own device matrix.

    nox --list            every session, tagged by vendor and device
    nox                   what a CPU machine runs: lint, core, every vendor in the Triton interpreter
    nox -t ascend         the Ascend sessions (interpreter and npu)
    nox -t interpreter    every vendor in the interpreter
    nox -t npu            the native NPU session (skips, saying why, without an NPU)

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
nox.options.sessions = ["lint", "core", "cuda-interpreter", "ascend-interpreter", "xpu-interpreter"]
nox.options.error_on_missing_interpreters = False

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
    session.install(TORCH, "pytest>=7", *extra)
    session.install("--no-deps", "-e", str(CORE))


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
    session.run("pytest", "-q", str(CORE / "tests"), *_junit(session), *session.posargs)


def _vendor_session(vendor: str, native: bool):
    package, device, tritons, native_extra, dist = VENDORS[vendor]
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
            env = {}
        else:
            _install_core(session, *tritons)
            session.install("--no-deps", "-e", str(pkg_dir))
            env = {"TRITON_INTERPRET": "1"}
        _report_triton(session, dist)
        session.run("pytest", "-q", "-rs", str(pkg_dir / "tests"), *_junit(session), *session.posargs, env=env)

    run.__doc__ = (
        f"{package} natively on {device}" if native else f"{package} in the Triton interpreter on CPU ({dist})"
    )
    return run


for _vendor, (_pkg, _device, *_rest) in VENDORS.items():
    _tags = [_vendor, _pkg]
    nox.session(name=f"{_vendor}-interpreter", tags=[*_tags, "interpreter", "cpu"])(_vendor_session(_vendor, False))
    nox.session(name=f"{_vendor}-{_device}", tags=[*_tags, _device, "native"], venv_params=["--system-site-packages"])(
        _vendor_session(_vendor, True)
    )
