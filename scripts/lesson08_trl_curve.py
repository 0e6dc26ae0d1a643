"""Measure lesson 08's loop on several seeds, each beside its learning-rate-0 control; optionally TRL's curve too.

    .venv/bin/python scripts/lesson08_trl_curve.py --seeds 0,1,2          # results/lesson08-trl-curve.json
    .venv/bin/python scripts/lesson08_trl_curve.py --seeds 3 --out /tmp/seeds.json   # one more seed, elsewhere
    .venv/bin/python scripts/lesson08_trl_curve.py --trl                  # also TRL's GRPOTrainer (about 20 minutes)

Lesson 08's check refuses a student's loop whose final reward does not rise above its lr-0 control by a margin, and
05's rerun exercise (rerun_prediction) grades a rerun with one setting changed against the spread of the default settings' seeds: both
read the seeds stored here (helpers.teaching.grpo_math.loop_record, rise_margin). Each seed is the kit's own loop
(nb08.loop_run: nb08.reference_train, the kit's five rewards, LOOP's settings) and its control (grpo_math.
control_run: the same groups sampled and scored with nothing learned; at learning rate 0 AdamW changes nothing).
--trl also runs TRL's GRPOTrainer with the same settings through the kit's command line (`python -m helpers.train`,
one optimizer step per group, a constant learning rate), for comparison. Run it again after changing LOOP.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.messages import say  # noqa: E402
from helpers.teaching.exercises.nb08 import loop_run  # noqa: E402
from helpers.teaching.grpo_math import LOOP, TRL_CURVE, control_run  # noqa: E402


def trl_command(run_dir: Path) -> list[str]:
    """helpers.train with LOOP's settings: the cpu preset (the kit's five rewards), LOOP's group and length, one step
    per group, no schedule."""
    return [sys.executable, "-m", "helpers.train", "--preset", "cpu", "--num-generations", str(LOOP["num_generations"]),
            "--batch-size", str(LOOP["num_generations"]), "--max-completion-length", str(LOOP["max_completion_length"]),
            "--temperature", str(LOOP["temperature"]), "--learning-rate", str(LOOP["learning_rate"]),
            "--max-grad-norm", str(LOOP["max_grad_norm"]), "--num-iterations", "1", "--lr-scheduler-type", "constant",
            "--warmup-steps", "0", "--beta", "0", "--max-steps", str(LOOP["steps"]), "--seed", str(LOOP["seed"]),
            "--eval-size", "1", "--eval-max-new-tokens", "8", "--dashboard", "off", "--run-dir", str(run_dir)]


def trl_run() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd, start = trl_command(Path(tmp) / "run"), time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True)
        rows = [json.loads(line) for line in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines() if line]
    return {"curve": [row["reward"] for row in rows if "reward" in row], "wall_s": round(time.perf_counter() - start, 1),
            "command": " ".join(["python", *cmd[1:-1], "DIR"])}


def seed_run(seed: int) -> dict:
    """The kit's loop on one seed, then its lr-0 control, each timed."""
    run = loop_run(seed)
    start = time.perf_counter()
    control = control_run(seed)
    return {"seed": seed, "curve": run["curve"], "wall_s": run["wall_s"], "control": control,
            "control_wall_s": round(time.perf_counter() - start, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="", help="run the lesson's loop and its control on these seeds (comma-separated)")
    ap.add_argument("--trl", action="store_true", help="also TRL's GRPOTrainer on LOOP's settings (about 20 minutes)")
    ap.add_argument("--out", default=str(ROOT / TRL_CURVE))
    args = ap.parse_args(argv)
    out = Path(args.out)
    data = json.loads(out.read_text()) if out.is_file() else {}
    if data.get("settings") != LOOP:  # another loop's measurements say nothing about this one
        data = {"settings": LOOP, "made_by": "scripts/lesson08_trl_curve.py", "loop_seeds": []}
    data["date"] = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    for seed in [int(s) for s in args.seeds.split(",") if s]:
        data["loop_seeds"] = [s for s in data["loop_seeds"] if s["seed"] != seed] + [seed_run(seed)]
        out.write_text(json.dumps(data, indent=1) + "\n")  # after each seed: a long run keeps its part
        say(f"the lesson's loop, seed {seed}: {data['loop_seeds'][-1]}")
    if args.trl:
        data["trl"] = trl_run()
        out.write_text(json.dumps(data, indent=1) + "\n")
        say(f"TRL's curve ({len(data['trl']['curve'])} steps) written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
