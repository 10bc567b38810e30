"""`liger bench --frontier` on CPU at tiny shapes: every budget and peer becomes a point of the
JSON (ours with the chunk row counts seen), the plots come from the JSON, and bad options fail
clearly. Seconds: the PyTorch reference, torch eager and the bare GEMMs only."""

from __future__ import annotations

import json

import pytest
import torch

from liger_core.bench import frontier
from liger_core.cli import main


def test_run_frontier_points(monkeypatch):
    monkeypatch.setenv("LIGER_BACKEND", "reference")
    result = frontier.run_frontier(
        shapes="tiny", budgets_mib=(0.01, 1), providers=["torch"], dtype=torch.float32, device="cpu",
        timer="wall", rep_ms=1, progress=False,
    )  # fmt: skip
    data = result["fused_linear_cross_entropy"]
    assert data["meta"]["budgets_mib"] == [0.01, 1.0] and data["meta"]["shapes"] == ["tiny@24t", "tiny-wide@40t"]
    points = data["points"]
    assert all(p["status"] == "ok" for p in points), points
    ours = [p for p in points if p["provider"] == "liger"]
    assert [(p["shape"], p["budget_mib"]) for p in ours] == [
        ("tiny@24t", 0.01), ("tiny@24t", 1.0), ("tiny-wide@40t", 0.01), ("tiny-wide@40t", 1.0)
    ]  # fmt: skip
    # The reference computes every token's logits at once, whatever the budget.
    assert [p["chunk_rows"] for p in ours] == [[24], [24], [40], [40]]
    assert {p["provider"] for p in points} == {"liger", "torch", "gemm-bound"}
    assert all(p["ms"] > 0 for p in points)


def test_cli_frontier_writes_json_and_replots(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("LIGER_BACKEND", "reference")
    out = tmp_path / "fr"
    argv = ["bench", "--frontier", "--shapes", "tiny", "--budgets", "0.01,1", "--providers", "torch,liger-kernel"]
    argv += ["--dtype", "float32", "--device", "cpu", "--timer", "wall", "--rep-ms", "1", "--no-progress"]
    assert main([*argv, "--out", str(out), "--no-gemm-bound"]) == 0
    text = capsys.readouterr().out
    assert "fused_linear_cross_entropy (full step, float32" in text and "liger @0.01 MiB" in text
    data = json.loads((out / "frontier-fused_linear_cross_entropy.json").read_text())
    kinds = {(p["provider"], p["status"]) for p in data["points"]}
    assert ("liger", "ok") in kinds and ("torch", "ok") in kinds
    assert (
        ("liger-kernel", "ok") in kinds
        or ("liger-kernel", "not installed") in kinds
        or (
            "liger-kernel",
            "unavailable",
        )
        in kinds
    )
    pngs = frontier.plot_frontier(out)
    if frontier_has_matplotlib():
        assert sorted(p.name for p in pngs) == [
            "frontier-fused_linear_cross_entropy-tiny-at-24t.png",
            "frontier-fused_linear_cross_entropy-tiny-wide-at-40t.png",
        ]
    else:
        assert pngs == []
    assert main(["bench", "--frontier", "--replot", str(out)]) == 0


def frontier_has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--budgets", "0,128"], "--budgets must be positive MiB values"),
        (["--budgets", "lots"], "--budgets must be positive MiB values"),
        (["--ops", "rms_norm"], "--frontier takes fused linear losses; got 'rms_norm'"),
        (["--shapes", "nope"], "argument --shapes: invalid choice: 'nope'"),
        (["--config", "tiny"], "--frontier takes --shapes"),
    ],
)
def test_cli_frontier_errors(capsys, extra, message):
    with pytest.raises(SystemExit):
        main(["bench", "--frontier", "--device", "cpu", "--no-progress", *extra])
    assert message in capsys.readouterr().err


def test_cli_frontier_isolate_runs_each_shape_in_its_own_process(tmp_path, monkeypatch):
    """``--isolate``: one child ``liger bench`` per shape (``--only-shape``), their points merged into one
    JSON in shape order. The children are run here in-process (a real child imports torch: seconds)."""
    import subprocess

    monkeypatch.setenv("LIGER_BACKEND", "reference")
    children = []

    def run_child(cmd, check, stdout):
        args = cmd[cmd.index("-m") + 2 :]
        assert "--isolate" not in args and cmd[cmd.index("-m") + 1] == "liger_core"
        children.append(args[args.index("--only-shape") + 1])
        assert main(args) == 0
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(subprocess, "run", run_child)
    argv = ["bench", "--frontier", "--shapes", "tiny", "--device", "cpu", "--budgets", "1", "--providers", "torch",
            "--timer", "wall", "--rep-ms", "1", "--no-gemm-bound", "--no-progress", "--isolate"]  # fmt: skip
    assert main([*argv, "--out", str(tmp_path), "--no-plots"]) == 0
    assert children == ["tiny@24t", "tiny-wide@40t"]
    data = json.loads((tmp_path / "frontier-fused_linear_cross_entropy.json").read_text())
    assert data["meta"]["shapes"] == ["tiny@24t", "tiny-wide@40t"]
    assert [(p["shape"], p["provider"]) for p in data["points"]] == [
        ("tiny@24t", "liger"), ("tiny@24t", "torch"), ("tiny-wide@40t", "liger"), ("tiny-wide@40t", "torch")
    ]  # fmt: skip


def test_cli_frontier_only_shape_must_be_in_the_set(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--frontier", "--shapes", "tiny", "--device", "cpu", "--only-shape", "llama@1t"])
    assert "--only-shape 'llama@1t' is not in shape set 'tiny'" in capsys.readouterr().err


def test_cli_frontier_isolate_says_which_shape_gave_nothing(tmp_path, monkeypatch, capsys):
    """A child that dies without results (killed, say): the other shapes are kept, the missing one is named
    on stderr and in the JSON's meta, and the command fails."""
    import subprocess

    monkeypatch.setenv("LIGER_BACKEND", "reference")

    def run_child(cmd, check, stdout):
        args = cmd[cmd.index("-m") + 2 :]
        if args[args.index("--only-shape") + 1] == "tiny@24t":
            return subprocess.CompletedProcess(cmd, -9)
        assert main(args) == 0
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(subprocess, "run", run_child)
    argv = ["bench", "--frontier", "--shapes", "tiny", "--device", "cpu", "--budgets", "1", "--providers", "torch",
            "--timer", "wall", "--rep-ms", "1", "--no-gemm-bound", "--no-progress", "--isolate",
            "--out", str(tmp_path), "--no-plots"]  # fmt: skip
    assert main(argv) == 1
    assert "frontier: tiny@24t gave no results (exit status -9)" in capsys.readouterr().err
    data = json.loads((tmp_path / "frontier-fused_linear_cross_entropy.json").read_text())
    assert data["meta"]["shapes"] == ["tiny-wide@40t"] and data["meta"]["missing_shapes"] == ["tiny@24t"]
