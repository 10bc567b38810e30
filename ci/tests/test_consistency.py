"""ci/matrix.toml, the noxfile's sessions and the workflows agree; planted mistakes are caught."""

from __future__ import annotations

import copy

import liger_ci
import pytest


def test_matrix_noxfile_and_workflows_agree(matrix, sessions, workflows, default_sessions) -> None:
    assert liger_ci.consistency_problems(matrix, sessions, workflows, default_sessions=default_sessions) == []


def test_every_runner_runs_its_vendors_native_session(matrix, sessions) -> None:
    pkgs = liger_ci.packages(matrix=matrix)
    for runner in matrix["runners"]:
        names = liger_ci.runner_sessions(runner, sessions, pkgs)
        assert names, runner["id"]
        for name in names:
            tags = next(s["tags"] for s in sessions if s["session"] == name)
            assert runner["vendor"] in tags and "native" in tags and runner["device"] in tags, (runner["id"], name)


def test_ascend_runner_probes_the_npu_in_a_cann_image(matrix) -> None:
    (npu,) = [r for r in matrix["runners"] if r["vendor"] == "ascend"]
    assert npu["probe"] == "npu-smi info"
    assert "cann" in npu["image"]
    assert any("set_env.sh" in p for p in npu["profile"])


def _planted_matrix(matrix, edit):
    m = copy.deepcopy(matrix)
    edit(m)
    return m


def _planted_workflows(workflows, edit):
    w = copy.deepcopy(workflows)
    edit(w)
    return w


MATRIX_MISTAKES = {
    "runner tag no session has": (lambda m: m["runners"][0].update(tags=["npux"]), "npux"),
    "runner vendor without a package": (lambda m: m["runners"][1].update(vendor="gaudi"), "gaudi"),
    "runner without self-hosted": (lambda m: m["runners"][2].update({"runs-on": ["ubuntu-24.04"]}), "self-hosted"),
    "runner without image": (lambda m: m["runners"][0].pop("image"), "no image"),
    "cpu tag no session has": (lambda m: m["cpu"]["tags"].append("benchmark"), "benchmark"),
    "package folder that does not exist": (lambda m: m["packages"]["liger-ops-xpu"].update(path="packages/xpu"), "xpu"),
    "vendor without a runner": (lambda m: m.update(runners=m["runners"][:2]), "no runner"),
}


@pytest.mark.parametrize("mistake", sorted(MATRIX_MISTAKES))
def test_a_planted_matrix_mistake_is_caught(matrix, sessions, workflows, mistake) -> None:
    edit, said = MATRIX_MISTAKES[mistake]
    problems = liger_ci.consistency_problems(_planted_matrix(matrix, edit), sessions, workflows)
    assert any(said in p for p in problems), problems


def test_a_package_without_its_build_session_is_caught(matrix, sessions, workflows) -> None:
    fewer = [s for s in sessions if s["session"] != "build(liger-ops-ascend)"]
    problems = liger_ci.consistency_problems(matrix, fewer, workflows)
    assert "package liger-ops-ascend: no build(liger-ops-ascend) nox session" in problems


def test_a_default_run_that_needs_a_device_or_skips_builds_is_caught(matrix, sessions, workflows, default_sessions):
    native = [s for s in sessions if "native" in s["tags"]][:1]
    planted = [s for s in default_sessions if not s["session"].startswith("build(")] + native
    problems = liger_ci.consistency_problems(matrix, sessions, workflows, default_sessions=planted)
    assert any("needs a device" in p for p in problems), problems
    assert any("does not run build(liger-core)" in p for p in problems), problems


WORKFLOW_MISTAKES = {
    "vendor job reads a key plan does not write": (
        lambda w: w["ci.yml"]["jobs"]["vendor"]["container"].update(image="${{ matrix.imgae }}"),
        "matrix.imgae",
    ),
    "ci-ok does not need the vendor job": (
        lambda w: w["ci.yml"]["jobs"]["ci-ok"].update(needs=["plan", "cpu"]),
        "ci-ok does not need vendor",
    ),
    "ci-ok skipped when a job fails": (lambda w: w["ci.yml"]["jobs"]["ci-ok"].pop("if"), "always()"),
    "cpu job not from the plan": (
        lambda w: w["ci.yml"]["jobs"]["cpu"]["strategy"]["matrix"].update(include=[{"session": "lint"}]),
        "needs.plan.outputs.cpu",
    ),
    "cpu job on another runner": (lambda w: w["ci.yml"]["jobs"]["cpu"].update({"runs-on": "ubuntu-22.04"}), "runs on"),
    "cpu job on another Python": (
        lambda w: w["ci.yml"]["jobs"]["cpu"]["steps"][1]["with"].update({"python-version": "3.12"}),
        "sets up Python",
    ),
    "release tags miss liger-core": (
        lambda w: w["release.yml"][True]["push"].update(tags=["liger-ops-*-v*"]),
        "liger-core-v",
    ),
    "no release workflow": (lambda w: w.pop("release.yml"), "release.yml"),
}


@pytest.mark.parametrize("mistake", sorted(WORKFLOW_MISTAKES))
def test_a_planted_workflow_mistake_is_caught(matrix, sessions, workflows, mistake) -> None:
    edit, said = WORKFLOW_MISTAKES[mistake]
    problems = liger_ci.consistency_problems(matrix, sessions, _planted_workflows(workflows, edit))
    assert any(said in p for p in problems), problems
