"""Time the main job's GRPO steps on CPU phase by phase; optionally compare two checkouts side by side.

    python lab/benchmark_cpu.py                       # 5 steps of --preset cpu in this checkout
    python lab/benchmark_cpu.py --compare main        # the same, alternating with a temporary worktree of main
    python lab/benchmark_cpu.py --variant 'import torch; torch.set_num_threads(1)'   # this checkout, +/- a tweak
    python lab/benchmark_cpu.py --bandwidth           # memory bandwidth, the limit it sets, sampling against it
    python lab/benchmark_cpu.py --levers all --steps 2 --eval-size 8 --repeats 3    # each speed-up on / off

Each run is the kit's own main job (python -m helpers.train --preset cpu ...) in a fresh run folder, with
lab/step_timing.StepTimer attached from THIS checkout (so an older checkout without it is timed the same way).
It prints seconds per step, generation tokens per second and each phase's share of the step time, and, when
comparing, the ratio B/A of the medians. CPU machines of the same kind differ in speed by up to ~3.5x, and a
shared machine's load changes minute to minute: only ratios taken in one sitting, runs alternating, mean much.
"""

from __future__ import annotations

import argparse
import contextlib
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

import torch  # noqa: E402

from helpers.config import get_preset  # noqa: E402
from helpers.cpu_compat import cpu_has_native_bf16  # noqa: E402
from helpers.data import heldout_questions  # noqa: E402
from helpers.model import _until_eos, chat_texts, generate_shared_prefix, load_cpu, merged_lora  # noqa: E402
from lab.step_timing import summarize_step_times  # noqa: E402
from helpers.run.trl_patches import _sampler_for  # noqa: E402
from helpers.speedups import ENV, SPEEDUPS, parse_off  # noqa: E402

STEP_TIMING = ROOT / "lab" / "step_timing.py"

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
    ap.add_argument("--bandwidth", action="store_true",
                    help="measure memory-read bandwidth, the row-tokens/s limit it sets for decoding the cpu preset's "
                         "model (fp32, bf16) and the kit's sampling as a fraction of that limit")
    ap.add_argument("--bandwidth-mb", type=int, default=1024, help="size of the tensor read by --bandwidth")
    ap.add_argument("--batch", type=int, default=8, help="--bandwidth: completions sampled at once (a GRPO group)")
    ap.add_argument("--new-tokens", type=int, default=64, help="--bandwidth: new tokens per completion, at most")
    ap.add_argument("--repeats-sampling", type=int, default=3, help="--bandwidth: timed sampling calls per dtype")
    ap.add_argument("--levers", metavar="NAMES",
                    help="time each speed-up of helpers.speedups ('all' or a,b) on against off, alternating, "
                         "--repeats pairs each; prints a markdown table")
    ap.add_argument("train_args", nargs="*",
                    help="extra arguments for helpers.train after --, e.g. -- --num-generations 4 --batch-size 8")
    return ap.parse_args(argv)


def run_once(checkout: Path, steps: int, eval_size: int, extra: list[str], setup: str = "",
             env: dict | None = None, run_dir: Path | None = None) -> dict:
    """One main-job run in `checkout` (environment `env`, default this one's); its summary.json, metrics rows, the
    time sums of those rows and its stdout. run_dir: the run folder, kept (default: a temporary one, removed)."""
    if run_dir is None:
        with tempfile.TemporaryDirectory(prefix="grpo-cpu-bench-") as tmp:
            return run_once(checkout, steps, eval_size, extra, setup, env, Path(tmp) / "run")
    argv = ["--preset", "cpu", "--max-steps", str(steps), "--eval-size", str(eval_size), "--save-steps", "0",
            "--dashboard", "headless", "--run-dir", str(run_dir), *extra]
    code = CHILD.format(step_timing=str(STEP_TIMING), setup=setup, argv=argv)
    started = time.perf_counter()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([sys.executable, "-c", code], cwd=checkout, capture_output=True, text=True,
                       env={**(os.environ if env is None else env), "PYTHONPATH": str(checkout)})
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
            "time": summarize_step_times(rows), "stdout": r.stdout}


def describe(run: dict) -> str:
    t = run["time"]
    shares = ", ".join(f"{p} {s:.0%}" for p, s in sorted(t["share"].items(), key=lambda kv: -kv[1]) if s >= 0.005)
    return (f"{t['seconds_per_step']:.2f} s/step, generation {t['generation_tokens_per_s']} tok/s, "
            f"train {run['train_seconds']} s, wall {run['wall_seconds']} s, {run['busy_cores']} busy cores | {shares}")


def median(runs: list[dict], key) -> float:
    return statistics.median(key(r) for r in runs)


def main(argv=None) -> int:
    args = parse_args(argv)
    if sum(map(bool, (args.compare, args.variant, args.bandwidth, args.levers))) > 1:
        raise SystemExit("--compare, --variant, --bandwidth and --levers: pick one (each is a benchmark of its own).")
    if args.steps < 1 or args.repeats < 1:
        raise SystemExit("--steps and --repeats must be at least 1.")
    if args.bandwidth:
        return run_bandwidth(args)
    if args.levers:
        return run_levers(args)
    return run_steps(args)


def run_steps(args) -> int:
    """The step timing: this checkout, or two sides (--compare, --variant) alternating."""
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


# ------------------------------------------------------------------------------------------------- --bandwidth
# CPU decoding reads every weight once per step (for all rows of the batch at once), so memory bandwidth over the
# bytes read per step, times the batch, bounds the row-tokens per second. The KV cache and activations are left
# out (a few % of the weights at batch 8 and the cpu preset's lengths): the limit is a little optimistic.


def read_bandwidth_gbs(megabytes: int = 1024, repeats: int = 5) -> float:
    """GB/s (10^9 bytes) of reading a large fp32 tensor with torch's threads now: the median of `repeats` sums."""
    x = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32)
    x.sum()  # page the tensor in before timing
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        x.sum()
        seconds.append(time.perf_counter() - started)
    return x.numel() * 4 / statistics.median(seconds) / 1e9


def weight_bytes_per_step(model) -> int:
    """Bytes one decoding step reads: every distinct parameter (a tied lm_head and embedding counted once); an
    untied input embedding is left out, since its lookup reads only the batch's rows."""
    tensors = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    emb, out = model.get_input_embeddings(), model.get_output_embeddings()
    if emb is not None and out is not None and emb.weight.data_ptr() != out.weight.data_ptr():
        tensors.pop(emb.weight.data_ptr(), None)
    return sum(tensors.values())


def row_token_limit(gb_per_s: float, bytes_per_step: int, batch: int) -> float:
    """Row-tokens/s if decoding were bound only by reading the weights: steps/s x rows per step."""
    return gb_per_s * 1e9 / bytes_per_step * batch


def generated_tokens(new_ids, eos_token_id: int) -> int:
    """Tokens the rows generated, each up to and including its first end of text (the rest is padding)."""
    return sum(len(_until_eos(row, eos_token_id)) for row in new_ids.tolist())


def sampling_model(policy, dtype_name: str):
    """The model and context the kit's GRPO sampling uses (helpers.run.trl_patches): its PlainSampler, or the
    policy with its LoRA merged when plain_sampler is off."""
    sampler = _sampler_for(policy, bf16_sampling=dtype_name == "bf16")
    return (sampler.sync(), contextlib.nullcontext()) if sampler is not None else (policy, merged_lora(policy))


def time_sampling(dtype_name: str, batch: int, new_tokens: int, repeats: int, loaded=None) -> tuple[float, int]:
    """(row-tokens/s, weight bytes per step) of sampling one group of `batch` completions of a cpu-preset prompt,
    the way GRPO does on the CPU path (shared prefix pre-filled once, helpers.cpu_decode's loop where it runs);
    median of `repeats` after a warm-up. loaded: (policy, tokenizer) from load_cpu, else loaded here."""
    preset = get_preset("cpu")
    policy, tokenizer = loaded or load_cpu(preset)
    model, context = sampling_model(policy, dtype_name)
    texts = chat_texts(tokenizer, [heldout_questions(preset, 1)[0]["prompt"]] * batch)
    batch_in = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    kwargs = dict(do_sample=True, temperature=preset.temperature, top_k=0, top_p=1.0, max_new_tokens=new_tokens,
                  pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    rates = []
    with context, torch.no_grad():
        for i in range(repeats + 1):
            torch.manual_seed(i)
            started = time.perf_counter()
            ids = generate_shared_prefix(model, batch_in["input_ids"], batch_in["attention_mask"], None, **kwargs)
            seconds = time.perf_counter() - started
            tokens = generated_tokens(ids[:, batch_in["input_ids"].shape[1]:], tokenizer.eos_token_id)
            if i:  # the first call warms up
                rates.append(tokens / seconds)
    return statistics.median(rates), weight_bytes_per_step(model)


def time_matmuls(model, batch: int, repeats: int = 5) -> float:
    """Row-tokens/s if a decoding step were only its matmuls: F.linear of `batch` rows through every distinct weight
    matrix of the model, in order (each read from memory: together they outgrow the caches), median of `repeats`.
    The ceiling any decoding loop with these kernels can reach, whatever its other overhead."""
    weights = list({id(m.weight): m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)}.values())
    inputs = {w.shape[1]: torch.randn(batch, w.shape[1], dtype=w.dtype) for w in weights}
    seconds = []
    with torch.no_grad():
        for i in range(repeats + 1):
            started = time.perf_counter()
            for w in weights:
                torch.nn.functional.linear(inputs[w.shape[1]], w)
            if i:  # the first pass warms up
                seconds.append(time.perf_counter() - started)
    return batch / statistics.median(seconds)


def run_bandwidth(args) -> int:
    threads = torch.get_num_threads()
    gbs = read_bandwidth_gbs(args.bandwidth_mb)
    print(f"[bench] memory read: {gbs:.1f} GB/s (median of 5 sums of a {args.bandwidth_mb} MB fp32 tensor, "
          f"{threads} threads)")
    loaded = load_cpu(get_preset("cpu"))
    for dtype_name in ("fp32", "bf16"):
        rate, weights = time_sampling(dtype_name, args.batch, args.new_tokens, args.repeats_sampling, loaded)
        limit = row_token_limit(gbs, weights, args.batch)
        note = "" if dtype_name == "fp32" or cpu_has_native_bf16() else " (this CPU has no native bf16)"
        print(f"[bench] {dtype_name} sampling{note}: {weights / 1e6:.1f} MB of weights per decoding step -> limit "
              f"{limit:.0f} row-tokens/s at batch {args.batch}; measured {rate:.1f} row-tokens/s "
              f"({args.new_tokens} new tokens at most, median of {args.repeats_sampling}) = {rate / limit:.0%} of it",
              flush=True)
        if dtype_name == "fp32":
            ceiling = time_matmuls(sampling_model(loaded[0], "fp32")[0], args.batch)
            print(f"[bench] fp32 matmuls alone (F.linear through every weight, {args.batch} rows): {ceiling:.0f} "
                  f"row-tokens/s = {ceiling / limit:.0%} of the limit: the most any decoding loop with these kernels "
                  f"reaches; sampling got {rate / ceiling:.0%} of it", flush=True)
    return 0


# ------------------------------------------------------------------------------------------------- --levers
# Each speed-up (helpers.speedups.SPEEDUPS) timed on the phase it changes, everything on against that one turned off
# by $GRPO_KIT_SPEEDUPS_OFF, in short main jobs, the two variants alternating. "outside training": the job's wall
# time less its training (load, the two evaluations, pass@k); "job": the whole wall time (a name not listed here).
LEVER_PHASE = {
    "shared_prefix": "generation", "merged_lora": "generation", "plain_sampler": "generation",
    "decode_loop": "generation",
    "shared_prompt_loss": "loss", "old_logps_first_pass": "loss",
    "gqa_attention": "outside training", "finished_rows_leave": "outside training",  # greedy evaluation only
    "pass_at_k_one_call": "outside training", "before_eval_cache": "outside training",
}
LEVER_EXTRA = {"pass_at_k_one_call": ["--pass-k-samples", "2"]}  # the job computes pass@k only when asked
LOSS_PHASES = ("logps_nograd", "policy_forward", "backward")


def variant_env(off: str | None, base: dict | None = None) -> dict:
    """The environment of one variant: every speed-up on (None), or only `off` turned off; an inherited
    $GRPO_KIT_SPEEDUPS_OFF never leaks into either."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k != ENV}
    if off:
        env[ENV] = off
    return env


def lever_plan(names: list[str], repeats: int) -> list[tuple[str, str]]:
    """(name, "on"/"off") in running order: each name's pair back to back, which goes first alternating by repeat."""
    plan = []
    for i in range(repeats):
        for name in names:
            pair = [(name, "on"), (name, "off")]
            plan += pair if i % 2 == 0 else pair[::-1]
    return plan


def phase_seconds(run: dict, phase: str) -> float:
    """Seconds of `phase` in one run_once result."""
    seconds = run["time"].get("seconds", {})
    if phase == "loss":
        return sum(seconds.get(p, 0.0) for p in LOSS_PHASES)
    if phase in seconds:
        return seconds[phase]
    if phase == "outside training":
        return run["wall_seconds"] - (run["train_seconds"] or 0.0)
    return run["wall_seconds"]


def lever_table(rows: list[dict]) -> str:
    """A markdown table for lab/docs/performance.md; rows: {name, phase, on: [s...], off: [s...]}."""
    lines = ["| speed-up | phase timed | on (s, median) | off (s, median) | ratio on/off | runs per side |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        on, off = statistics.median(r["on"]), statistics.median(r["off"])
        ratio = f"{on / off:.2f}" if off else "n/a"
        lines.append(f"| {r['name']} | {r['phase']} | {on:.1f} | {off:.1f} | {ratio} | {len(r['on'])} |")
    return "\n".join(lines)


def check_switched(run: dict, name: str, side: str) -> None:
    """The job's summary.json ("cpu_speedups", the speed-ups it used) must agree with the variant: else the ratio
    would compare a run with itself."""
    used = run["summary"].get("cpu_speedups")
    if used is not None and (name in used) != (side == "on"):
        raise SystemExit(f"--levers: the run with {name} {side} used {used}. Fix: the job must read ${ENV} "
                         f"(helpers.speedups.turned_off) and record what it used in summary.json")


def lever_names(value: str) -> list[str]:
    chosen = parse_off(value)  # 'all' or a list; an unknown name is refused with the known ones
    return [name for name in SPEEDUPS if name in chosen]


def run_levers(args) -> int:
    names = lever_names(args.levers)
    rows = {n: {"name": n, "phase": LEVER_PHASE.get(n, "job"), "on": [], "off": []} for n in names}
    plan = lever_plan(names, args.repeats)
    print(f"[bench] {len(plan)} main jobs of {args.steps} steps, eval size {args.eval_size}: each speed-up on and "
          f"off, alternating")
    for i, (name, side) in enumerate(plan, 1):
        extra = args.train_args + LEVER_EXTRA.get(name, [])
        run = run_once(ROOT, args.steps, args.eval_size, extra, env=variant_env(name if side == "off" else None))
        check_switched(run, name, side)
        seconds = phase_seconds(run, rows[name]["phase"])
        rows[name][side].append(seconds)
        print(f"[bench] {i}/{len(plan)} {name} {side}: {rows[name]['phase']} {seconds:.1f} s | {describe(run)}",
              flush=True)
    print(lever_table(list(rows.values())))
    if args.json:
        args.json.write_text(json.dumps({"argv": sys.argv[1:], "levers": list(rows.values())}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
