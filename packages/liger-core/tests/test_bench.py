"""`liger bench` and `liger_core.bench` on CPU: tiny shapes, the wall-clock timer, no Triton needed."""

from __future__ import annotations

import csv
import dataclasses
import inspect
import json
import sys

import pytest
import torch

from liger_core.bench import (
    FIELDS,
    MODEL_CONFIGS,
    catalogue,
    providers,
    read_json,
    run_bench,
    runner,
    spec,
    timing,
    write_results,
)
from liger_core.bench.configs import custom_shape, get_config
from liger_core.bench.report import summary_rows
from liger_core.cli import main
from liger_core.interface import CATALOGUE
from liger_core.ops._losses import take_fused_grads

pytestmark = pytest.mark.usefixtures("clean_registry")

SPECS = catalogue.specs()
TINY = get_config("tiny")
CPU = torch.device("cpu")


def bench_main(capsys, *argv):
    rc = main(["bench", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


# -- specs ---------------------------------------------------------------------------------------


def test_every_catalogue_op_declares_a_spec():
    assert catalogue.missing_specs() == [], "catalogue ops without a bench spec: give their declaration one"
    assert list(SPECS) == list(CATALOGUE)
    for name, s in SPECS.items():
        assert s.op == name and s.group in spec.GROUPS and s.layouts, name


@pytest.mark.parametrize("op", list(SPECS))
def test_spec_inputs_follow_the_contract(op):
    for layout in SPECS[op].layouts:
        kwargs = SPECS[op].with_layout(layout).inputs(TINY, torch.float32, CPU)
        # Every argument by its contract name, every contract parameter given.
        bound = inspect.signature(CATALOGUE[op].contract).bind(**kwargs)
        assert set(bound.arguments) == set(inspect.signature(CATALOGUE[op].contract).parameters)


@pytest.mark.parametrize("op", list(SPECS))
def test_torch_formula_matches_the_reference(op):
    """The torch-eager peer computes what the op's contract says (float32, forward and gradients)."""
    s = SPECS[op]

    def run(fn):
        gen = spec.input_generator(op, TINY, CPU)
        kwargs = s.arguments(TINY, torch.float32, CPU, gen)
        leaves = runner.grad_leaves(kwargs)
        outs = runner._grad_tensors(fn(**spec.materialise(kwargs)))
        grads = [spec.randn(t.shape, gen, t.device, t.dtype) for t in outs]
        torch.autograd.backward(outs, grads)
        return [t.detach() for t in outs], [v.grad for v in leaves]

    got, got_grads = run(s.torch_fn)
    want, want_grads = run(CATALOGUE[op].reference)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert len(got_grads) == len(want_grads)
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=f"grad of leaf {i}")


def _tensors(kwargs):
    return {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("op", list(SPECS))
def test_spec_inputs_are_deterministic_and_leave_the_global_rng_alone(op):
    """Inputs come from a generator seeded by op and shape: the same tensors every time, whatever
    the global RNG holds, which they neither read nor advance (a failed CUDA-graph capture leaves
    the default CUDA generator unusable, so the bench must not need it)."""
    s = SPECS[op]
    torch.manual_seed(0)
    state = torch.random.get_rng_state()
    first = _tensors(s.inputs(TINY, torch.float32, CPU))
    assert torch.equal(torch.random.get_rng_state(), state), "building inputs consumed the global RNG"
    torch.manual_seed(1234)  # another global state: the same inputs
    second = _tensors(s.inputs(TINY, torch.float32, CPU))
    assert first.keys() == second.keys() and first
    for name in first:
        assert torch.equal(first[name], second[name]), name
        assert first[name].requires_grad == second[name].requires_grad, name
    # Another shape, other draws (a seed per op and shape, not one for all).
    bigger = _tensors(s.inputs(custom_shape(TINY, tokens=TINY.tokens + 2), torch.float32, CPU))
    assert any(first[k].shape != bigger[k].shape or not torch.equal(first[k], bigger[k]) for k in first)


def test_upstream_gradients_and_the_whole_run_leave_the_global_rng_alone(monkeypatch):
    state = torch.random.get_rng_state()
    result = run_bench(
        ops=["rms_norm", "cross_entropy"], providers=["liger", "torch"], config="tiny", dtype="float32",
        device="cpu", rep_ms=1, progress=False,
    )  # fmt: skip
    assert {r["status"] for r in result.rows} == {"ok"}
    assert torch.equal(torch.random.get_rng_state(), state)
    # measure draws the upstream gradients from the generator it is given: the same ones each time.
    seen = []
    monkeypatch.setattr(torch.autograd, "backward", lambda outs, grads, **kw: seen.append([g.clone() for g in grads]))
    rms = SPECS["rms_norm"]
    for _ in range(2):
        gen = spec.input_generator("rms_norm", TINY, CPU)
        runner.measure(rms.torch_fn, rms.arguments(TINY, torch.float32, CPU, gen), ["full"], "wall", "cpu", 1, gen)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(seen[0][0], seen[-1][0])
    assert timing.restore_default_generator("cpu") is False  # nothing to restore off CUDA


def test_bytes_and_flops():
    s = MODEL_CONFIGS["llama-3-8b"]
    rms = SPECS["rms_norm"]
    fwd = 2 * 4096 * 4096 * 2 + 4096 * 2 + 4 * 4096
    assert rms.bytes_moved(s, torch.bfloat16, "forward") == fwd
    bwd = rms.bytes_moved(s, torch.bfloat16, "backward")
    assert rms.bytes_moved(s, torch.bfloat16, "full") == fwd + bwd
    assert rms.bytes_moved(s, torch.float32, "forward") > fwd
    assert rms.flop_count(s, "forward") is None
    flce = SPECS["fused_linear_cross_entropy"]
    assert flce.flop_count(s, "forward") == 2 * 4096 * 4096 * 128256
    assert flce.flop_count(s, "full") == 6 * 4096 * 4096 * 128256


def test_mrope_section_sums_to_half_the_head():
    from liger_core.ops.qwen2vl_mrope import default_section

    assert default_section(128) == [16, 24, 24]
    for d in (16, 64, 96, 256):
        assert sum(default_section(d)) == d // 2


# -- the harness ------------------------------------------------------------------------------------


def test_run_every_op_on_cpu():
    """Every catalogue op, every mode, this project (the reference on CPU) and torch eager."""
    result = run_bench(
        providers=["liger", "torch"], config="tiny", dtype="float32", device="cpu", rep_ms=1, progress=False
    )
    ops = list(SPECS)
    assert [r["op"] for r in result.rows] == [op for op in ops for _ in range(6)]
    bad = [(r["op"], r["provider"], r["mode"], r["note"]) for r in result.rows if r["status"] != "ok"]
    assert not bad
    for r in result.rows:
        assert set(r) == set(FIELDS)
        assert r["timer"] == "wall"
        assert 0 < r["ms_p20"] <= r["ms_p50"] <= r["ms_p80"]
        assert r["gbps"] > 0 and r["bytes_moved"] > 0
        assert r["peak_mb"] is None  # no allocator statistics on the CPU
        mine = next(q for q in result.rows if (q["op"], q["mode"], q["provider"]) == (r["op"], r["mode"], "liger"))
        assert r["ratio_to_liger"] == pytest.approx(r["ms_p50"] / mine["ms_p50"])
        # Both compute the op's formula in float32.
        assert r["max_rel_diff"] is not None and r["max_rel_diff"] < 1e-4, (r["op"], r["provider"])
        assert (r["tflops"] is not None) == (SPECS[r["op"]].flops is not None)
        # Memory-bound rows carry a copy of the same bytes, timed alike, as their reference.
        if r["tflops"] is None:
            assert r["copy_gbps"] > 0
            assert r["of_copy"] == pytest.approx(r["gbps"] / r["copy_gbps"])
        else:
            assert r["copy_gbps"] is None and r["of_copy"] is None
        assert r["layout"] == SPECS[r["op"]].layout
    assert result.meta["timer"] == "wall"
    assert result.meta["versions"]["torch"] == torch.__version__


def test_copy_reference_is_cached_and_skips_what_it_cannot_measure(monkeypatch):
    calls = []
    real = runner._time

    def counting(call, leaves, timer, device_type, rep_ms):
        calls.append(timer)
        return real(call, leaves, timer, device_type, rep_ms)

    monkeypatch.setattr(runner, "_time", counting)
    monkeypatch.setattr(runner, "_COPY_GBPS", {})
    first = runner.copy_gbps(1 << 16, CPU, "wall", 1)
    assert first > 0 and runner.copy_gbps(1 << 16, CPU, "wall", 1) == first and calls == ["wall"]
    assert runner.copy_gbps(1, CPU, "wall", 1) is None  # nothing to copy
    rows = [
        dict(status="ok", flops=None, gbps=10.0, bytes_moved=1 << 16, timer="wall"),
        dict(status="ok", flops=5.0, gbps=10.0, bytes_moved=1 << 16, timer="wall"),  # compute-bound
        dict(status="error", flops=None, gbps=None, bytes_moved=None, timer=None),
    ]
    runner._add_copy_reference(rows, CPU, 1)
    assert rows[0]["copy_gbps"] == first and rows[0]["of_copy"] == pytest.approx(10.0 / first)
    assert "copy_gbps" not in rows[1] and "copy_gbps" not in rows[2]


def test_ratios():
    def row(provider, mode, ms, mb=None, timer="cudagraph", status="ok"):
        return dict(provider=provider, mode=mode, ms_p50=ms, peak_mb=mb, timer=timer, status=status, note="")

    rows = [
        row("liger", "forward", 2.0, 100.0),
        row("torch", "forward", 5.0, 300.0),
        row("liger-kernel", "forward", 1.0, 50.0, timer="do_bench"),
        row("liger", "full", 4.0),
        row("torch", "full", 6.0),
        row("cut-cross-entropy", "full", None, status="not installed"),
    ]
    runner._add_ratios(rows)
    assert rows[0]["ratio_to_liger"] == 1.0 and rows[0]["mem_ratio_to_liger"] == 1.0
    assert rows[1]["ratio_to_liger"] == 2.5 and rows[1]["mem_ratio_to_liger"] == 3.0
    assert rows[2]["ratio_to_liger"] == 0.5 and "timers differ" in rows[2]["note"]
    assert rows[4]["ratio_to_liger"] == 1.5 and "mem_ratio_to_liger" not in rows[4]
    assert "ratio_to_liger" not in rows[5]


def _not_installed(package):
    import dataclasses

    return dataclasses.replace(package, module="liger_kernel_not_installed_here")


def test_missing_provider_is_reported(monkeypatch):
    monkeypatch.setitem(providers.PEERS, "liger-kernel", _not_installed(providers.PEERS["liger-kernel"]))
    result = run_bench(
        ops=["rms_norm"], providers=["liger", "liger-kernel"], config="tiny", device="cpu", rep_ms=1, progress=False
    )
    lk = [r for r in result.rows if r["provider"] == "liger-kernel"]
    assert [r["mode"] for r in lk] == ["forward", "backward", "full"]
    for r in lk:
        assert r["status"] == "not installed"
        assert r["note"] == "pip install liger-kernel==0.8.5"
        assert r["ms_p50"] is None and r["ratio_to_liger"] is None


def test_peer_without_the_op_adds_no_rows():
    result = run_bench(
        ops=["rms_norm"],
        providers=["liger", "cut-cross-entropy"],
        config="tiny",
        device="cpu",
        rep_ms=1,
        progress=False,
    )
    assert {r["provider"] for r in result.rows} == {"liger"}


def test_default_providers():
    flce, rms = SPECS["fused_linear_cross_entropy"], SPECS["rms_norm"]
    assert providers.default_providers(rms, "cuda") == ["liger", "torch", "torch.compile", "liger-kernel"]
    assert "cut-cross-entropy" in providers.default_providers(flce, "cuda")
    assert "torch_npu" in providers.default_providers(rms, "npu")
    assert "torch_npu" not in providers.default_providers(rms, "cuda")


def test_sweep_and_an_op_that_does_not_depend_on_the_axis():
    result = run_bench(
        ops=["rms_norm", "cross_entropy"],
        providers=["liger"],
        modes=["forward"],
        config="tiny",
        sweep=("vocab", [32, 64]),
        device="cpu",
        rep_ms=1,
        progress=False,
    )
    assert [(r["op"], r["x"]) for r in result.rows] == [("cross_entropy", 32), ("cross_entropy", 64)]
    assert result.rows[0]["shape"] == "tokens=24 vocab=32"
    assert "vocab" in result.meta["skipped_ops"]["rms_norm"]


def test_provider_errors_are_rows_not_crashes(monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("kernel exploded")

    op = CATALOGUE["rms_norm"]
    monkeypatch.setitem(
        CATALOGUE, "rms_norm", dataclasses.replace(op, bench=dataclasses.replace(op.bench, torch_fn=broken))
    )
    result = run_bench(
        ops=["rms_norm"], providers=["liger", "torch"], config="tiny", device="cpu", rep_ms=1, progress=False
    )
    torch_rows = [r for r in result.rows if r["provider"] == "torch"]
    assert {r["status"] for r in torch_rows} == {"error"}
    assert "kernel exploded" in torch_rows[0]["note"]
    assert {r["status"] for r in result.rows if r["provider"] == "liger"} == {"ok"}


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown provider"):
        run_bench(ops=["rms_norm"], providers=["cublas"], config="tiny", device="cpu")
    with pytest.raises(ValueError, match="modes must be among"):
        run_bench(ops=["rms_norm"], modes=["sideways"], config="tiny", device="cpu")
    with pytest.raises(ValueError, match="unknown model config"):
        run_bench(ops=["rms_norm"], config="gpt-9", device="cpu")
    with pytest.raises(ValueError, match="no bench spec"):
        run_bench(ops=["matmul"], config="tiny", device="cpu")
    with pytest.raises(ValueError, match="sweep axis"):
        run_bench(ops=["rms_norm"], config="tiny", sweep=("width", [1]), device="cpu")


def test_timers():
    assert timing.resolve_timer("auto", "cpu") == "wall"
    assert timing.resolve_timer("wall", "cuda") == "wall"
    with pytest.raises(ValueError):
        timing.resolve_timer("cudagraph", "cpu")
    with pytest.raises(ValueError, match="timer must be one of"):
        timing.resolve_timer("stopwatch", "cpu")
    p20, p50, p80 = timing.wall_time(lambda: sum(range(100)), "cpu", rep_ms=1)
    assert 0 < p20 <= p50 <= p80
    assert timing.peak_memory_mb(lambda: None, "cpu") is None


def test_plain_progress_without_tqdm(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm now fails
    run_bench(ops=["rms_norm"], providers=["liger"], modes=["forward"], config="tiny", device="cpu", rep_ms=1)
    err = capsys.readouterr().err
    assert "[1/1] rms_norm liger" in err


# -- the command and its files ---------------------------------------------------------------------


def test_cli_smoke(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(providers.PEERS, "liger-kernel", _not_installed(providers.PEERS["liger-kernel"]))
    out = tmp_path / "res"
    rc, text, _ = bench_main(
        capsys,
        "--config", "tiny", "--device", "cpu", "--ops", "rms_norm,cross_entropy",
        "--providers", "liger,torch,liger-kernel", "--rep-ms", "1", "--out", str(out), "--no-progress", "--no-plots",
    )  # fmt: skip
    assert rc == 0, text
    assert "rms_norm" in text and "torch ms (vs liger)" in text
    assert "liger-kernel: not installed" in text
    for op in ("rms_norm", "cross_entropy"):
        data = json.loads((out / f"{op}.json").read_text())
        assert data["meta"]["device_type"] == "cpu" and data["meta"]["timer"] == "wall"
        assert data["meta"]["config"] == "tiny" and data["meta"]["ops"] == [op]
        assert len(data["rows"]) == 9  # 3 providers x 3 modes
        with open(out / f"{op}.csv") as f:
            reader = csv.DictReader(f)
            assert tuple(reader.fieldnames) == FIELDS
            rows = list(reader)
        assert len(rows) == 9
        assert {r["status"] for r in rows if r["provider"] == "liger-kernel"} == {"not installed"}
        ok = [r for r in rows if r["status"] == "ok"]
        assert all(float(r["ms_p50"]) > 0 and r["timer"] == "wall" and r["device"] for r in ok)
        assert all("torch=" in r["versions"] for r in rows)
    summary = (out / "summary.md").read_text()
    assert "| op | mode | x | liger ms |" in summary and "cross_entropy" in summary


def test_cli_list_and_errors(capsys):
    rc, text, _ = bench_main(capsys, "--list")
    assert rc == 0 and "llama-3-8b: hidden=4096" in text and "providers: liger, torch" in text
    with pytest.raises(SystemExit) as e:
        bench_main(capsys, "--ops", "rms_norm", "--providers", "cublas", "--device", "cpu")
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        bench_main(capsys, "--sweep", "tokens=a,b", "--device", "cpu")


def test_backend_option_runs_that_backend(capsys, tmp_path):
    rc, text, _ = bench_main(
        capsys, "--config", "tiny", "--device", "cpu", "--ops", "rms_norm", "--providers", "liger",
        "--backend", "reference", "--modes", "forward", "--rep-ms", "1", "--out", str(tmp_path), "--no-progress",
        "--no-plots",
    )  # fmt: skip
    assert rc == 0
    row = read_json(tmp_path / "rms_norm.json").rows[0]
    assert row["implementation"].startswith("reference liger-core")


def test_plots_and_replot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    result = run_bench(
        ops=["rms_norm"],
        providers=["liger", "torch"],
        config="tiny",
        sweep=("tokens", [8, 16]),
        device="cpu",
        rep_ms=1,
        progress=False,
    )
    written = write_results(result, tmp_path)
    assert (tmp_path / "rms_norm.png").stat().st_size > 1000 and tmp_path / "rms_norm.png" in written
    (tmp_path / "rms_norm.png").unlink()
    rc, text, _ = bench_main(capsys, "--replot", str(tmp_path))
    assert rc == 0 and (tmp_path / "rms_norm.png").exists()
    assert "![rms_norm](rms_norm.png)" in (tmp_path / "summary.md").read_text()
    readme = tmp_path / "README.md"
    readme.write_text("<!-- liger-bench:begin -->\n<!-- liger-bench:end -->\n")
    bench_main(capsys, "--replot", str(tmp_path), "--readme", str(readme))
    assert '<img src="./rms_norm.png" alt="rms_norm" width="32%">' in readme.read_text()


def test_no_matplotlib_says_so(tmp_path, monkeypatch, capsys):
    result = run_bench(ops=["rms_norm"], providers=["liger"], config="tiny", device="cpu", rep_ms=1, progress=False)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    written = write_results(result, tmp_path)
    assert not list(tmp_path.glob("*.png")) and tmp_path / "summary.md" in written
    assert "matplotlib is not installed" in capsys.readouterr().err


def test_summary_pivot():
    rows = [
        dict(op="rms_norm", mode="forward", axis="tokens", x=8, provider="liger", status="ok", ms_p50=1.0,
             gbps=100.0, tflops=None, peak_mb=2.0, ratio_to_liger=1.0),
        dict(op="rms_norm", mode="forward", axis="tokens", x=8, provider="torch", status="ok", ms_p50=3.0,
             gbps=33.3, tflops=None, peak_mb=6.0, ratio_to_liger=3.0),
        dict(op="rms_norm", mode="forward", axis="tokens", x=8, provider="liger-kernel", status="not installed"),
    ]  # fmt: skip
    headers, table = summary_rows(rows)
    assert headers[:4] == ["op", "mode", "x", "liger ms"]
    assert table == [["rms_norm", "forward", "tokens=8", "1", "100", "2", "3 (3x)", "not installed"]]


def test_a_vendor_package_importable_but_not_loaded_gets_a_hint(tmp_path, monkeypatch):
    """A source tree on PYTHONPATH without an entry point is loaded by LIGER_EXTRA_BACKENDS alone;
    the bench says so instead of loading it another way."""
    import liger_core.backend as core_backend

    (tmp_path / "liger_ops_benchvendor.py").write_text("raise RuntimeError('not to be imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    vendor = core_backend.Vendor("benchvendor", "liger-ops-benchvendor", "liger_ops_benchvendor", "cpu")
    monkeypatch.setattr(providers, "vendor_for_device", lambda d: vendor if d == "cpu" else None)
    result = run_bench(ops=["rms_norm"], providers=["liger"], modes=["forward"], config="tiny", device="cpu",
                       rep_ms=1, progress=False)  # fmt: skip
    assert "set LIGER_EXTRA_BACKENDS=liger_ops_benchvendor" in " ".join(result.meta["notes"])
    assert result.rows[0]["implementation"].startswith("reference")


def test_cpu_runs_say_their_times_mean_nothing_and_default_to_tiny_shapes():
    result = run_bench(ops=["softmax"], providers=["liger"], modes=["forward"], device="cpu", rep_ms=1, progress=False)
    assert any("say nothing about GPU speed" in n for n in result.meta["notes"])
    assert result.meta["config"] == "tiny"


def test_layouts():
    rope = SPECS["rope"]
    assert list(rope.layouts) == ["transposed", "contiguous"]
    q = rope.inputs(TINY, torch.float32, CPU)["q"]
    assert not q.is_contiguous() and q.transpose(1, 2).is_contiguous()  # LLaMA's view(b, s, h, d).transpose(1, 2)
    assert rope.with_layout("contiguous").inputs(TINY, torch.float32, CPU)["q"].is_contiguous()
    result = run_bench(ops=["rope", "softmax"], providers=["liger"], modes=["full"], config="tiny", device="cpu",
                       rep_ms=1, progress=False, layout="contiguous")  # fmt: skip
    assert [(r["op"], r["layout"]) for r in result.rows] == [("rope", "contiguous"), ("softmax", "rows")]
    with pytest.raises(ValueError, match="no selected op has layout 'bogus'"):
        run_bench(ops=["rope"], config="tiny", device="cpu", layout="bogus", progress=False)


def test_op_groups():
    groups = catalogue.groups()
    assert sorted(op for ops in groups.values() for op in ops) == sorted(CATALOGUE)
    result = run_bench(ops=["norms"], providers=["liger"], modes=["forward"], config="tiny", device="cpu",
                       rep_ms=1, progress=False)  # fmt: skip
    assert [r["op"] for r in result.rows] == list(groups["norms"])


def test_readme_table(tmp_path, capsys):
    result = run_bench(ops=["rms_norm"], providers=["liger", "torch"], config="tiny", device="cpu", rep_ms=1,
                       progress=False)  # fmt: skip
    write_results(result, tmp_path / "results" / "H100", plots=False)
    readme = tmp_path / "README.md"
    readme.write_text("# T\n\n## Benchmarks\n\n<!-- liger-bench:begin -->\nold\n<!-- liger-bench:end -->\n\nafter\n")
    rc, _, _ = bench_main(capsys, "--replot", str(tmp_path / "results" / "H100"), "--readme", str(readme))
    assert rc == 0
    text = readme.read_text()
    assert "old" not in text and text.endswith("<!-- liger-bench:end -->\n\nafter\n")
    assert "| rms_norm | full | tokens=24 |" in text and "| rms_norm | forward |" not in text
    assert "[results/H100/summary.md](results/H100/summary.md)" in text
    readme.write_text("no markers\n")
    with pytest.raises(SystemExit):
        bench_main(capsys, "--replot", str(tmp_path / "results" / "H100"), "--readme", str(readme))


def test_cuda_graph_fallback_keeps_row_groups_on_one_timer(monkeypatch):
    """A provider a CUDA graph cannot capture is timed with do_bench, and so is the rest of its
    row group; backward under the graph timer is full minus forward. (Triton's timers faked.)"""
    state = {"capturing": False}
    rms = SPECS["rms_norm"]

    def torch_fn(**kw):
        if state["capturing"]:
            raise RuntimeError("operation not permitted when stream is capturing")
        return rms.torch_fn(**kw)

    def fake_triton_time(call, timer, leaves, warmup_ms=25, rep_ms=100):
        if timer == "cudagraph":
            state["capturing"] = True
            try:
                call()
            finally:
                state["capturing"] = False
            return (1.0, 2.0, 3.0) if call.__name__ == "forward" else (3.0, 5.0, 7.0)
        call()
        return (10.0, 20.0, 30.0)

    monkeypatch.setattr(runner.timing, "triton_time", fake_triton_time)
    broken = dataclasses.replace(rms, torch_fn=torch_fn)
    rows = runner._bench_point(
        broken, ["liger", "torch"], TINY, torch.float32, CPU, list(spec.MODES), "cudagraph", None, 1,
        runner.Progress(0, enabled=False),
    )  # fmt: skip
    by = {(r["provider"], r["mode"]): r for r in rows}
    for mode in spec.MODES:
        assert by["torch", mode]["timer"] == "do_bench" and by["torch", mode]["ms_p50"] == 20.0
        assert by["liger", mode]["timer"] == "do_bench" and by["liger", mode]["ms_p50"] == 20.0
    assert "CUDA graph capture failed" in by["torch", "forward"]["note"]
    assert "CUDA-graph p50 2 ms" in by["liger", "forward"]["note"]
    # Alone, liger stays on the graph timer and its backward is full minus forward.
    rows = runner._bench_point(
        broken, ["liger"], TINY, torch.float32, CPU, list(spec.MODES), "cudagraph", None, 1,
        runner.Progress(0, enabled=False),
    )  # fmt: skip
    by = {r["mode"]: r for r in rows}
    assert [by[m]["timer"] for m in spec.MODES] == ["cudagraph"] * 3
    assert (by["backward"]["ms_p20"], by["backward"]["ms_p50"], by["backward"]["ms_p80"]) == (2.0, 3.0, 4.0)
    assert "full minus forward" in by["backward"]["note"]


def test_do_bench_failure_off_cuda_falls_back_to_the_host_clock(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("0 active drivers")

    monkeypatch.setattr(runner.timing, "triton_time", broken)
    ms, used, note = runner._time(lambda: None, [], "do_bench", "cpu", 1)
    assert used == "wall" and "do_bench failed" in note and 0 <= ms[0] <= ms[1] <= ms[2]
    with pytest.raises(RuntimeError):
        runner._time(lambda: None, [], "do_bench", "cuda", 1)


class _OverwritesSavedInput(torch.autograd.Function):
    """Like cross_entropy(in_place=True): backward writes its gradient over the saved input."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.detach())
        return (x * x).sum()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        x.mul_(2 * g)
        torch.autograd.graph.increment_version(x)
        return x


def test_a_backward_that_cannot_be_replayed_is_full_minus_forward():
    x = torch.randn(64, requires_grad=True)

    def fn(x):
        return _OverwritesSavedInput.apply(x.clone())

    got = runner.measure(fn, {"x": x}, ["forward", "backward", "full"], "wall", "cpu", 1)
    assert set(got) == {"forward", "backward", "full"}
    back = got["backward"]
    assert not back.error and back.ms is not None and back.peak_mb is None
    assert "full minus forward" in back.note
    # Only the backward mode was asked for: forward and full are timed to derive it, not reported.
    only = runner.measure(fn, {"x": x}, ["backward"], "wall", "cpu", 1)
    assert set(only) == {"backward"} and "full minus forward" in only["backward"].note


class _HandsOverFusedGrads(torch.autograd.Function):
    """Like the fused losses: the gradient formed in the forward, handed to autograd once."""

    @staticmethod
    def forward(ctx, x):
        ctx.fused_grads = (2 * x.detach(),)
        return (x * x).sum()

    @staticmethod
    def backward(ctx, g):
        (gx,) = take_fused_grads(ctx)
        return gx.mul_(g)


def test_a_backward_that_hands_over_fused_grads_is_full_minus_forward():
    x = torch.randn(64, requires_grad=True)
    got = runner.measure(lambda x: _HandsOverFusedGrads.apply(x), {"x": x}, ["backward"], "wall", "cpu", 1)
    back = got["backward"]
    assert not back.error and back.ms is not None and "full minus forward" in back.note


def test_an_op_that_takes_no_keyword_arguments_is_called_positionally(fake_backend, clean_registry):
    """An autograd Function's apply takes no keyword arguments on torch 2.11: the bench calls
    this project's op as dispatch does."""
    from liger_core.ops import rms_norm

    class PositionalOnly(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, eps, offset, casting_mode, in_place):
            return rms_norm.math(x, weight, eps, offset, casting_mode, in_place)

        @staticmethod
        def backward(ctx, dy):
            return dy, None, None, None, None, None

        @classmethod
        def apply(cls, *args, **kwargs):
            if kwargs:
                raise TypeError("apply() takes no keyword arguments")
            return super().apply(*args)

    clean_registry.register_backend(
        fake_backend(name="posonly", device_types=("cpu",), ops={"rms_norm": PositionalOnly})
    )
    result = run_bench(ops=["rms_norm"], providers=["liger"], modes=["forward"], device="cpu", backend="posonly",
                       rep_ms=1, progress=False)  # fmt: skip
    assert result.rows[0]["status"] == "ok", result.rows[0]["note"]


# -- training shapes of the fused linear losses --------------------------------------------------------


def test_shape_sets_hold_the_fused_linear_training_shapes():
    """``--shapes flce-training``: the five (tokens, hidden, vocab) of issue 14, tokens > hidden in each."""
    from liger_core.bench.configs import SHAPE_SETS

    points = SHAPE_SETS["flce-training"]
    assert [(p.tokens, p.hidden, p.vocab) for p in points] == [
        (16384, 2048, 128256),
        (16384, 4096, 128256),
        (16384, 1152, 262144),
        (16384, 2048, 151936),
        (8192, 4096, 128256),
    ]
    assert all(p.tokens > p.hidden for p in points) and len({p.name for p in points}) == len(points)


def test_shape_set_run_on_cpu_with_the_reference_backend(capsys, tmp_path):
    """A shape set through the command: one row group per named shape, each row with its shape, layout and name."""
    rc, text, _ = bench_main(
        capsys, "--ops", "fused_linear_cross_entropy,fused_linear_jsd", "--shapes", "tiny", "--device", "cpu",
        "--providers", "liger,torch", "--backend", "reference", "--modes", "full", "--rep-ms", "1",
        "--out", str(tmp_path), "--no-progress", "--no-plots",
    )  # fmt: skip
    assert rc == 0, text
    for op in ("fused_linear_cross_entropy", "fused_linear_jsd"):
        result = read_json(tmp_path / f"{op}.json")
        assert result.meta["config"] == "shapes tiny" and [s["name"] for s in result.meta["shapes"]] == [
            "tiny@24t",
            "tiny-wide@40t",
        ]
        assert [(r["provider"], r["x"], r["config"]) for r in result.rows] == [
            ("liger", "tiny@24t", "tiny@24t"),
            ("torch", "tiny@24t", "tiny@24t"),
            ("liger", "tiny-wide@40t", "tiny-wide@40t"),
            ("torch", "tiny-wide@40t", "tiny-wide@40t"),
        ]
        assert {r["axis"] for r in result.rows} == {"shape"} and {r["layout"] for r in result.rows} == {"rows"}
        shapes = [r["shape"] for r in result.rows][::2]
        assert shapes == ["tokens=24 hidden=48 vocab=96", "tokens=40 hidden=64 vocab=130"]
        assert all(r["status"] == "ok" and r["ms_p50"] > 0 and r["tflops"] > 0 for r in result.rows)
        assert all(r["implementation"].startswith("reference") for r in result.rows if r["provider"] == "liger")
    assert "shape=tiny-wide@40t" in text


def test_token_sweep_of_a_fused_linear_loss_parses_and_runs(capsys, tmp_path, monkeypatch):
    """``--op fused_linear_cross_entropy --sweep tokens=... --hidden H --vocab V`` (what the issue asks for, at
    CPU sizes): the sizes apply to every point, the rows vary tokens."""
    seen = {}
    real = runner.run_bench

    def spy(**kwargs):
        seen.update(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(runner, "run_bench", spy)
    rc, text, _ = bench_main(
        capsys, "--op", "fused_linear_cross_entropy", "--sweep", "tokens=16,40", "--hidden", "24", "--vocab", "70",
        "--device", "cpu", "--providers", "liger", "--backend", "reference", "--modes", "forward", "--rep-ms", "1",
        "--out", str(tmp_path), "--no-progress", "--no-plots",
    )  # fmt: skip
    assert rc == 0, text
    assert seen["ops"] == ["fused_linear_cross_entropy"] and seen["sweep"] == ("tokens", [16, 40])
    assert seen["sizes"] == {"hidden": 24, "vocab": 70} and seen["shapes"] is None
    rows = read_json(tmp_path / "fused_linear_cross_entropy.json").rows
    assert [(r["x"], r["shape"], r["layout"]) for r in rows] == [
        (16, "tokens=16 hidden=24 vocab=70", "rows"),
        (40, "tokens=40 hidden=24 vocab=70", "rows"),
    ]


def test_shape_set_errors(capsys):
    rc, text, _ = bench_main(capsys, "--list")
    assert "flce-training: llama-3.2-1b@16384t (16384x2048x128256)" in text
    with pytest.raises(SystemExit) as e:
        bench_main(capsys, "--shapes", "tiny", "--sweep", "tokens=8,16", "--device", "cpu")
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        bench_main(capsys, "--shapes", "no-such-set", "--device", "cpu")
    with pytest.raises(ValueError, match="shapes replaces config"):
        run_bench(ops=["rms_norm"], config="tiny", shapes="tiny", device="cpu")
    with pytest.raises(ValueError, match="unknown shape set 'huge'"):
        run_bench(ops=["rms_norm"], shapes="huge", device="cpu")


def test_cli_refuses_an_absent_device(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as e:
        bench_main(capsys, "--device", "cuda", "--ops", "rms_norm", "--out", str(tmp_path), "--no-progress")
    assert e.value.code == 2
    assert "--device cuda: no cuda device is available on this machine" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before timing or writing anything


def test_cli_pins_cpu_threads_while_timing(capsys, monkeypatch, tmp_path):
    seen = []
    from liger_core.bench import runner

    real_run = runner.run_bench
    monkeypatch.setattr(runner, "run_bench", lambda **kw: (seen.append(torch.get_num_threads()), real_run(**kw))[1])
    before = torch.get_num_threads()
    rc, _, err = bench_main(
        capsys, "--config", "tiny", "--device", "cpu", "--ops", "rms_norm", "--providers", "liger",
        "--modes", "forward", "--rep-ms", "1", "--out", str(tmp_path), "--no-progress", "--no-plots",
    )  # fmt: skip
    assert rc == 0 and seen == [1] and "1 torch CPU thread(s)" in err
    assert torch.get_num_threads() == before  # restored for the rest of the process
