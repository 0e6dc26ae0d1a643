"""Evaluate a saved adapter: greedy accuracy/format and sampled pass@k, before and after, into eval.json.

    python -m helpers.evaluate --run-dir runs/demo --samples 4

Reads the run's config.json (the preset it was trained with) and adapter/, answers the same held-out questions
as helpers.train (GSM8K test split on the GPU preset, the synthetic held-out split on CPU) without and with the
adapter, prints a side-by-side view and writes eval.json in the run folder.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields as dataclass_fields
from pathlib import Path

from helpers.config import Preset, get_preset
from helpers.data import heldout_questions
from helpers.messages import say
from helpers.evaluation import (before_after, eval_report, load_before, load_for_eval, pass_at_k_before_after,
                                side_by_side_text, write_eval)


def preset_from_run(run_dir, **overrides):
    """The Preset a run was trained with (its config.json), with optional changes (e.g. eval_size)."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: is {run_dir} a run folder written by helpers.train?")
    saved = json.loads(path.read_text())
    preset_names = {f.name for f in dataclass_fields(Preset)} - {"name"}  # config.json also names the rewards
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items() if k in preset_names}
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return get_preset(saved["name"]).with_overrides(**fields)


def evaluate_run(run_dir, samples: int = 4, ks=None, eval_size: int | None = None, adapter=None,
                 eval_max_new_tokens: int | None = None) -> dict:
    """Greedy before/after (before reused from before.json when it matches) + pass@k; writes eval.json."""
    run_dir = Path(run_dir)
    preset = preset_from_run(run_dir, eval_size=eval_size, eval_max_new_tokens=eval_max_new_tokens)
    adapter = Path(adapter) if adapter is not None else run_dir / "adapter"
    if not (adapter / "adapter_config.json").is_file():
        raise FileNotFoundError(f"no saved adapter in {adapter}: train first (python -m helpers.train --run-dir "
                                f"{run_dir}) or pass --adapter")
    rows = heldout_questions(preset)
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
    path = write_eval(run_dir / "eval.json", report)
    print(side_by_side_text(before, after, limit=3))
    if pass_k:
        for when in ("before", "after"):
            ks_text = ", ".join(f"{k} {v:.2f}" for k, v in pass_k[when].items() if k.startswith("pass@"))
            print(f"{when:<7} {ks_text}")
    say(f"wrote {path}")
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m helpers.evaluate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", type=Path, required=True, help="a folder written by helpers.train")
    ap.add_argument("--samples", type=int, default=4, help="sampled completions per question for pass@k (0: none)")
    ap.add_argument("--k", type=lambda s: [int(x) for x in s.split(",")], help="k values, e.g. 1,2,4 (<= --samples)")
    ap.add_argument("--eval-size", type=int, help="held-out questions (default: the run's)")
    ap.add_argument("--eval-max-new-tokens", type=int)
    ap.add_argument("--adapter", type=Path, help="adapter folder (default: <run-dir>/adapter)")
    args = ap.parse_args(argv)
    if args.k and args.samples and max(args.k) > args.samples:
        print(f"error: --k {max(args.k)} is larger than --samples {args.samples}; pass@k needs k <= samples",
              file=sys.stderr)
        return 2
    try:
        evaluate_run(args.run_dir, args.samples, args.k, args.eval_size, args.adapter, args.eval_max_new_tokens)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
