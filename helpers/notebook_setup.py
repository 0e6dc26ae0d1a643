"""What the one setup cell of every course notebook calls: find the kit, install on Colab, guard the runtime.

The setup cell is the same in every notebook (tests/test_notebooks.py checks that). It only finds the kit's
folder (cloning it on Colab), puts it on sys.path and calls into this module:

    setup.install_if_colab(ROOT)      # Colab: pip install -r requirements.txt once, then restart the session
    kit = setup.prepare(PRESET, ...)  # detect the runtime, pick and validate the preset, run the guards

This module imports only the standard library at import time, so it can run *before* the pinned stack
(which replaces Colab's torch) is installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_SLUG = "grpo-course-kit/grpo-course-kit"  # placeholder until the kit has its public home (docs/notebooks.md)
COLAB_DIR = Path("/content/grpo-course-kit")
INSTALL_MARKER = ".grpo-kit-colab-installed"
# The t4 preset is sized for this much GPU memory (its 7 GB budget); the guard asks for it free before loading.
T4_BUDGET_GB = 7.0
DEFAULT_RUN_DIR = "runs/course"


# helpers.runtime imports torch only inside detect(), so this is safe before the Colab install.
from helpers.runtime import on_colab  # noqa: E402  (re-exported for the setup cell)


def kit_root(start: str | os.PathLike | None = None) -> Path:
    """The kit's folder: the first of `start` (default: the cwd) and its parents holding helpers/__init__.py."""
    start = Path(start or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / "helpers" / "__init__.py").is_file():
            return folder
    if (COLAB_DIR / "helpers" / "__init__.py").is_file():
        return COLAB_DIR
    raise FileNotFoundError(
        f"could not find the course kit (a folder with helpers/) in {start} or above. Fix: open the notebook from "
        "the kit's notebooks/ folder, or on Colab run the setup cell, which clones the kit."
    )


def install_if_colab(root: str | os.PathLike, restart: bool = True) -> bool:
    """On Colab, install the pinned GPU stack (requirements.txt) once; elsewhere do nothing. True if installed now.

    The stack replaces Colab's torch. If torch (or another replaced package) was already imported in this
    session, the process must restart: this kills the kernel (Colab restarts it by itself) after saying so; run
    the notebook again from the top and the marker file makes the second run skip the install. If none was
    imported (a fresh session, the usual case), it goes straight on.
    """
    if not on_colab():
        return False
    root = Path(root)
    marker = root / INSTALL_MARKER
    if marker.exists():
        return False
    print("[grpo-kit] Colab: installing the kit's pinned stack (requirements.txt); this takes a few minutes ...")
    os.environ.setdefault("UNSLOTH_VLLM_STANDBY", "0")
    cmd = [sys.executable, "-m", "pip", "install", "-q", "-r", str(root / "requirements.txt")]
    result = subprocess.run(cmd)
    if result.returncode != 0:
        # docs/gpu-stack.md: certifi may not resolve; install the rest, then unsloth without its dependencies.
        print("[grpo-kit] full install failed; retrying with unsloth/unsloth_zoo installed --no-deps ...")
        lines = [line for line in (root / "requirements.txt").read_text().splitlines()
                 if line.strip() and not line.lstrip().startswith(("#", "unsloth"))]
        rest = root / ".requirements-without-unsloth.txt"
        rest.write_text("\n".join(lines) + "\n")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", str(rest)], check=True)
        unsloth = [line.strip() for line in (root / "requirements.txt").read_text().splitlines()
                   if line.strip().startswith("unsloth")]
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *unsloth], check=True)
    marker.write_text("installed\n")
    stale = sorted(m for m in RELOAD_SENSITIVE if m in sys.modules)
    if not stale:
        # Nothing the install replaced was imported yet (the reference Unsloth notebooks rely on the same), so
        # this Python process will import the new versions: no restart needed.
        print("[grpo-kit] Installed.")
        return True
    print(f"[grpo-kit] Installed. {', '.join(stale)} had already been imported in this session, so the session "
          "restarts now to load the new versions. When it is back, run this notebook again from the top: the "
          "install is skipped the second time.")
    if restart:
        sys.stdout.flush()
        os.kill(os.getpid(), 9)  # Colab restarts a dead kernel by itself; a normal exit would not reload torch
    return True


# Modules requirements.txt replaces or pins: if one is already imported, the new version needs a fresh process.
RELOAD_SENSITIVE = ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "vllm", "unsloth",
                    "bitsandbytes", "triton", "xformers", "torchvision", "torchaudio", "numpy")


@dataclass
class Kit:
    """What the setup cell hands the rest of a notebook."""

    root: Path
    runtime: object  # helpers.runtime.Runtime
    preset: object  # helpers.training.Preset
    run_dir: Path
    overrides: dict

    @property
    def on_gpu(self) -> bool:
        return self.preset.backend == "unsloth"

    def train_argv(self, run_dir: str | os.PathLike | None = None, overwrite: bool = False) -> list[str]:
        """The `python -m helpers.train` arguments for this preset and its overrides (for helpers.train.parse_args)."""
        flags = {"max_steps": "--max-steps", "eval_size": "--eval-size", "learning_rate": "--learning-rate",
                 "num_generations": "--num-generations", "per_device_train_batch_size": "--batch-size",
                 "max_completion_length": "--max-completion-length", "seed": "--seed"}
        if "eval_max_new_tokens" in self.overrides and train_accepts("--eval-max-new-tokens"):
            flags["eval_max_new_tokens"] = "--eval-max-new-tokens"
        argv = ["--preset", self.preset.name, "--run-dir", str(run_dir or self.run_dir)]
        for name, flag in flags.items():
            if name in self.overrides:
                argv += [flag, str(self.overrides[name])]
        if overwrite:
            argv.append("--overwrite")
        return argv


def train_accepts(flag: str) -> bool:
    """Whether `python -m helpers.train` knows this option (newer flags are passed only when it does)."""
    import contextlib
    import io

    from helpers import train

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            train.parse_args([flag, "1"])
    except SystemExit:
        return False
    return True


def import_unsloth_first() -> None:
    """GPU path: import Unsloth before anything imports TRL/transformers, so its patches apply."""
    from helpers.model import import_unsloth

    import_unsloth()


def need_free_gb(preset, runtime) -> float:
    """Free GPU memory to ask for before loading: the predicted peak (helpers.memory, as helpers.train does),
    else the t4 preset's 7 GB budget."""
    try:
        from helpers.memory import estimate

        return float(estimate(preset, gpu=runtime.total_gpu_gb, budget_gb=None).peak_gb)
    except Exception:  # noqa: BLE001 - no memory model for this preset/card: fall back to the budget
        return T4_BUDGET_GB


def resolve_preset_name(preset_name: str | None, runtime) -> str:
    """None means automatic: 't4' when a GPU is visible, 'cpu' otherwise."""
    if preset_name:
        return preset_name
    return "t4" if runtime.has_gpu else "cpu"


def prepare(preset_name: str | None = None, run_dir: str | os.PathLike | None = DEFAULT_RUN_DIR,
            root: str | os.PathLike | None = None, quiet: bool = False, **overrides) -> Kit:
    """Detect the runtime, choose and validate the preset, and run the guards before anything is loaded.

    overrides: preset fields (max_steps, eval_size, num_generations, per_device_train_batch_size,
    max_completion_length, ...); None values mean "the preset's own" and are dropped.
    Raises helpers.runtime.RuntimeProblem / helpers.training.PresetError with the fix in the message.
    """
    from helpers import runtime as rt
    from helpers.training import get_preset, precision_flags, validate

    root = Path(root) if root is not None else kit_root()
    runtime = rt.detect()
    overrides = {k: v for k, v in overrides.items() if v is not None}
    preset = get_preset(resolve_preset_name(preset_name, runtime), **overrides)
    validate(preset, runtime)
    want_gpu = preset.backend == "unsloth"
    # No GPU on Colab -> the menu path; a GPU preset without a GPU -> the fix; too little free memory -> said now.
    warnings = rt.check(runtime, want_gpu=want_gpu, need_free_gb=need_free_gb(preset, runtime) if want_gpu else None)
    if want_gpu:
        import_unsloth_first()
    run_dir = Path(run_dir or DEFAULT_RUN_DIR)
    if not run_dir.is_absolute():
        run_dir = root / run_dir
    kit = Kit(root=root, runtime=runtime, preset=preset, run_dir=run_dir, overrides=overrides)
    if not quiet:
        print(f"[grpo-kit] kit: {root}")
        print(f"[grpo-kit] runtime: {runtime.describe()}")
        print(f"[grpo-kit] preset: {preset.name} - {preset.description}")
        if overrides:
            print(f"[grpo-kit] overrides: {overrides}")
        flags = precision_flags(runtime) if want_gpu else precision_flags(rt.Runtime(on_colab=runtime.on_colab))
        print(f"[grpo-kit] precision flags for training: {flags}")
        print(f"[grpo-kit] run folder: {run_dir}")
        for w in warnings:
            print(f"[grpo-kit] warning: {w}")
    return kit
