"""Time the main job's GRPO steps on CPU phase by phase; optionally compare two checkouts side by side.

    python scripts/benchmark_cpu.py                       # 5 steps of --preset cpu in this checkout
    python scripts/benchmark_cpu.py --compare main        # the same, alternating with a temporary worktree of main
    python scripts/benchmark_cpu.py --variant 'import torch; torch.set_num_threads(1)'   # this checkout, +/- a tweak

Each run is the kit's own main job (python -m helpers.train --preset cpu ...) in a fresh run folder, with
helpers/run/step_timing.StepTimer attached from THIS checkout (so an older checkout without it is timed the same way).
It prints seconds per step, generation tokens per second and each phase's share of the step time, and, when
comparing, the ratio B/A of the medians. CPU machines of the same kind differ in speed by up to ~3.5x, and a
shared machine's load changes minute to minute: only ratios taken in one sitting, runs alternating, mean much.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: helpers/ imports from this checkout
    sys.path.insert(0, str(ROOT))

from helpers.run.step_timing import summarize_step_times  # noqa: E402

STEP_TIMING = ROOT / "helpers" / "run" / "step_timing.py"

# Runs in the child process (cwd = the checkout being timed): attach the StepTimer from this checkout to every
# GRPOTrainer the main job builds, run an optional setup snippet (first: it may set environment variables that
# torch reads at import), then run helpers.train as `python -m` would.
CHILD = r"""
exec({setup!r})
import importlib.util, runpy, sys
spec = importlib.util.spec_from_file_location("_bench_step_timing", {step_timing!r})
st = importlib.util.module_from_spec(spec); spec.loader.exec_module(st)
import trl
_train = trl.GRPOTrainer.train
def train(self, *a, **kw):
    if getattr(self, "_step_timer", None) is None:
        st.StepTimer().attach(self)
    return _train(self, *a, **kw)
trl.GRPOTrainer.train = train
sys.argv = ["helpers.train"] + {argv!r}
sys.path.insert(0, ".")
runpy.run_module("helpers.train", run_name="__main__", alter_sys=True)
"""


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5, help="GRPO steps per run (default 5)")
    ap.add_argument("--eval-size", type=int, default=2,
                    help="held-out questions evaluated before/after (small: the benchmark is about the steps)")
    ap.add_argument("--repeats", type=int, default=1, help="runs per side; sides alternate A B A B ...")
    ap.add_argument("--compare", metavar="REF", help="also time git REF (a temporary worktree of it) as side A")
    ap.add_argument("--variant", metavar="PYTHON",
                    help="also time this checkout with PYTHON run first in the job's process (side B)")
    ap.add_argument("--json", type=Path, help="write every run's numbers here")
    ap.add_argument("train_args", nargs="*",
                    help="extra arguments for helpers.train after --, e.g. -- --num-generations 4 --batch-size 8")
    return ap.parse_args(argv)


def run_once(checkout: Path, steps: int, eval_size: int, extra: list[str], setup: str = "") -> dict:
    """One main-job run in `checkout`; its summary.json, metrics rows and the time sums of those rows."""
    with tempfile.TemporaryDirectory(prefix="grpo-cpu-bench-") as tmp:
        run_dir = Path(tmp) / "run"
        argv = ["--preset", "cpu", "--max-steps", str(steps), "--eval-size", str(eval_size), "--save-steps", "0",
                "--dashboard", "headless", "--run-dir", str(run_dir), *extra]
        code = CHILD.format(step_timing=str(STEP_TIMING), setup=setup, argv=argv)
        started = time.perf_counter()
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run([sys.executable, "-c", code], cwd=checkout, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(checkout)})
        wall = time.perf_counter() - started
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
        if r.returncode != 0:
            raise SystemExit(f"the run in {checkout} failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
        summary = json.loads((run_dir / "summary.json").read_text())
    return {"checkout": str(checkout), "setup": setup, "wall_seconds": round(wall, 1),
            "busy_cores": round(cpu_s / wall, 2),  # CPU seconds / wall seconds of the whole job (load, eval too)
            "train_seconds": summary.get("train_seconds"), "summary": summary, "rows": rows,
            "time": summarize_step_times(rows)}


def describe(run: dict) -> str:
    t = run["time"]
    shares = ", ".join(f"{p} {s:.0%}" for p, s in sorted(t["share"].items(), key=lambda kv: -kv[1]) if s >= 0.005)
    return (f"{t['seconds_per_step']:.2f} s/step, generation {t['generation_tokens_per_s']} tok/s, "
            f"train {run['train_seconds']} s, wall {run['wall_seconds']} s, {run['busy_cores']} busy cores | {shares}")


def median(runs: list[dict], key) -> float:
    return statistics.median(key(r) for r in runs)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.compare and args.variant:
        raise SystemExit("--compare and --variant: pick one (each makes a second side to compare with).")
    if args.steps < 1 or args.repeats < 1:
        raise SystemExit("--steps and --repeats must be at least 1.")
    sides = {"B (this checkout)": dict(checkout=ROOT, setup=args.variant or "")}
    worktree = None
    if args.compare:
        worktree = Path(tempfile.mkdtemp(prefix="grpo-cpu-bench-ref-")) / "ref"
        r = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), args.compare],
                           capture_output=True, text=True)
        if r.returncode != 0:
            shutil.rmtree(worktree.parent, ignore_errors=True)
            raise SystemExit(f"--compare {args.compare}: git worktree add failed: {r.stderr.strip()}")
        sides = {f"A ({args.compare})": dict(checkout=worktree, setup=""), **sides}
    elif args.variant:
        sides = {"A (this checkout)": dict(checkout=ROOT, setup=""),
                 "B (this checkout + variant)": dict(checkout=ROOT, setup=args.variant)}
    print(f"[bench] {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f} at start; "
          f"{args.steps} steps per run, {args.repeats} run(s) per side, alternating")
    results: dict[str, list[dict]] = {name: [] for name in sides}
    try:
        for i in range(args.repeats):
            for name, side in sides.items():
                run = run_once(side["checkout"], args.steps, args.eval_size, args.train_args, side["setup"])
                results[name].append(run)
                print(f"[bench] {name} run {i + 1}: {describe(run)}", flush=True)
    finally:
        if worktree is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)],
                           capture_output=True)
            shutil.rmtree(worktree.parent, ignore_errors=True)
    print(f"[bench] load average {os.getloadavg()[0]:.1f} at the end")
    per_step = {n: median(rs, lambda r: r["time"]["seconds_per_step"]) for n, rs in results.items()}
    for name, rs in results.items():
        print(f"[bench] {name}: median {per_step[name]:.2f} s/step, "
              f"generation {median(rs, lambda r: r['time']['generation_tokens_per_s'] or 0):.1f} tok/s, "
              f"median train {median(rs, lambda r: r['train_seconds'] or 0):.1f} s")
    if len(results) == 2:
        a, b = list(per_step)
        print(f"[bench] ratio B/A seconds per step: {per_step[b] / per_step[a]:.2f} (below 1: B is faster)")
    if args.json:
        args.json.write_text(json.dumps({"argv": sys.argv[1:], "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
