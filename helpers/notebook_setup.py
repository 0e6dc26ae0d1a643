"""The setup cell's front door: what the one setup cell of every course notebook calls.

The setup cell is the same in every notebook (SETUP_CELL below is its text; tests check the notebooks carry it).
It finds the kit's folder (on Colab: an earlier clone, an uploaded and unzipped copy, a copy on Google Drive, or
a fresh clone), puts it on sys.path and calls into this module:

    setup.install_if_colab(ROOT, lesson=LESSON)  # Colab: the lesson's pinned stack, at most once per runtime
    kit = setup.prepare(PRESET, lesson=LESSON, drive=USE_DRIVE, ...)  # runtime, preset, guards, run folder

The Colab half (the lesson table, finding the kit, the pinned install and restart, the Drive run folder) is
helpers.colab; docs/colab.md explains the design. Like helpers.colab it imports only the standard
library and helpers.runtime at import time, so it can run *before* the pinned stack (which replaces Colab's torch) is
installed (tests/test_notebook_helpers.py checks it).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

# helpers.runtime and helpers.colab load torch only inside functions: safe before the Colab install.
from helpers import runtime as rt
from helpers.colab import KIT_DIRNAME, LESSONS, kit_root, lesson_needs_gpu
from helpers.colab import drive_run_dir_or_none  # Drive, or None: the run folder stays here (files handed on)
from helpers.colab import install_if_colab  # noqa: F401 - the setup cell calls it here
from helpers.messages import say, warn  # the standard library only

# The kit's GitHub owner/name. scripts/set_repo.py changes it here and in every badge and clone URL;
# tests/test_repo_slug.py checks that they all agree.
REPO_SLUG = "grpo-course-kit/grpo-course-kit"
DEFAULT_RUN_DIR = "runs/course"

# The setup cell, one text for every notebook (scripts/make_notebooks.py writes it where a lesson says
# `# {{setup cell}}`). Only the part that must run before helpers/ can be imported lives in it: finding (or fetching)
# the kit. Every name it reads (PRESET, LESSON, USE_DRIVE, RUN_DIR, ...) comes from the notebook's parameters cell,
# just above it.
SETUP_CELL = """\
# Setup - the same cell in every notebook (helpers/notebook_setup.py). Colab: finds the kit (an earlier clone, an uploaded zip, a copy on Drive) or clones it, installs its pinned stack at most once per runtime.
import glob, os, subprocess, sys, zipfile
from pathlib import Path
def kit_dirs():
    return [p for p in [Path.cwd(), *Path.cwd().parents] if (p / "helpers" / "notebook_setup.py").is_file()] + sorted(
        Path(f).resolve().parents[1] for f in glob.glob("*/helpers/notebook_setup.py") + glob.glob("drive/MyDrive/*/helpers/notebook_setup.py"))
if any(k.startswith("COLAB_") for k in os.environ) and not kit_dirs():  # Colab's working directory is /content
    [zipfile.ZipFile(z).extractall() for z in glob.glob("*.zip") if "helpers/notebook_setup.py" in str(zipfile.ZipFile(z).namelist())]
    if not kit_dirs(): subprocess.run(["git", "clone", "-q", "https://github.com/{slug}", "{dirname}"], check=True)
ROOT = kit_dirs()[0]
if str(ROOT) not in sys.path: sys.path.insert(0, str(ROOT))
from helpers import notebook_setup as setup
setup.install_if_colab(ROOT, lesson=LESSON)
kit = setup.prepare(PRESET, lesson=LESSON, drive=USE_DRIVE, run_dir=RUN_DIR, max_steps=MAX_STEPS, eval_size=EVAL_SIZE,
                    num_generations=NUM_GENERATIONS, per_device_train_batch_size=BATCH_SIZE,
                    max_completion_length=MAX_COMPLETION_LENGTH, eval_max_new_tokens=EVAL_MAX_NEW_TOKENS)""".format(
    slug=REPO_SLUG, dirname=KIT_DIRNAME)

# The names SETUP_CELL reads from the parameters cell.
SETUP_CELL_PARAMETERS = ("PRESET", "LESSON", "USE_DRIVE", "RUN_DIR", "MAX_STEPS", "EVAL_SIZE", "NUM_GENERATIONS",
                         "BATCH_SIZE", "MAX_COMPLETION_LENGTH", "EVAL_MAX_NEW_TOKENS")


def notebook_parameters() -> dict[str, str]:
    """{preset field: the parameter the setup cell passes as it}, read from SETUP_CELL itself
    (`eval_size=EVAL_SIZE, per_device_train_batch_size=BATCH_SIZE, ...`)."""
    return dict(re.findall(r"(\w+)=([A-Z][A-Z0-9_]+)\b", SETUP_CELL))


def _with_parameter(err):
    """A preset refusal of a value a student typed in the parameters cell also names that parameter."""
    parameter = notebook_parameters().get(getattr(err, "field", None))
    if parameter is None:
        return err
    shown = repr(err.example) if err.example is not None else "..."
    return type(err)(f"{err} (in the notebook's parameters cell: {parameter} = {shown}; with papermill: "
                     f"-p {parameter} {shown})")


@dataclass
class Kit:
    """What the setup cell hands the rest of a notebook."""

    root: Path
    runtime: object  # helpers.runtime.Runtime
    preset: object  # helpers.config.Preset
    run_dir: Path
    overrides: dict

    @property
    def on_gpu(self) -> bool:
        return self.preset.backend.uses_unsloth  # the lessons' GPU path: Unsloth + vLLM on one GPU


def resolve_preset_name(preset_name: str | None, runtime, lesson: str | None = None) -> str:
    """None means automatic: 't4' for a lesson that needs the T4 on a runtime with a GPU, 'cpu' otherwise (a CPU
    lesson installs the CPU stack, which has no Unsloth, even on a T4 runtime)."""
    if preset_name:
        return preset_name
    return "t4" if runtime.has_gpu and lesson_needs_gpu(lesson) else "cpu"


# --------------------------------------------------------------------------------------------- prepare


def prepare(preset_name: str | None = None, run_dir: str | os.PathLike | None = DEFAULT_RUN_DIR,
            root: str | os.PathLike | None = None, quiet: bool = False, lesson: str | None = None,
            drive: bool | None = False, mount=None, **overrides) -> Kit:
    """Detect the runtime, choose and validate the preset, and run the guards before anything is loaded.

    lesson: the notebook's name (LESSON in its parameters cell). A lesson that needs no GPU ("no GPU needed" in
    LESSONS, docs/colab.md) gets the cpu preset (the embedded model) on any runtime, a T4 one included; 05, the T4
    lab, stops on a CPU runtime with the menu path, unless PRESET = "cpu" asks for the embedded model. None: needs
    the T4 (as the older setup cell did).
    drive: Colab only - the run folder lives on Google Drive (MyDrive/grpo-kit/runs/<RUN_DIR name>), whole,
    adapter included, so a later runtime (05 after 04, 06 after 05, another day) finds it. None: on Colab yes,
    elsewhere no (the lessons that carry state between runtimes, 04-06, default to it). `mount` replaces google.colab.drive.mount.
    overrides: preset fields (max_steps, eval_size, num_generations, per_device_train_batch_size,
    max_completion_length, ...); None values mean "the preset's own" and are dropped.
    Raises helpers.runtime.RuntimeProblem / helpers.config.PresetError with the fix in the message.
    """
    # here, not at the top: this module imports only the standard library (and helpers.runtime) until the install
    from helpers.config import PresetError, get_preset, precision_flags
    from helpers.run import guard

    needs_gpu = lesson_needs_gpu(lesson)
    root = Path(root) if root is not None else kit_root()
    runtime = rt.detect()
    drive_required = bool(drive)  # USE_DRIVE = True: a Drive that cannot be mounted is an error, not a fallback
    if drive is None:
        drive = runtime.on_colab
    if runtime.on_colab and not runtime.has_gpu and needs_gpu and not preset_name:
        raise rt.no_gpu(on_colab=True)  # the lesson asks for the T4; no preset named
    overrides = {k: v for k, v in overrides.items() if v is not None}
    try:
        preset = get_preset(resolve_preset_name(preset_name, runtime, lesson), **overrides)
    except PresetError as err:
        raise _with_parameter(err) from None
    # A GPU preset without a GPU -> the fix; too little free memory -> said now, before anything loads; Unsloth first.
    warnings = guard.check_before_loading(preset, runtime)
    want_gpu = preset.backend.uses_unsloth
    run_dir = Path(run_dir or DEFAULT_RUN_DIR)
    drive_dir = drive_run_dir_or_none(run_dir, required=drive_required, mount=mount) if drive else None
    drive = drive_dir is not None  # None: Drive could not be mounted (said): the run folder stays on this disk
    if drive:
        run_dir = drive_dir
        run_dir.mkdir(parents=True, exist_ok=True)
    elif not run_dir.is_absolute():
        run_dir = root / run_dir
    kit = Kit(root=root, runtime=runtime, preset=preset, run_dir=run_dir, overrides=overrides)
    if not quiet:
        say(f"kit: {root}")
        say(f"runtime: {runtime.describe()}")
        if lesson is not None and not needs_gpu:
            say(f"lesson {lesson}: no GPU needed ({LESSONS[lesson].why})")
        say(f"preset: {preset.name} - {preset.description}")
        if overrides:
            say(f"overrides: {overrides}")
        flags = precision_flags(runtime) if want_gpu else precision_flags(rt.Runtime(on_colab=runtime.on_colab))
        say(f"precision flags for training: {flags}")
        say(f"run folder: {run_dir}" + (" (Google Drive: kept when this runtime ends)" if drive else ""))
        for w in warnings:
            warn(f"warning: {w}")
    return kit
