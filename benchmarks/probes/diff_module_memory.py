"""Where two `step_peak_memory.py --module-log` runs part: the module events at which the second
variant holds more (or less) than the first, beyond a threshold, and each run's highest event.

    python benchmarks/probes/diff_module_memory.py A.json B.json [--mib 16]
"""

from __future__ import annotations

import argparse
import json


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("first")
    p.add_argument("second")
    p.add_argument("--mib", type=float, default=16.0)
    p.add_argument("--most", type=int, default=40)
    a = p.parse_args()
    ra, rb = (json.load(open(f)) for f in (a.first, a.second))
    ea, eb = ra["module_events"], rb["module_events"]
    for r, e in ((ra, ea), (rb, eb)):
        top = max(range(len(e)), key=lambda i: e[i][2]) if e else None
        peak = r["max_memory_allocated_gib"]
        print(f"{r['variant']}: {len(e)} events; highest {e[top] if e else None} (max allocated {peak:.3f} GiB)")
    shown = 0
    for i, (x, y) in enumerate(zip(ea, eb)):
        if (x[0], x[1]) != (y[0], y[1]):
            print(f"event {i}: sequences part ({x[:2]} against {y[:2]}); stop")
            break
        if abs(y[2] - x[2]) > a.mib and shown < a.most:
            print(f"  {i:5d} {x[0]} {x[1]:60s} {x[2]:10.1f} {y[2]:10.1f}  {y[2] - x[2]:+8.1f} MiB")
            shown += 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
