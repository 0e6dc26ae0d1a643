"""Evaluate a saved adapter: greedy accuracy/format and sampled pass@k, before and after, into eval.json.

    python -m helpers.evaluate --run-dir runs/demo --samples 4

Reads the run's config.json (the preset it was trained with) and adapter/, answers the same held-out questions
as helpers.train (GSM8K test split on the GPU preset, the synthetic held-out split on CPU) without and with the
adapter, prints a side-by-side view and writes eval.json in the run folder.

Every refusal (a flag out of range, a cut-off config.json, more questions than the held-out split has, a read-only
folder, a folder another process writes) comes before any model loads, or torch and transformers are imported,
with exit 2 and the fix (tests/test_validation_early.py holds it to that).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields as dataclass_fields
from pathlib import Path

from helpers import data
from helpers.config import Preset, get_preset
from helpers.messages import say
from helpers.run.folder import CONFIG_FILE, RunLock, read_json, write_problem
from helpers.evaluation import (before_after, eval_report, load_before, load_for_eval, pass_at_k_before_after,
                                side_by_side_text, write_eval)

EVAL_FILE = "eval.json"


def flag_problems(samples: int, ks, eval_size: int | None, eval_max_new_tokens: int | None) -> list[str]:
    """Each flag out of its range, named with its value, the range and the fix: checked before anything is read,
    so `--samples -1` no longer fails after minutes of loading and sampling ("1 completions for 0 questions")."""
    problems = []
    if samples < 0:
        problems.append(f"--samples {samples}: must be 0 (no pass@k) or more sampled completions per question. "
                        "Fix: pass e.g. --samples 4, or --samples 0 to skip pass@k")
    if ks:
        given = ",".join(map(str, ks))
        if min(ks) < 1:
            problems.append(f"--k {given}: each k must be 1 or more (pass@k draws k of the samples). Fix: pass e.g. "
                            f"--k 1,{max(2, min(samples, 4))}")
        elif samples == 0:
            problems.append(f"--k {given} with --samples 0: pass@k needs sampled completions. Fix: pass --samples "
                            f"{max(ks)} (or more), or leave out --k")
        elif samples > 0 and max(ks) > samples:
            problems.append(f"--k {max(ks)} is larger than --samples {samples}; pass@k needs k <= samples. Fix: pass "
                            f"--samples {max(ks)}, or only k values up to {samples}")
    for flag, value, example in (("--eval-size", eval_size, 50), ("--eval-max-new-tokens", eval_max_new_tokens, 200)):
        if value is not None and value < 1:
            problems.append(f"{flag} {value}: must be 1 or more. Fix: pass e.g. {flag} {example}, or leave it out "
                            "(the run's own)")
    return problems


def read_config(run_dir) -> dict:
    """The run's config.json, or helpers.run.folder.read_json's refusal (the file, cut off or edited) with an
    evaluation's fix: "pass --overwrite" alone would be a flag of helpers.train, not of this."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: is {run_dir} a run folder written by helpers.train?")
    return read_json(path, required=("name",), fix=(
        "put back a copy (one lies beside the checkpoints when they live elsewhere, e.g. on Drive): it holds the "
        "settings the adapter was trained with, so nothing can be evaluated without it; or train the run again: "
        f"python -m helpers.train --run-dir {run_dir} --overwrite"))


def preset_from_run(run_dir, **overrides):
    """The Preset a run was trained with (its config.json), with optional changes (e.g. eval_size)."""
    saved = read_config(run_dir)
    preset_names = {f.name for f in dataclass_fields(Preset)} - {"name"}  # config.json also names the rewards
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items() if k in preset_names}
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return get_preset(saved["name"]).with_overrides(**fields)


def check_eval_size(preset, run_eval_size: int) -> None:
    """More questions than the held-out split holds: refused at once (helpers.data.eval_size_problem). Counted only
    above the run's own eval_size, which helpers.train already evaluated."""
    if found := data.eval_size_problem(preset, known_good=run_eval_size):
        problem, fix = found
        raise ValueError(f"--eval-size {preset.eval_size}: {problem}. Fix: {fix} (the run evaluated {run_eval_size})")


def _write_problem(run_dir: Path) -> str | None:
    """Why eval.json (and the folder's lock) cannot be written in run_dir, or None: the run folder's probe
    (helpers.run.folder.write_problem), and eval.json opened to append nothing (it is left as it is)."""
    if why := write_problem(run_dir):
        return why
    try:
        if (run_dir / EVAL_FILE).exists():
            with open(run_dir / EVAL_FILE, "a"):
                pass
    except OSError as err:
        return f"{err.strerror or err}: {err.filename or run_dir}"
    return None


def check_writable(run_dir: Path) -> None:
    """A read-only run folder is refused before minutes of evaluating end in a raw OSError on eval.json."""
    if why := _write_problem(run_dir):
        raise ValueError(f"--run-dir {run_dir} is not writable ({why}), and the evaluation writes {EVAL_FILE} "
                         f"there. Fix: copy the run folder somewhere writable (cp -r {run_dir} runs/copy) and pass "
                         "--run-dir runs/copy, or make it writable (chmod u+w)")


def evaluate_run(run_dir, samples: int = 4, ks=None, eval_size: int | None = None, adapter=None,
                 eval_max_new_tokens: int | None = None) -> dict:
    """Greedy before/after (before reused from before.json when it matches) + pass@k; writes eval.json. Holds the
    run folder's lock (helpers.run.folder.RunLock) throughout: a training process in the folder writes eval.json
    too, so a folder in use is refused, never written beside it."""
    if problems := flag_problems(samples, ks, eval_size, eval_max_new_tokens):
        raise ValueError(problems[0])
    run_dir = Path(run_dir)
    trained = preset_from_run(run_dir)
    preset = trained.with_overrides(**{k: v for k, v in (("eval_size", eval_size),
                                                         ("eval_max_new_tokens", eval_max_new_tokens)) if v is not None})
    adapter = Path(adapter) if adapter is not None else run_dir / "adapter"
    if not (adapter / "adapter_config.json").is_file():
        raise FileNotFoundError(f"no saved adapter in {adapter}: train first (python -m helpers.train --run-dir "
                                f"{run_dir}) or pass --adapter")
    check_eval_size(preset, trained.eval_size)
    check_writable(run_dir)
    lock = RunLock(run_dir)  # RunDirError (a ValueError) naming the process that holds it
    try:
        return _evaluate(run_dir, preset, adapter, samples, ks)
    finally:
        lock.release()


def _evaluate(run_dir: Path, preset, adapter: Path, samples: int, ks) -> dict:
    rows = data.heldout_questions(preset)
    model, tokenizer = load_for_eval(preset, adapter)
    before = load_before(run_dir / "before.json", preset)
    say(("before: reusing before.json; evaluating with the adapter" if before else
         "evaluating without, then with the adapter") + " (greedy) ...")
    result = before_after(model, tokenizer, rows, preset, adapter, before=before)
    before, after = result["before"], result["after"]
    pass_k = None
    if samples:
        say(f"sampled pass@k: {samples} samples per question, without and with the adapter ...")
        pass_k = pass_at_k_before_after(model, tokenizer, rows, preset, n=samples, ks=ks, adapter_path=adapter)
    report = eval_report(before, after, preset, pass_at_k=pass_k)
    path = write_eval(run_dir / EVAL_FILE, report)
    print(side_by_side_text(before, after, limit=3))
    if pass_k:
        for when in ("before", "after"):
            ks_text = ", ".join(f"{k} {v:.2f}" for k, v in pass_k[when].items() if k.startswith("pass@"))
            print(f"{when:<7} {ks_text}")
    say(f"wrote {path}")
    return report


def _ks(text: str) -> list[int]:
    """--k: whole numbers, comma-separated."""
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: k values are whole numbers, comma-separated. Fix: e.g. "
                                         "--k 1,2,4") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m helpers.evaluate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", type=Path, required=True, help="a folder written by helpers.train")
    ap.add_argument("--samples", type=int, default=4, help="sampled completions per question for pass@k (0: none)")
    ap.add_argument("--k", type=_ks, help="k values, e.g. 1,2,4 (each 1 to --samples)")
    ap.add_argument("--eval-size", type=int, help="held-out questions, 1 to the split's size (default: the run's)")
    ap.add_argument("--eval-max-new-tokens", type=int, help="1 or more (default: the run's)")
    ap.add_argument("--adapter", type=Path, help="adapter folder (default: <run-dir>/adapter)")
    args = ap.parse_args(argv)
    try:
        evaluate_run(args.run_dir, args.samples, args.k, args.eval_size, args.adapter, args.eval_max_new_tokens)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
