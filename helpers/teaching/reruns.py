"""Lesson 05's rerun exercise (rerun_prediction), the runs themselves: lesson 08's loop (nb08.loop_run, the kit's
loop on grpo_math.LOOP's settings and steps) with one setting changed, kept on this machine under the key of
everything that decides it (helpers.reuse) and read back when an identical rerun comes (the notebook run again, the
homework's 05). The default settings are not rerun: their seeds are stored (grpo_math.loop_record)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import reuse as kit_reuse
from helpers import speedups
from helpers.messages import say
from helpers.model import cache_dir, prepare_embedded_model
from helpers.teaching.grpo_math import LOOP
from helpers.teaching.measured_runs import settings_text

STEPS = LOOP["steps"]  # 08's loop as the stored seeds ran it: at 6 steps their final rewards spread 0.61-1.15, at 12
SEED = 0  # 1.80-1.92 (results/lesson08-trl-curve.json), so only a long enough run tells a change from a seed


def loop_reruns(changes: list[dict], seed: int = SEED, reuse: bool = True, steps: int = STEPS) -> list[dict]:
    """One run of 08's loop per change ({setting: value}), `steps` steps from the base model, seed `seed`: each run's
    curve (CI's 05 runs fewer steps: class_plans' RERUN_STEPS). A run is deterministic on one machine, so its row is
    kept (helpers.reuse, keyed by rerun_key) and an identical rerun reads it back and says so; reuse=False runs every
    change again."""
    rows, machine = [], rerun_machine()
    for change in changes:
        key = rerun_key({"steps": steps, **change}, seed, machine)
        path = _rerun_path(key)
        row = kit_reuse.read(path, key) if reuse else None
        if row is None:
            row = _run({"steps": steps, **change}, seed)
            kit_reuse.write(path, key, row)
        else:
            say(f"reusing an identical earlier run of 08's loop ({change_text(change)}, {steps} steps) from {path}; "
                "reuse=False runs it again")
        rows.append(row)
    return rows


def _run(change: dict, seed: int) -> dict:
    from helpers.teaching.exercises.nb08 import loop_run

    return loop_run(seed, change)  # the change names its steps: loop_reruns adds them


def _rerun_path(key: dict) -> Path:
    return cache_dir() / "reruns" / f"{kit_reuse.digest(key)}.json"


def rerun_machine() -> dict:
    """What decides every rerun on this machine besides its settings: the CPU speed-ups on, the embedded model's
    files, the kit's own code and the libraries (helpers.reuse). The same for each change of one rerun."""
    return {"speedups": speedups.active(), "model_files": kit_reuse.model_files(prepare_embedded_model()),
            "kit": kit_reuse.kit_sources(), "libraries": kit_reuse.libraries()}


def rerun_key(change: dict, seed: int, machine: dict) -> dict:
    """What decides a rerun's curve: the loop's settings with the change, its steps and seed, the machine's part."""
    return {"loop": {**LOOP, "steps": STEPS, **change}, "seed": seed, **machine}


def change_text(change: dict) -> str:
    return settings_text(change) or "the default settings"


def loop_reruns_here_or_apart(changes: list[dict], reuse: bool = True, steps: int = STEPS) -> list[dict]:
    """loop_reruns here; in a fresh process when Unsloth is loaded (it patches TRL and transformers for the GPU),
    whose lines about reused runs are shown here too."""
    if "unsloth" not in sys.modules:
        return loop_reruns(changes, reuse=reuse, steps=steps)
    code = ("import json, sys; from helpers.teaching import reruns; print(json.dumps(reruns.loop_reruns("
            "json.loads(sys.argv[1]), reuse=sys.argv[2] == 'reuse', steps=int(sys.argv[3]))))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(changes), "reuse" if reuse else "again", str(steps)],
                         capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[2])
    lines = out.stdout.strip().splitlines()
    for line in lines[:-1]:
        if line.startswith("[grpo-kit] reusing"):
            print(line)
    return json.loads(lines[-1])
