"""The capstone's checker: run a student's train_grpo.py for 2 GRPO steps on the CPU model and check what it wrote.

    .venv/bin/python -m helpers.capstone train_grpo.py

The contract (capstone/README.md): the script accepts --max-steps N and --output-dir DIR, trains with TRL's
GRPOTrainer, and saves the LoRA adapter to DIR/adapter. Passing means: it exits cleanly, the trainer logged N
steps with rewards, and the adapter's LoRA B matrices (zero at initialisation) are no longer all zero.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
STEPS = 2


class CapstoneError(AssertionError):
    """What is missing from the script's run, and what to do."""


def check(script, steps: int = STEPS, timeout: int = 900) -> dict:
    """Run the script for `steps` GRPO steps in a temporary folder; raise CapstoneError naming the problem."""
    script = Path(script).resolve()
    if not script.is_file():
        raise CapstoneError(f"{script} does not exist. Fix: write train_grpo.py (capstone/README.md), then check it.")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(KIT), os.environ.get("PYTHONPATH", "")])}
        r = subprocess.run([sys.executable, str(script), "--max-steps", str(steps), "--output-dir", str(out)],
                           cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise CapstoneError(f"the script failed (exit {r.returncode}); its last output:\n{r.stderr[-2000:]}")
        adapter = out / "adapter"
        weights = adapter / "adapter_model.safetensors"
        if not (adapter / "adapter_config.json").is_file() or not weights.is_file():
            raise CapstoneError(f"no LoRA adapter in {adapter}. Fix: end with model.save_pretrained(f\"{{args.output_dir}}"
                                "/adapter\") (peft saves adapter_config.json and adapter_model.safetensors).")
        from safetensors.torch import load_file

        b = [t for name, t in load_file(str(weights)).items() if "lora_B" in name]
        if not b or not any(float(t.abs().sum()) > 0 for t in b):
            raise CapstoneError("the adapter's LoRA B matrices are all zero: no optimizer step changed them. Fix: "
                                "check that trainer.train() ran with the LoRA model and that the rewards differ "
                                "within a group (a group where all completions tie teaches nothing).")
        logs = [line for line in r.stdout.splitlines() + r.stderr.splitlines() if "'reward'" in line]
        return {"adapter": str(adapter), "lora_b_tensors": len(b), "logged_steps": len(logs)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m helpers.capstone path/to/train_grpo.py", file=sys.stderr)
        return 2
    try:
        result = check(argv[0])
    except CapstoneError as err:
        print(f"Not yet: {err}", file=sys.stderr)
        return 1
    print(f"Passed: {STEPS} GRPO steps ran and the adapter changed ({json.dumps(result)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
