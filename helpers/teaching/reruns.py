"""Lesson 05's rerun exercise, the runs themselves: one short run of the cpu preset per change of one setting, the
logs of each run's first sampled batch, kept on this machine under the key of everything that decides them
(helpers.reuse) and read back when an identical rerun comes (the notebook run again, the homework's 05)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from helpers import reuse as kit_reuse
from helpers import speedups
from helpers.config import get_preset
from helpers.messages import say
from helpers.model import cache_dir, prepare_embedded_model
from helpers.teaching.measured_runs import settings_text


def rerun_preset(seed: int = 0):
    """The short run the rerun exercise compares: the cpu preset, one step of one group of 4 (the same on every
    runtime and in CI, so the kit's own rerun, RERUN_MEASURED, is what a student's reproduces)."""
    return get_preset("cpu").with_overrides(num_generations=4, per_device_train_batch_size=4, max_steps=1, eval_size=1,
                                            train_size=8, seed=seed)


def first_batches(changes: list[dict], seed: int = 0, reuse: bool = True) -> list[dict]:
    """One short run of rerun_preset per change, through the kit's pipeline (no evaluation, no checkpoint, each in
    a temporary folder): the logs of each run's first sampled batch. The model is loaded once and its adapter put
    back between runs, so each starts from the same weights.

    A run is deterministic on one machine, so its row is kept (helpers.reuse, keyed by rerun_key) and an identical
    rerun (the notebook run again after a disconnect, the homework's 05) reads it back and says so; reuse=False runs
    every change again."""
    loaded, rows, machine = {}, [], rerun_machine()
    for change in changes:
        preset = rerun_preset(seed).with_overrides(**change)
        key = rerun_key(preset, machine)
        path = _rerun_path(key)
        row = kit_reuse.read(path, key) if reuse else None
        if row is None:
            row = _first_batch(preset, loaded)
            kit_reuse.write(path, key, row)
        else:
            say(f"reusing the first batch of an identical earlier run ({change_text(change)}) from {path}; "
                "reuse=False runs it again")
        rows.append(row)
    return rows


def _first_batch(preset, loaded: dict) -> dict:
    """The first sampled batch's log of a one-step run of preset. loaded: the model the first run loaded and its
    adapter's starting weights (filled here), put back so each run starts from the same weights."""
    from helpers.run import pipeline
    from helpers.run.metrics import read_metrics

    run_dir = Path(tempfile.mkdtemp(prefix="grpo-rerun-"))
    state = pipeline.start(preset, pipeline.RunOptions(run_dir=str(run_dir), overwrite=True, save_steps=0,
                                                       dashboard="off"))
    if not loaded:
        loaded["model"] = pipeline.load_model(state)
        loaded["start"] = {k: v.detach().clone() for k, v in loaded["model"][0].state_dict().items() if "lora_" in k}
    else:
        loaded["model"][0].load_state_dict(loaded["start"], strict=False)
        state.model, state.tokenizer = loaded["model"]
    train_dataset, _ = pipeline.load_data(state)
    pipeline.train(state, pipeline.build_trainer(state, train_dataset))
    state.folder.release()
    return next(r for r in read_metrics(run_dir / "metrics.jsonl") if "reward" in r)


def _rerun_path(key: dict) -> Path:
    return cache_dir() / "reruns" / f"{kit_reuse.digest(key)}.json"


def rerun_machine() -> dict:
    """What decides every rerun on this machine besides its preset: the CPU speed-ups on, the embedded model's
    files, the kit's own code and the libraries (helpers.reuse). The same for each change of one rerun."""
    return {"speedups": speedups.active(), "model_files": kit_reuse.model_files(prepare_embedded_model()),
            "kit": kit_reuse.kit_sources(), "libraries": kit_reuse.libraries()}


def rerun_key(preset, machine: dict) -> dict:
    """What decides a rerun's first batch: every field of its preset, and the machine's part (rerun_machine)."""
    return {"preset": preset.to_dict(), **machine}


def change_text(change: dict) -> str:
    return settings_text(change) or "the preset"


def first_batches_here_or_apart(changes: list[dict], reuse: bool = True) -> list[dict]:
    """first_batches here; in a fresh process when Unsloth is loaded (it patches TRL for the GPU), whose lines
    about reused runs are shown here too."""
    if "unsloth" not in sys.modules:
        return first_batches(changes, reuse=reuse)
    code = ("import json, sys; from helpers.teaching import reruns; "
            "print(json.dumps(reruns.first_batches(json.loads(sys.argv[1]), reuse=sys.argv[2] == 'reuse')))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(changes), "reuse" if reuse else "again"],
                         capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[2])
    lines = out.stdout.strip().splitlines()
    for line in lines[:-1]:
        if line.startswith("[grpo-kit] reusing"):
            print(line)
    return json.loads(lines[-1])
