"""Store TRL's reward curve for lesson 08's loop, and measure how the kit's own loop learns on several seeds.

    .venv/bin/python scripts/lesson08_trl_curve.py                 # TRL's GRPOTrainer: results/lesson08-trl-curve.json
    .venv/bin/python scripts/lesson08_trl_curve.py --seeds 0,1,2   # also the lesson's loop (reference_train) per seed
    .venv/bin/python scripts/lesson08_trl_curve.py --no-trl --seeds 3 --out /tmp/seeds.json   # the loop only

Lesson 08's check compares the student's reward curve with TRL's GRPOTrainer on the same settings
(helpers.teaching.grpo_math.LOOP: model, group, completion length, learning rate, steps, seed, the format reward).
Running TRL beside the student's loop in the notebook would double its time in CI, so TRL's curve is made here, once,
with the kit's own command line (`python -m helpers.train`: TRL's GRPOTrainer on the embedded model, one optimizer
step per sampled group, a constant learning rate), and stored. Run it again after changing LOOP.
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

import torch  # noqa: E402

from helpers.config import PRESETS  # noqa: E402
from helpers.data import training_questions  # noqa: E402
from helpers.model import load_cpu  # noqa: E402
from helpers.teaching.exercises.nb08 import reference_train  # noqa: E402
from helpers.teaching.grpo_math import LOOP, TRL_CURVE, loop_tools  # noqa: E402


def trl_command(run_dir: Path) -> list[str]:
    """helpers.train with LOOP's settings: the cpu preset, LOOP's group and length, one step per group, no schedule."""
    return [sys.executable, "-m", "helpers.train", "--preset", "cpu", "--num-generations", str(LOOP["num_generations"]),
            "--batch-size", str(LOOP["num_generations"]), "--max-completion-length", str(LOOP["max_completion_length"]),
            "--temperature", str(LOOP["temperature"]), "--learning-rate", str(LOOP["learning_rate"]),
            "--max-grad-norm", str(LOOP["max_grad_norm"]), "--num-iterations", "1", "--lr-scheduler-type", "constant",
            "--warmup-steps", "0", "--beta", "0", "--max-steps", str(LOOP["steps"]), "--seed", str(LOOP["seed"]),
            "--reward", f"helpers.rewards:{LOOP['reward']}", "--eval-size", "1", "--eval-max-new-tokens", "8",
            "--dashboard", "off", "--run-dir", str(run_dir)]


def trl_run() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd, start = trl_command(Path(tmp) / "run"), time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True)
        rows = [json.loads(line) for line in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines() if line]
    key = f"rewards/{LOOP['reward']}/mean"
    curve = [row[key] for row in rows if key in row]
    return {"curve": curve, "wall_s": round(time.perf_counter() - start, 1),
            "command": " ".join(["python", *cmd[1:-1], "DIR"])}


def loop_run(seed: int) -> dict:
    """The lesson's loop (nb08.reference_train, the kit's solution) on the real model with the lesson's tools."""
    p = PRESETS["cpu"]
    model, tokenizer = load_cpu(p)
    sample, score = loop_tools(model, tokenizer, training_questions(p, limit=LOOP["steps"]), seed=seed)
    optimizer = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=LOOP["learning_rate"],
                                  weight_decay=0.0)
    start = time.perf_counter()
    curve = reference_train(model, optimizer, sample, score, LOOP["steps"], max_grad_norm=LOOP["max_grad_norm"],
                            temperature=LOOP["temperature"])
    return {"seed": seed, "curve": curve, "wall_s": round(time.perf_counter() - start, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="", help="also run the lesson's loop on these seeds (comma-separated)")
    ap.add_argument("--no-trl", action="store_true", help="only the loop's seeds, added to the file already there")
    ap.add_argument("--out", default=str(ROOT / TRL_CURVE))
    args = ap.parse_args(argv)
    out = Path(args.out)
    data = json.loads(out.read_text()) if args.no_trl and out.is_file() else {}
    if not args.no_trl:
        data = {"settings": LOOP, "made_by": "scripts/lesson08_trl_curve.py",
                "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), **trl_run()}
        out.write_text(json.dumps(data, indent=1) + "\n")
        print(f"[grpo-kit] TRL's curve ({len(data['curve'])} steps) written to {out}")
    for seed in [int(s) for s in args.seeds.split(",") if s]:
        data.setdefault("loop_seeds", []).append(loop_run(seed))  # written after each seed: a long run keeps its part
        out.write_text(json.dumps(data, indent=1) + "\n")
        print(f"[grpo-kit] the lesson's loop, seed {seed}: {data['loop_seeds'][-1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
