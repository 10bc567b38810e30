"""Path filters, the CPU and vendor job matrices, and the aggregate gate."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import liger_ci
import pytest
from conftest import ROOT

ALL = {"liger-core", "liger-ops-cuda", "liger-ops-ascend", "liger-ops-xpu", "liger-kernel-dropin"}


@pytest.mark.parametrize(
    ("changed", "expected"),
    [
        (["packages/liger-ops-ascend/src/liger_ops_ascend/rms_norm.py"], {"liger-ops-ascend"}),
        (
            ["packages/liger-ops-xpu/CHANGELOG.md", "packages/liger-ops-cuda/tests/test_rms_norm.py"],
            {"liger-ops-xpu", "liger-ops-cuda"},
        ),
        (["packages/liger-core/src/liger_core/interface.py"], ALL),  # every vendor builds on core
        (["noxfile.py"], ALL),
        (["ci/matrix.toml"], ALL),
        ([".github/workflows/ci.yml"], ALL),
        (["README.md", "benchmarks/results/H200/rms-norm-tuning/rms_norm_H200.json"], set()),
        (None, ALL),  # push to main, manual run
    ],
)
def test_path_filters(matrix, changed, expected) -> None:
    assert liger_ci.affected(changed, matrix) == expected


def test_a_prefix_of_a_package_name_is_not_that_package(matrix) -> None:
    assert liger_ci.affected(["packages/liger-ops-cuda-extra/x.py"], matrix) == set()


def _cpu(matrix, sessions, changed) -> set[str]:
    return {j["session"] for j in liger_ci.plan(sessions, matrix, changed, liger_ci.Event())["cpu"]}


def test_a_vendor_change_runs_that_vendors_cpu_jobs_only(matrix, sessions) -> None:
    jobs = _cpu(matrix, sessions, ["packages/liger-ops-ascend/src/liger_ops_ascend/launch.py"])
    assert jobs == {"lint", "ci", "docs", "ascend-interpreter", "build(liger-ops-ascend)", "compat(liger-ops-ascend)"}


def test_a_change_outside_the_packages_runs_the_global_jobs_with_the_docs(matrix, sessions) -> None:
    # The site is built from the README, CONTRIBUTING.md, docs/ and benchmarks/results/ too.
    assert _cpu(matrix, sessions, ["README.md", "docs/conf.py"]) == {"lint", "ci", "docs"}


def test_a_core_change_runs_everyones_cpu_jobs(matrix, sessions) -> None:
    jobs = _cpu(matrix, sessions, ["packages/liger-core/src/liger_core/registry.py"])
    for vendor in ("cuda", "ascend", "xpu"):
        assert {f"{vendor}-interpreter", f"build(liger-ops-{vendor})", f"compat(liger-ops-{vendor})"} <= jobs
    assert {"lint", "ci", "core", "build(liger-core)"} <= jobs
    assert not {s for s in jobs if s.endswith(("-npu", "-cuda", "-xpu"))}, "no native session on a CPU runner"


def test_compat_jobs_fetch_the_whole_history(matrix, sessions) -> None:
    cpu = liger_ci.plan(sessions, matrix, None, liger_ci.Event())["cpu"]
    for job in cpu:
        assert job["fetch-depth"] == (0 if job["session"].startswith("compat(") else 1), job


MAIN = "liger/liger"
ASCEND = ["packages/liger-ops-ascend/src/liger_ops_ascend/rms_norm.py"]


@pytest.mark.parametrize(
    ("event", "changed", "planned"),
    [
        # The runner exists and the pull request from the repository asks for it.
        (liger_ci.Event("pull_request", MAIN, MAIN, ("ci:ascend-npu",), ("ascend-npu",)), ASCEND, ["ascend-npu"]),
        (
            liger_ci.Event("pull_request", MAIN, MAIN, ("ci:self-hosted",), ("ascend-npu", "cuda-h100")),
            None,
            ["ascend-npu", "cuda-h100"],
        ),
        # No label: nothing queued on vendor machines.
        (liger_ci.Event("pull_request", MAIN, MAIN, (), ("ascend-npu",)), ASCEND, []),
        # A fork never runs on a vendor machine, label or not.
        (liger_ci.Event("pull_request", MAIN, "someone/liger", ("ci:self-hosted",), ("ascend-npu",)), ASCEND, []),
        # The runner does not exist here (a fork's own CI, or not registered yet).
        (liger_ci.Event("push", "someone/liger", "", (), ()), None, []),
        # Main: every existing runner whose package changed.
        (liger_ci.Event("push", MAIN, "", (), ("ascend-npu", "xpu-intel")), None, ["ascend-npu", "xpu-intel"]),
        # The label asks, but the change is not that vendor's.
        (liger_ci.Event("pull_request", MAIN, MAIN, ("ci:cuda-h100",), ("cuda-h100",)), ASCEND, []),
    ],
)
def test_vendor_jobs_only_where_runners_exist(matrix, sessions, event, changed, planned) -> None:
    vendor = liger_ci.plan(sessions, matrix, changed, event)["vendor"]
    assert [j["id"] for j in vendor] == planned


def test_the_npu_job_probes_then_runs_the_npu_sessions_in_the_cann_container(matrix, sessions) -> None:
    event = liger_ci.Event("push", MAIN, "", (), ("ascend-npu",))
    (job,) = liger_ci.plan(sessions, matrix, ASCEND, event)["vendor"]
    assert job["runs-on"][0] == "self-hosted" and "cann" in job["image"] and "/dev/davinci" in job["options"]
    assert job["probe"].strip().endswith("npu-smi info")
    assert job["test"].strip().endswith("nox -s 'ascend-npu'")
    assert job["test"].startswith("source /usr/local/Ascend/ascend-toolkit/set_env.sh")


def test_event_from_a_github_payload(tmp_path) -> None:
    payload = {"pull_request": {"head": {"repo": {"full_name": "fork/liger"}}, "labels": [{"name": "ci:ascend-npu"}]}}
    path = tmp_path / "event.json"
    path.write_text(json.dumps(payload))
    env = {
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(path),
        "GITHUB_REPOSITORY": MAIN,
        "LIGER_SELF_HOSTED_RUNNERS": " ascend-npu, cuda-h100 ",
    }
    event = liger_ci.Event.from_env(env)
    assert event == liger_ci.Event("pull_request", MAIN, "fork/liger", ("ci:ascend-npu",), ("ascend-npu", "cuda-h100"))
    assert event.runs_on_self_hosted("ascend-npu")[0] is False


@pytest.mark.parametrize(
    ("needs", "ok"),
    [
        ({"plan": "success", "cpu": "success", "vendor": "success"}, True),
        ({"plan": "success", "cpu": "success", "vendor": "skipped"}, True),  # no vendor job planned
        ({"plan": "success", "cpu": "failure", "vendor": "skipped"}, False),
        ({"plan": "success", "cpu": "success", "vendor": "cancelled"}, False),
        ({"plan": "failure", "cpu": "skipped", "vendor": "skipped"}, False),  # skipped because plan failed
    ],
)
def test_gate(needs, ok) -> None:
    problems = liger_ci.gate({job: {"result": result, "outputs": {}} for job, result in needs.items()})
    assert (problems == []) is ok, problems


def test_each_vendor_jobs_nox_command_selects_exactly_its_sessions(matrix, sessions) -> None:
    """Run the planned command with --list: nox must select the sessions the plan meant."""
    event = liger_ci.Event("push", MAIN, "", (), tuple(r["id"] for r in matrix["runners"]))
    pkgs = liger_ci.packages(matrix=matrix)
    for job in liger_ci.plan(sessions, matrix, None, event)["vendor"]:
        command = job["test"].strip().splitlines()[-1]
        assert command.startswith("python3 -m nox ")
        args = shlex.split(command)[3:]
        out = subprocess.run(
            [sys.executable, "-m", "nox", "--list", "--json", *args],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        runner = next(r for r in matrix["runners"] if r["id"] == job["id"])
        assert [s["session"] for s in json.loads(out)] == liger_ci.runner_sessions(runner, sessions, pkgs)
