"""CI and release logic shared by the noxfile, the GitHub Actions workflows and ci/tests.

    python ci/liger_ci.py plan                 job matrices for the CI workflow (GITHUB_OUTPUT)
    python ci/liger_ci.py gate                 the aggregate job: fail when a needed job failed
    python ci/liger_ci.py affected FILE...     which packages a change touches
    python ci/liger_ci.py release-check TAG    which package a tag releases, or why it cannot
    python ci/liger_ci.py bump PACKAGE VERSION set one package's version (a release pull request)

Standard library only (tomllib: Python 3.11+), so a bare runner can run it before anything is
installed. The device matrix is ci/matrix.toml; the nox sessions come from `nox --list --json`.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "ci" / "matrix.toml"
# A release tag: `<distribution>-v<version>`, e.g. liger-ops-ascend-v0.3.1.
TAG_RE = re.compile(r"^(?P<dist>[a-z0-9][a-z0-9-]*?)-v(?P<version>\d[0-9A-Za-z.+-]*)$")
# Sessions carrying this tag need their device's runner, never a CPU job.
NATIVE_TAG = "native"
# changelog.d entries that are not fragments.
FRAGMENT_IGNORE = {".gitkeep", "template.md", "README.md"}


class CIError(Exception):
    """A refusal the user can act on (the message says what to do)."""


# --- the device matrix and the packages -------------------------------------------------------


def load_matrix(path: Path = MATRIX) -> dict[str, Any]:
    with open(path, "rb") as f:
        return tomllib.load(f)


@dataclass(frozen=True)
class Package:
    name: str  # distribution name, e.g. liger-ops-ascend
    path: Path  # its folder
    tag: str  # the nox tag its sessions carry
    vendor: str | None
    everyone: bool  # a change here runs every package's jobs

    @property
    def pyproject(self) -> dict[str, Any]:
        with open(self.path / "pyproject.toml", "rb") as f:
            return tomllib.load(f)

    @property
    def version_file(self) -> Path:
        return self.path / self.pyproject["tool"]["hatch"]["version"]["path"]

    @property
    def version(self) -> str:
        return read_version(self.version_file.read_text())

    @property
    def changelog(self) -> Path:
        return self.path / "CHANGELOG.md"

    @property
    def fragments_dir(self) -> Path:
        towncrier = self.pyproject.get("tool", {}).get("towncrier", {})
        return self.path / towncrier.get("directory", "changelog.d")

    def core_requirement(self) -> str | None:
        """The `liger-core` specifier this package declares (`>=0.1,<0.2`), None for core itself."""
        for req in self.pyproject["project"].get("dependencies", []):
            m = re.match(r"^\s*liger-core\s*(?P<spec>[^;]*)", req)
            if m:
                return m.group("spec").strip()
        return None


def read_version(text: str) -> str:
    m = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", text, re.M)
    if not m:
        raise CIError('no `__version__ = "X.Y.Z"` line in the version file')
    return m.group(1)


def packages(root: Path = ROOT, matrix: dict[str, Any] | None = None) -> dict[str, Package]:
    matrix = matrix if matrix is not None else load_matrix(root / "ci" / "matrix.toml")
    return {
        name: Package(name, root / spec["path"], spec["tag"], spec.get("vendor"), bool(spec.get("everyone")))
        for name, spec in matrix["packages"].items()
    }


# --- path filters -----------------------------------------------------------------------------


def _matches(path: str, pattern: str) -> bool:
    if pattern.endswith("/**"):
        return path == pattern[:-3] or path.startswith(pattern[:-2])
    return fnmatch.fnmatchcase(path, pattern)


def affected(changed: list[str] | None, matrix: dict[str, Any], root: Path = ROOT) -> set[str]:
    """The packages whose jobs a change must run. None (a push to main, a manual run): all."""
    pkgs = packages(root, matrix)
    if changed is None:
        return set(pkgs)
    hit: set[str] = set()
    for path in changed:
        if any(_matches(path, p) for p in matrix["paths"]["everyone"]):
            return set(pkgs)
        for pkg in pkgs.values():
            prefix = pkg.path.relative_to(root).as_posix() + "/"
            if path.startswith(prefix):
                if pkg.everyone:
                    return set(pkgs)
                hit.add(pkg.name)
    return hit


# --- nox sessions and the plan ----------------------------------------------------------------


def nox_sessions(root: Path = ROOT, default_only: bool = False) -> list[dict[str, Any]]:
    """`nox --list --json`: every session with its tags (or only those a bare `nox` runs)."""
    try:
        import nox  # noqa: F401

        cmd = [sys.executable, "-m", "nox"]
    except ImportError:
        cmd = ["nox"]
    out = subprocess.run(
        # --json lists only the selected sessions; a keyword every name matches selects them all.
        [*cmd, "--list", "--json", "-f", str(root / "noxfile.py"), *([] if default_only else ["-k", "not __none__"])],
        check=True,
        capture_output=True,
        text=True,
        cwd=root,
    ).stdout
    return json.loads(out)


def session_package(session: dict[str, Any], pkgs: dict[str, Package]) -> str | None:
    """The package a session belongs to (by its tags); None for global sessions (lint, ci)."""
    tags = set(session.get("tags", []))
    owners = [p.name for p in pkgs.values() if p.tag in tags or p.name in tags]
    if len(owners) > 1:
        # A session tagged for several packages (none today) runs when any of them changes.
        return ",".join(sorted(owners))
    return owners[0] if owners else None


def cpu_sessions(sessions: list[dict[str, Any]], matrix: dict[str, Any]) -> list[dict[str, Any]]:
    want = set(matrix["cpu"]["tags"])
    return [s for s in sessions if want & set(s.get("tags", [])) and NATIVE_TAG not in s.get("tags", [])]


def runner_sessions(runner: dict[str, Any], sessions: list[dict[str, Any]], pkgs: dict[str, Package]) -> list[str]:
    """The sessions a vendor runner runs: its vendor's sessions carrying every one of its tags
    (the vendor name `cuda` is also a device name: the runner's tags say `cuda` and `native`)."""
    vendor_tags = {p.tag for p in pkgs.values() if p.vendor == runner["vendor"]}
    return [
        s["session"]
        for s in sessions
        if vendor_tags & set(s.get("tags", [])) and set(runner["tags"]) <= set(s.get("tags", []))
    ]


@dataclass
class Event:
    """What the plan needs to know about the run that asked for it."""

    name: str = "workflow_dispatch"  # GITHUB_EVENT_NAME
    repository: str = ""  # GITHUB_REPOSITORY
    head_repository: str = ""  # the pull request's head repository (a fork's name for a fork)
    labels: tuple[str, ...] = ()
    enabled_runners: tuple[str, ...] = ()  # the LIGER_SELF_HOSTED_RUNNERS repository variable

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Event:
        env = dict(os.environ) if env is None else env
        payload: dict[str, Any] = {}
        if env.get("GITHUB_EVENT_PATH") and Path(env["GITHUB_EVENT_PATH"]).is_file():
            payload = json.loads(Path(env["GITHUB_EVENT_PATH"]).read_text())
        pr = payload.get("pull_request") or {}
        return cls(
            name=env.get("GITHUB_EVENT_NAME", "workflow_dispatch"),
            repository=env.get("GITHUB_REPOSITORY", ""),
            head_repository=((pr.get("head") or {}).get("repo") or {}).get("full_name", ""),
            labels=tuple(label["name"] for label in pr.get("labels", [])),
            enabled_runners=tuple(r.strip() for r in env.get("LIGER_SELF_HOSTED_RUNNERS", "").split(",") if r.strip()),
        )

    def runs_on_self_hosted(self, runner_id: str) -> tuple[bool, str]:
        """Whether to plan this runner's jobs, and why (printed in the plan job's log)."""
        if runner_id not in self.enabled_runners:
            return False, f"{runner_id}: not in LIGER_SELF_HOSTED_RUNNERS (no such runner for this repository)"
        if self.name == "pull_request":
            if self.head_repository != self.repository:
                return False, f"{runner_id}: pull request from a fork ({self.head_repository}): vendor runners skipped"
            if f"ci:{runner_id}" not in self.labels and "ci:self-hosted" not in self.labels:
                return False, f"{runner_id}: pull request without the label ci:{runner_id} or ci:self-hosted"
        return True, f"{runner_id}: planned"


def _script(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def plan(
    sessions: list[dict[str, Any]],
    matrix: dict[str, Any],
    changed: list[str] | None,
    event: Event,
    root: Path = ROOT,
) -> dict[str, Any]:
    """The CI workflow's job matrices: `cpu` (GitHub-hosted) and `vendor` (self-hosted)."""
    pkgs = packages(root, matrix)
    hit = affected(changed, matrix, root)
    notes = [f"packages affected: {', '.join(sorted(hit)) or 'none'}"]
    cpu = []
    for s in cpu_sessions(sessions, matrix):
        owner = session_package(s, pkgs)
        if owner is None or set(owner.split(",")) & hit:
            # compat builds liger-core at older tags: it needs the whole history.
            cpu.append({"session": s["session"], "fetch-depth": 0 if "compat" in s.get("tags", []) else 1})
    vendor = []
    for runner in matrix.get("runners", []):
        owners = {p.name for p in pkgs.values() if p.vendor == runner["vendor"]}
        if not owners & hit:
            notes.append(f"{runner['id']}: no change to {', '.join(sorted(owners))}")
            continue
        ok, why = event.runs_on_self_hosted(runner["id"])
        notes.append(why)
        if not ok:
            continue
        names = runner_sessions(runner, sessions, pkgs)
        if not names:
            raise CIError(f"runner {runner['id']}: no {runner['vendor']} nox session carries all of {runner['tags']}")
        profile = [f"source {p}" for p in runner.get("profile", [])]
        vendor.append(
            {
                "id": runner["id"],
                "runs-on": runner["runs-on"],
                "image": runner["image"],
                "options": runner.get("options", ""),
                "timeout-minutes": runner.get("timeout-minutes", 60),
                "probe": _script([*profile, runner["probe"]]),
                "setup": _script([*profile, *runner.get("setup", [])]),
                # `python3 -m`: the nox that setup installed, wherever pip put its script. One -s with
                # every name (nox keeps only the last of repeated -s options).
                "test": _script([*profile, "python3 -m nox -s " + " ".join(f"'{n}'" for n in names)]),
            }
        )
    return {"cpu": cpu, "vendor": vendor, "notes": notes}


def changed_files(base: str, head: str = "HEAD", root: Path = ROOT) -> list[str]:
    out = subprocess.run(
        ["git", "diff", "--name-only", f"{base}...{head}"], check=True, capture_output=True, text=True, cwd=root
    ).stdout
    return [line for line in out.splitlines() if line]


def gate(needs: dict[str, Any]) -> list[str]:
    """Problems with the needed jobs: a failure, a cancellation, or a plan that did not succeed
    (its matrix jobs would then be skipped, and a skipped job must not read as green)."""
    problems = [
        f"{job}: {info.get('result')}"
        for job, info in needs.items()
        if info.get("result") not in ("success", "skipped")
    ]
    if "plan" in needs and needs["plan"].get("result") != "success":
        problems.append("plan did not succeed, so no test job ran")
    return problems


# --- consistency of the matrix, the noxfile and the workflows ---------------------------------


def _matrix_refs(job: dict[str, Any]) -> set[str]:
    """The `matrix.<key>` names a workflow job reads."""
    return set(re.findall(r"\bmatrix\.([A-Za-z0-9_-]+)", json.dumps(job)))


def licence_problems(pkg: Package, root: Path = ROOT) -> list[str]:
    """Each distribution carries the repository's LICENSE: a copy in the package, named by
    ``license-files`` (hatch cannot include a file above the package's folder)."""
    copy, original = pkg.path / "LICENSE", root / "LICENSE"
    if not original.is_file():
        return ["no LICENSE at the repository root"]
    problems = []
    if not copy.is_file() or copy.read_bytes() != original.read_bytes():
        problems.append(f"package {pkg.name}: {copy.relative_to(root)} is not a copy of the root LICENSE")
    if pkg.pyproject["project"].get("license-files") != ["LICENSE"]:
        problems.append(f'package {pkg.name}: its pyproject.toml lacks license-files = ["LICENSE"]')
    return problems


def missing_licence(wheel: Path, sdist: Path) -> list[str]:
    """What a built wheel and sdist lack of the licence file (empty when both carry it)."""
    import tarfile
    import zipfile

    missing = []
    with zipfile.ZipFile(wheel) as zf:
        if not any(n.split("/")[0].endswith(".dist-info") and n.endswith("/licenses/LICENSE") for n in zf.namelist()):
            missing.append(f"{wheel.name}: no *.dist-info/licenses/LICENSE")
    with tarfile.open(sdist) as tf:
        if not any(n.count("/") == 1 and n.endswith("/LICENSE") for n in tf.getnames()):
            missing.append(f"{sdist.name}: no LICENSE at its top")
    return missing


def consistency_problems(
    matrix: dict[str, Any],
    sessions: list[dict[str, Any]],
    workflows: dict[str, dict[str, Any]],
    root: Path = ROOT,
    default_sessions: list[dict[str, Any]] | None = None,
) -> list[str]:
    """Every way ci/matrix.toml, the nox sessions and the workflows (parsed YAML, by file name)
    can disagree; empty when they agree."""
    problems: list[str] = []
    pkgs = packages(root, matrix)
    all_tags = {tag for s in sessions for tag in s.get("tags", [])}
    names = {s["session"] for s in sessions}

    for name, pkg in pkgs.items():
        if not (pkg.path / "pyproject.toml").is_file():
            problems.append(f"package {name}: no pyproject.toml in {pkg.path}")
            continue
        if pkg.pyproject["project"]["name"] != name:
            problems.append(f"package {name}: its pyproject.toml names {pkg.pyproject['project']['name']}")
        if "towncrier" not in pkg.pyproject.get("tool", {}) or not pkg.fragments_dir.is_dir():
            problems.append(f"package {name}: no [tool.towncrier] or no {pkg.fragments_dir.name}/ folder")
        if pkg.tag not in all_tags:
            problems.append(f"package {name}: no nox session carries its tag {pkg.tag!r}")
        problems += licence_problems(pkg, root)
        if f"build({name})" not in names:
            problems.append(f"package {name}: no build({name}) nox session")
        if pkg.vendor:
            if f"compat({name})" not in names:
                problems.append(f"package {name}: no compat({name}) nox session")
            if not [
                s
                for s in cpu_sessions(sessions, matrix)
                if session_package(s, pkgs) == name and "interpreter" in s.get("tags", [])
            ]:
                problems.append(f"package {name}: no interpreter session for the CPU jobs")
            if not [r for r in matrix.get("runners", []) if r["vendor"] == pkg.vendor]:
                problems.append(f"package {name}: no runner in ci/matrix.toml for vendor {pkg.vendor}")

    for tag in matrix["cpu"]["tags"]:
        if tag not in all_tags:
            problems.append(f"cpu: tag {tag!r} is on no nox session")
    ids = [r["id"] for r in matrix.get("runners", [])]
    if len(ids) != len(set(ids)):
        problems.append(f"runners: duplicate ids in {ids}")
    for runner in matrix.get("runners", []):
        rid = runner.get("id", "?")
        for key in ("vendor", "device", "runs-on", "image", "probe", "tags"):
            if not runner.get(key):
                problems.append(f"runner {rid}: no {key}")
        if "self-hosted" not in runner.get("runs-on", []):
            problems.append(f"runner {rid}: runs-on lacks 'self-hosted'")
        if runner.get("vendor") not in {p.vendor for p in pkgs.values()}:
            problems.append(f"runner {rid}: vendor {runner.get('vendor')!r} has no package")
        for tag in runner.get("tags", []):
            if tag not in all_tags:
                problems.append(f"runner {rid}: tag {tag!r} is on no nox session")
        if runner.get("vendor") and runner.get("tags") and not runner_sessions(runner, sessions, pkgs):
            problems.append(f"runner {rid}: no {runner['vendor']} nox session carries all of {runner['tags']}")

    if default_sessions is not None:
        default = {s["session"] for s in default_sessions}
        for s in default_sessions:
            if NATIVE_TAG in s.get("tags", []):
                problems.append(f"default nox runs {s['session']}, which needs a device")
        for must in ("lint", "core", "ci", *(f"build({n})" for n in pkgs)):
            if must not in default:
                problems.append(f"default nox does not run {must}")

    ci = workflows.get("ci.yml")
    if ci is None:
        problems.append("no .github/workflows/ci.yml")
    else:
        jobs = ci.get("jobs", {})
        plan_keys = {
            "cpu": {"session", "fetch-depth"},
            "vendor": {"id", "runs-on", "image", "options", "timeout-minutes", "probe", "setup", "test"},
        }
        for job, keys in plan_keys.items():
            if job not in jobs:
                problems.append(f"ci.yml: no {job!r} job")
                continue
            unknown = _matrix_refs(jobs[job]) - keys
            if unknown:
                problems.append(
                    f"ci.yml: job {job} reads matrix.{', matrix.'.join(sorted(unknown))}, which plan does not write"
                )
            include = str(((jobs[job].get("strategy") or {}).get("matrix") or {}).get("include", ""))
            if include.replace(" ", "") != f"${{{{fromJSON(needs.plan.outputs.{job})}}}}":
                problems.append(f"ci.yml: job {job} does not take its matrix from needs.plan.outputs.{job}")
        cpu_job, cpu = jobs.get("cpu", {}), matrix["cpu"]
        runs_on = cpu_job.get("runs-on")
        if (runs_on if isinstance(runs_on, list) else [runs_on]) != cpu["runs-on"]:
            problems.append(f"ci.yml: the cpu job runs on {runs_on}, ci/matrix.toml says {cpu['runs-on']}")
        pythons = [s["with"]["python-version"] for s in cpu_job.get("steps", []) if "setup-python" in s.get("uses", "")]
        if pythons != [cpu["python"]]:
            problems.append(f"ci.yml: the cpu job sets up Python {pythons}, ci/matrix.toml says {cpu['python']}")
        if cpu_job.get("timeout-minutes") != cpu["timeout-minutes"]:
            problems.append(f"ci.yml: the cpu job's timeout differs from ci/matrix.toml's {cpu['timeout-minutes']}")
        if "ci/liger_ci.py plan" not in json.dumps(jobs.get("plan", {})):
            problems.append("ci.yml: the plan job does not run `ci/liger_ci.py plan`")
        if 'nox -s \\"$SESSION\\"' not in json.dumps(jobs.get("cpu", {})):
            problems.append('ci.yml: the cpu job does not run `nox -s "$SESSION"`')
        gate_job = jobs.get("ci-ok")
        if gate_job is None:
            problems.append("ci.yml: no ci-ok job (the check branch protection requires)")
        else:
            needs = gate_job.get("needs", [])
            needs = [needs] if isinstance(needs, str) else needs
            for job in jobs:
                if job != "ci-ok" and job not in needs:
                    problems.append(f"ci.yml: ci-ok does not need {job}, so its failure would not block a merge")
            if "always()" not in str(gate_job.get("if", "")):
                problems.append(
                    "ci.yml: ci-ok must run `if: always()` (else a failed job skips it, and skipped reads as passed)"
                )
            if "liger_ci.py gate" not in json.dumps(gate_job):
                problems.append("ci.yml: ci-ok does not run `ci/liger_ci.py gate`")
        triggers = ci.get("on", ci.get(True, {}))
        if "pull_request" not in triggers:
            problems.append("ci.yml: not run on pull requests")

    rel = workflows.get("release.yml")
    if rel is None:
        problems.append("no .github/workflows/release.yml")
    else:
        triggers = rel.get("on", rel.get(True, {}))
        patterns = ((triggers or {}).get("push") or {}).get("tags", [])
        for name, pkg in pkgs.items():
            tag = f"{name}-v{pkg.version if (pkg.path / 'pyproject.toml').is_file() else '1.0.0'}"
            if not any(fnmatch.fnmatchcase(tag, p) for p in patterns):
                problems.append(f"release.yml: no tag pattern matches {tag}")
        text = json.dumps(rel)
        if "nox -s release" not in text or "liger_ci.py release-check" not in text:
            problems.append("release.yml: does not run `liger_ci.py release-check` and `nox -s release`")
    return problems


# --- releases ---------------------------------------------------------------------------------


def parse_tag(tag: str, pkgs: dict[str, Package]) -> tuple[Package, str]:
    tag = tag.removeprefix("refs/tags/")
    m = TAG_RE.match(tag)
    if not m:
        raise CIError(f"tag {tag!r} is not <distribution>-v<version> (e.g. liger-ops-ascend-v0.3.1)")
    dist, version = m.group("dist"), m.group("version")
    if dist not in pkgs:
        raise CIError(f"tag {tag!r} names {dist!r}, which is not a package here (one of: {', '.join(sorted(pkgs))})")
    return pkgs[dist], version


def changelog_has(text: str, version: str) -> bool:
    """Whether a changelog has a heading for `version` (`## 0.3.1`, `## [0.3.1] - date`, `## v0.3.1 (date)`)."""
    return re.search(rf"^#+\s*\[?v?{re.escape(version)}\]?(\s|$)", text, re.M) is not None


def unreleased_fragments(pkg: Package) -> list[str]:
    folder = pkg.fragments_dir
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.is_file() and p.name not in FRAGMENT_IGNORE)


def release_check(tag: str, root: Path = ROOT) -> Package:
    """The package a tag releases; refuses a tag that does not match that package's version,
    a changelog without an entry for it, or fragments not yet compiled into the changelog."""
    pkg, version = parse_tag(tag, packages(root))
    if version != pkg.version:
        raise CIError(
            f"tag {tag} says {pkg.name} {version}, but {pkg.version_file.relative_to(root)} says {pkg.version}: "
            f"tag the version the package has, or bump it first (python ci/liger_ci.py bump {pkg.name} {version})"
        )
    if not pkg.changelog.is_file() or not changelog_has(pkg.changelog.read_text(), version):
        raise CIError(
            f"{pkg.changelog.relative_to(root)} has no heading for {version}: "
            f"run `towncrier build --version {version}` in {pkg.path.relative_to(root)} (see README, Releasing)"
        )
    if re.search(r"^#+\s*\[?unreleased\]?\s*$", pkg.changelog.read_text(), re.M | re.I):
        raise CIError(
            f"{pkg.changelog.relative_to(root)} still has an Unreleased section: move its lines under the "
            f"{version} heading (they would not be in this release's notes)"
        )
    left = unreleased_fragments(pkg)
    if left:
        raise CIError(
            f"{pkg.fragments_dir.relative_to(root)} still holds fragments not in the {version} notes: "
            f"{', '.join(left)}; run `towncrier build --version {version}` there"
        )
    return pkg


def bump(name: str, version: str, root: Path = ROOT) -> Path:
    """Set one package's version; touches that package's version file only."""
    pkg = packages(root)[name]
    text = pkg.version_file.read_text()
    pkg.version_file.write_text(
        re.sub(r"""^(__version__\s*=\s*["'])[^"']+(["'])""", rf"\g<1>{version}\g<2>", text, flags=re.M)
    )
    return pkg.version_file


# --- compat: which liger-core builds a vendor package's range allows ----------------------------


@dataclass(frozen=True)
class CoreSource:
    version: str
    ref: str | None  # a git tag to build from, or None for the working tree

    def describe(self) -> str:
        return (
            f"liger-core {self.version} from tag {self.ref}"
            if self.ref
            else f"liger-core {self.version} (working tree)"
        )


def _version_key(version: str) -> tuple:
    # Releases compare numerically; anything after the numbers (rc, dev) sorts before the release.
    nums = re.match(r"^(\d+(?:\.\d+)*)(.*)$", version)
    if not nums:
        return ((), version)
    parts = tuple(int(x) for x in nums.group(1).split("."))
    parts = parts + (0,) * (4 - len(parts))
    return (parts, 0 if nums.group(2) else 1, nums.group(2))


def _satisfies(version: str, spec: str) -> bool:
    """Whether `version` is in the specifier: PEP 440 through `packaging` where installed (nox
    brings it), else a small `>=`, `>`, `<`, `<=`, `==`, `!=` check for a bare runner."""
    try:
        from packaging.specifiers import SpecifierSet
    except ImportError:
        pass
    else:
        return SpecifierSet(spec).contains(version, prereleases=True)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        m = re.match(r"^(>=|<=|==|!=|>|<)\s*(\S+)$", clause)
        if not m:
            raise CIError(f"cannot read the liger-core specifier clause {clause!r}; use >=, <, ==")
        op, other = m.groups()
        a, b = _version_key(version), _version_key(other)
        ok = {">=": a >= b, "<=": a <= b, "==": a == b, "!=": a != b, ">": a > b, "<": a < b}[op]
        if not ok:
            return False
    return True


def core_sources(spec: str, root: Path = ROOT) -> list[CoreSource]:
    """Every liger-core build the range allows, oldest first: released ones from their git tags
    `liger-core-v<version>`, and the working tree's (unreleased or just released) version."""
    core = packages(root)["liger-core"]
    tags = subprocess.run(
        ["git", "tag", "--list", "liger-core-v*"], capture_output=True, text=True, cwd=root, check=False
    ).stdout.split()
    found = [CoreSource(t.removeprefix("liger-core-v"), t) for t in tags]
    found.append(CoreSource(core.version, None))
    ok = [s for s in found if _satisfies(s.version, spec)]
    # The same version as a tag and as the tree: the tag is the release, the tree may be newer.
    return sorted(ok, key=lambda s: (_version_key(s.version), s.ref is None))


def compat_targets(spec: str, root: Path = ROOT) -> list[CoreSource]:
    """The oldest and the newest allowed liger-core (one entry when they are the same build)."""
    allowed = core_sources(spec, root)
    if not allowed:
        raise CIError(f"no liger-core build (tag or working tree) satisfies {spec!r}")
    return [allowed[0]] if allowed[0] == allowed[-1] else [allowed[0], allowed[-1]]


def floor_gap(spec: str, oldest: CoreSource) -> str | None:
    """A note when the range's floor (`>=X`) is older than the oldest build found: releases below
    that build were never tagged here, so compat cannot check them."""
    m = re.search(r">=\s*([0-9][^,\s]*)", spec)
    if (
        m
        and _version_key(m.group(1)) < _version_key(oldest.version)
        and not _satisfies(m.group(1), f"=={oldest.version}")
    ):
        return (
            f"the range allows liger-core {m.group(1)}, but the oldest build here is {oldest.version} "
            f"(no liger-core-v tag below it): raise the floor, or tag that release"
        )
    return None


def export_core(source: CoreSource, dest: Path, root: Path = ROOT) -> Path:
    """The liger-core source folder to build: the working tree's, or the tag's via git archive."""
    core = packages(root)["liger-core"]
    if source.ref is None:
        return core.path
    rel = core.path.relative_to(root).as_posix()
    data = subprocess.run(
        ["git", "archive", "--format=tar", source.ref, rel], check=True, capture_output=True, cwd=root
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest / rel


# --- command line -----------------------------------------------------------------------------


def _write_outputs(values: dict[str, str]) -> None:
    target = os.environ.get("GITHUB_OUTPUT")
    text = "".join(f"{k}={v}\n" for k, v in values.items())
    if target:
        with open(target, "a") as f:
            f.write(text)
    print(text, end="")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    cmd, args = argv[0], argv[1:]
    try:
        if cmd == "plan":
            base = os.environ.get("LIGER_BASE_SHA")
            changed = changed_files(base) if base else None
            result = plan(nox_sessions(), load_matrix(), changed, Event.from_env())
            for note in result["notes"]:
                print(note, file=sys.stderr)
            _write_outputs({"cpu": json.dumps(result["cpu"]), "vendor": json.dumps(result["vendor"])})
        elif cmd == "gate":
            problems = gate(json.loads(os.environ["NEEDS"]))
            for p in problems:
                print(f"::error::{p}")
            print("all required jobs passed or were not needed" if not problems else f"{len(problems)} problem(s)")
            return 1 if problems else 0
        elif cmd == "affected":
            print("\n".join(sorted(affected(args, load_matrix()))))
        elif cmd == "release-check":
            (tag,) = args
            pkg = release_check(tag)
            print(f"{tag}: releases {pkg.name} {pkg.version} from {pkg.path.relative_to(ROOT)}")
            _write_outputs({"package": pkg.name, "version": pkg.version})
        elif cmd == "bump":
            name, version = args
            print(f"{bump(name, version).relative_to(ROOT)}: {version}")
        else:
            print(__doc__)
            return 2
    except CIError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
