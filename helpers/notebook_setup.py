"""What the one setup cell of every course notebook calls: find the kit, install on Colab, guard the runtime.

The setup cell is the same in every notebook (SETUP_CELL below is its text; tests check the notebooks carry it).
It finds the kit's folder (on Colab: an earlier clone, an uploaded and unzipped copy, a copy on Google Drive, or
a fresh clone), puts it on sys.path and calls into this module:

    setup.install_if_colab(ROOT, lesson=LESSON)  # Colab: the lesson's pinned stack, at most once per runtime
    kit = setup.prepare(PRESET, lesson=LESSON, drive=USE_DRIVE, ...)  # runtime, preset, guards, run folder

The Colab design (05 is the one lesson on a T4; the others run on a CPU runtime, and Drive carries 04's reward and
05's run between them) is in docs/colab.md; LESSONS below is its table. This module imports only the standard library at import time, so it
can run *before* the pinned stack (which replaces Colab's torch) is installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

# The kit's GitHub owner/name. scripts/set_repo.py changes it here and in every badge and clone URL;
# tests/test_repo_slug.py checks that they all agree.
REPO_SLUG = "grpo-course-kit/grpo-course-kit"
KIT_DIRNAME = "grpo-course-kit"
DEFAULT_RUN_DIR = "runs/course"

# helpers.runtime (and helpers.model, which it imports) load torch only inside functions: safe before the Colab install.
from helpers import runtime as rt  # noqa: E402
from helpers.runtime import COLAB_CONTENT, DRIVE_KIT_FOLDER, on_colab  # noqa: E402  (on_colab: for the setup cell)

COLAB_DIR = COLAB_CONTENT / KIT_DIRNAME

# The setup cell, one text for every notebook (scripts/make_notebooks.py writes it). Only the part that must run
# before helpers/ can be imported lives in it: finding (or fetching) the kit. Every name it reads (PRESET, LESSON,
# USE_DRIVE, RUN_DIR, ...) comes from the notebook's parameters cell, just above it.
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
def colab_badge(notebook: str | os.PathLike) -> str:
    """The "Open In Colab" badge (markdown) for a notebook, given its path inside the kit (notebooks/05_train.ipynb)."""
    rel = Path(notebook).as_posix()
    return (f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            f"(https://colab.research.google.com/github/{REPO_SLUG}/blob/main/{rel})")


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


# ------------------------------------------------------------------------------------- the Colab design


@dataclass(frozen=True)
class Lesson:
    needs_gpu: bool  # False: "no GPU needed" - runs on a Colab CPU runtime with the embedded model
    why: str


# docs/colab.md explains the choice: one T4 runtime per class. The whole GPU path (load with Unsloth and vLLM,
# evaluate, train, evaluate, save, opt-in exports) runs top to bottom in 05, so the GPU install, the restart, the
# model download and the vLLM engine start are paid once; every other lesson installs the CPU stack and uses the
# embedded model, whatever runtime it opens on. Drive carries the state between runtimes (04's reward, 05's run).
LESSONS = {
    "01_setup": Lesson(False, "checks whatever runtime it is on; no model is trained"),
    "02_load_model": Lesson(False, "loads the embedded model + LoRA with the calls 05 makes with Unsloth on the T4"),
    "03_data": Lesson(False, "data and prompt lengths: a tokenizer, no model"),
    "04_rewards": Lesson(False, "reward functions and GRPO's group maths on text: no model"),
    "05_train": Lesson(True, "the T4 lab: load, evaluate, train, evaluate, save, in one runtime"),
    "06_evaluate_and_save": Lesson(False, "shows the T4 run from its files; evaluates, saves and exports a CPU run"),
    "07_memory_lab": Lesson(False, "predicts memory from the architecture; measures only if a GPU is there"),
    "08_grpo_step": Lesson(False, "one GRPO step from scratch on the embedded model, on any runtime"),
    "09_capstone": Lesson(False, "your own train_grpo.py, checked with 2 GRPO steps of the embedded model"),
}


def lesson_needs_gpu(lesson: str | None) -> bool:
    """Whether a lesson needs the T4 (None, an older setup cell without LESSON: yes, as before)."""
    if lesson is None:
        return True
    try:
        return LESSONS[lesson].needs_gpu
    except KeyError:
        raise ValueError(f"unknown lesson {lesson!r}; LESSON must be one of {', '.join(LESSONS)}") from None


# ------------------------------------------------------------------------------------------ finding the kit


def kit_candidates(start: str | os.PathLike | None = None) -> list[Path]:
    """Where the kit may be, best first - the same search as SETUP_CELL: `start` (default: the cwd) and its parents,
    then (Colab's cwd is /content) a copy unpacked or cloned beside it, then a copy on a mounted Drive."""
    start = Path(start or Path.cwd()).resolve()
    near = [p for p in (start, *start.parents) if (p / "helpers" / "notebook_setup.py").is_file()]
    beside = sorted(p.resolve().parents[1] for pattern in ("*/helpers/notebook_setup.py",
                                                            "drive/MyDrive/*/helpers/notebook_setup.py")
                    for p in start.glob(pattern))
    return near + beside


def kit_root(start: str | os.PathLike | None = None) -> Path:
    """The kit's folder: the first of kit_candidates(start), else an earlier Colab clone at COLAB_DIR."""
    found = kit_candidates(start)
    if found:
        return found[0]
    if (COLAB_DIR / "helpers" / "__init__.py").is_file():
        return COLAB_DIR
    start = Path(start or Path.cwd()).resolve()
    raise FileNotFoundError(
        f"could not find the course kit (a folder with helpers/) in {start} or above. Fix: open the notebook from "
        "the kit's notebooks/ folder, or on Colab run the setup cell, which clones the kit (or finds an uploaded "
        "zip, or a copy in MyDrive/ once Drive is mounted)."
    )


# ---------------------------------------------------------------------------------------- the install


class InstallError(RuntimeError):
    """The Colab install did not leave the pinned versions importable; the message says what to do."""


# Which requirements file each Colab runtime installs (docs/colab.md): the T4 gets the GPU stack; a CPU runtime
# the Hugging Face stack and the embedded model only (no vLLM, no Unsloth, Colab's torch kept).
REQUIREMENTS = {"gpu": "requirements.txt", "cpu": "requirements-colab-cpu.txt"}
NO_DEPS_MARK = "no-deps"


def gpu_attached() -> bool:
    """An NVIDIA GPU is attached (read without importing torch, which the install may replace)."""
    return Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is not None


def read_pins(path: str | os.PathLike) -> dict[str, tuple[str, bool]]:
    """{name: (version, no_deps)} for every `name==version` line; `# no-deps` marks a --no-deps install."""
    pins = {}
    for raw in Path(path).read_text().splitlines():
        line, _, comment = raw.partition("#")
        line = line.strip()
        if not line:
            continue
        if "==" not in line:
            raise InstallError(f"{path}: {raw!r} is not an exact pin (name==version); the kit pins every package")
        name, version = (part.strip() for part in line.split("==", 1))
        pins[name] = (version, NO_DEPS_MARK in comment)
    return pins


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _same_version(have: str | None, want: str) -> bool:
    """2.10.0+cu128 satisfies 2.10.0 (a local build label is not a different release)."""
    return have is not None and have.split("+", 1)[0] == want


def unmet_pins(pins: dict, version=None) -> dict[str, tuple[str, str | None]]:
    """{name: (wanted, installed or None)} for the pins the environment does not satisfy."""
    version = version or installed_version
    unmet = {}
    for name, (want, _) in pins.items():
        have = version(name)
        if not _same_version(have, want):
            unmet[name] = (want, have)
    return unmet


def install_marker(requirements: str | os.PathLike) -> Path:
    """A file in this runtime's temporary folder (gone with the runtime, unlike the kit on Drive), named after the
    requirements' content: it says "installed once in this runtime", so a failing install is never retried in a
    loop."""
    digest = hashlib.sha256(Path(requirements).read_bytes()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"grpo-kit-installed-{Path(requirements).stem}-{digest}"


def _pip(*args: str) -> int:
    return subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args]).returncode


def pip_install(requirements: Path, pins: dict) -> None:
    """pip install the pins (those marked no-deps separately, with --no-deps). For the GPU file: if the resolve
    fails (docs/gpu-stack.md: certifi may not resolve), the rest first, then unsloth/unsloth_zoo --no-deps."""
    with_deps = [f"{n}=={v}" for n, (v, no_deps) in pins.items() if not no_deps]
    no_deps = [f"{n}=={v}" for n, (v, nd) in pins.items() if nd]
    if with_deps and _pip(*with_deps) != 0:
        unsloth = [p for p in with_deps if p.startswith("unsloth")]
        if not unsloth:
            raise InstallError(f"pip could not install {requirements.name} (its output is above). Fix: "
                               "Runtime > Disconnect and delete runtime, then run the notebook again from the top.")
        print("[grpo-kit] full install failed; retrying with unsloth/unsloth_zoo installed --no-deps ...")
        rest = [p for p in with_deps if p not in unsloth]
        if _pip(*rest) != 0:
            raise InstallError(f"pip could not install {requirements.name} even without unsloth (its output is "
                               "above). See docs/troubleshooting.md 'Colab install'.")
        no_deps += unsloth
    if no_deps and _pip("--no-deps", *no_deps) != 0:
        raise InstallError(f"pip could not install {' '.join(no_deps)} --no-deps (its output is above).")


def installed_distributions() -> dict[str, str]:
    """{name: version} of every installed distribution: what a pip install may change, pinned or pulled in."""
    from importlib import metadata

    return {d.metadata["Name"]: d.version for d in metadata.distributions() if d.metadata["Name"]}


def _stale_imports(changed: set[str]) -> list[str]:
    """Modules imported in this process whose distribution changed version: they need a fresh process."""
    canon = {n.lower().replace("_", "-") for n in changed}
    owners = metadata.packages_distributions()
    return sorted(module for module in {m.split(".")[0] for m in list(sys.modules)}
                  if any(d.lower().replace("_", "-") in canon for d in owners.get(module, ())))


def install_if_colab(root: str | os.PathLike, restart: bool = True, stack: str | None = None,
                     lesson: str | None = None) -> bool:
    """On Colab, install the pinned stack for this runtime at most once; elsewhere do nothing. True if installed now.

    stack: "gpu" (requirements.txt: Unsloth, vLLM, the torch they pin) or "cpu" (requirements-colab-cpu.txt: the
    embedded model, Colab's torch); default: "gpu" only for a lesson that needs the T4 (LESSONS; None, an older
    setup cell: any lesson) on a runtime with a GPU attached. A CPU lesson opened on a T4 runtime installs the CPU
    stack: it needs nothing else, and its install is a minute, not the GPU stack's several. Nothing is installed when every pinned
    version is already importable (a second notebook in the same runtime, or a re-run). After an install the
    versions are checked again, and only then is the marker written. Then the GPU stack always restarts the session
    (it says so and ends the kernel; Colab restarts it); the CPU stack only when a distribution whose version changed
    was already imported in this process. Run the notebook again from the top and the check skips the install.
    """
    if not on_colab():
        return False
    stack = stack or ("gpu" if lesson_needs_gpu(lesson) and gpu_attached() else "cpu")
    requirements = Path(root) / REQUIREMENTS[stack]
    pins = read_pins(requirements)
    marker = install_marker(requirements)
    unmet = unmet_pins(pins)
    if not unmet:
        marker.write_text(f"{requirements.name}: every pinned version importable\n")
        print(f"[grpo-kit] Colab ({stack} runtime): the pinned stack ({requirements.name}) is already in place; "
              "no install.")
        return False
    if marker.exists():
        raise InstallError(_unmet_message(unmet, requirements, "was already installed once in this runtime, yet"))
    what = "the GPU stack (Unsloth, vLLM, the torch they pin)" if stack == "gpu" else \
        "the CPU stack (Hugging Face libraries and the embedded model; no vLLM or Unsloth)"
    print(f"[grpo-kit] Colab: installing {what} from {requirements.name} ({len(unmet)} of {len(pins)} pins to "
          "change); the GPU stack takes minutes ...")
    if stack == "gpu":
        os.environ.setdefault("UNSLOTH_VLLM_STANDBY", "0")
    before = installed_distributions() if stack == "cpu" else {}  # the CPU stack's restart check compares them
    pip_install(requirements, pins)
    still = unmet_pins(pins)
    if still:
        raise InstallError(_unmet_message(still, requirements, "was installed, but"))
    marker.write_text(f"{requirements.name}: installed and checked\n")
    if stack == "gpu":
        # Always a fresh process: the GPU stack replaces torch and the CUDA libraries it loads, and pip moves unpinned
        # dependencies with it; a module or a native library the kernel already loaded (Colab's kernel imports some
        # at start) would stay at its old version, which no check of imported Python packages can fully see.
        print("[grpo-kit] Installed the GPU stack. The session restarts now, so that torch, vLLM, Unsloth and "
              "everything pip upgraded with them load at their new versions. When it is back, run this notebook "
              "again from the top: the install is skipped the second time.")
    else:
        # The CPU stack keeps Colab's torch (no CUDA library is replaced) and installs Python packages; every
        # distribution whose version changed, pinned or pulled in by pip, is compared with the modules this process
        # has imported. None imported: this process imports the new versions, so no restart is needed.
        after = installed_distributions()
        changed = {name for name in set(before) | set(after) if before.get(name) != after.get(name)}
        stale = _stale_imports(changed)
        if not stale:
            print("[grpo-kit] Installed and checked.")
            return True
        print(f"[grpo-kit] Installed. {', '.join(stale)} had already been imported in this session at another "
              "version, so the session restarts now to load the new ones. When it is back, run this notebook again "
              "from the top: the install is skipped the second time.")
    if restart:
        sys.stdout.flush()
        os.kill(os.getpid(), 9)  # Colab restarts a dead kernel by itself; a normal exit would not reload torch
    return True


def _unmet_message(unmet: dict, requirements: Path, what: str) -> str:
    rows = ", ".join(f"{n} {have or 'missing'} (pinned {want})" for n, (want, have) in sorted(unmet.items()))
    return (f"{requirements.name} {what} these versions are not importable: {rows}. Fix: Runtime > Disconnect and "
            "delete runtime (a fresh runtime), then run the notebook again from the top; if it happens again, "
            "docs/troubleshooting.md 'Colab install' lists the known causes.")


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
        return self.preset.backend == "unsloth"


def resolve_preset_name(preset_name: str | None, runtime, lesson: str | None = None) -> str:
    """None means automatic: 't4' for a lesson that needs the T4 on a runtime with a GPU, 'cpu' otherwise (a CPU
    lesson installs the CPU stack, which has no Unsloth, even on a T4 runtime)."""
    if preset_name:
        return preset_name
    return "t4" if runtime.has_gpu and lesson_needs_gpu(lesson) else "cpu"


# ------------------------------------------------------------------------------------- the Drive run folder



def drive_root(mount=None) -> Path:
    """MyDrive/grpo-kit on a mounted Google Drive (mounting it first, which asks for permission once). Colab only.

    `mount` replaces google.colab.drive.mount (tests)."""
    if not on_colab():
        raise ValueError("USE_DRIVE = True needs Google Colab (Drive is mounted through google.colab). Elsewhere the "
                         "run folder is already on your own disk: set USE_DRIVE = False.")
    root = rt.mount_drive(COLAB_CONTENT, mount) / DRIVE_KIT_FOLDER
    root.mkdir(parents=True, exist_ok=True)
    return root


def drive_run_dir(run_dir: str | os.PathLike, mount=None) -> Path:
    """The run folder on Drive: MyDrive/grpo-kit/runs/<name>. The WHOLE run folder lives there (adapter,
    metrics, evaluations and checkpoints), so a later runtime - 06 on another day - finds it."""
    return drive_root(mount) / "runs" / Path(run_dir).name


# ------------------------------------------------------------------------------ an adapter for 06 (and later)

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


class AdapterMissing(FileNotFoundError):
    """No trained adapter where a lesson looked; the message lists where it looked and the three ways to get one."""


def is_adapter(folder: str | os.PathLike) -> bool:
    return all((Path(folder) / name).is_file() for name in ADAPTER_FILES)


def adapter_base_model(folder: str | os.PathLike) -> str | None:
    try:
        return json.loads((Path(folder) / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except (OSError, ValueError):
        return None


def adapter_fits(folder: str | os.PathLike, preset) -> bool:
    """Whether folder holds an adapter this preset's model can load: the same base model, or one it does not name."""
    if not is_adapter(folder):
        return False
    base = adapter_base_model(folder)
    return not base or not preset.model_name or base_model_key(base) == base_model_key(preset.model_name)


def base_model_key(name: str) -> str:
    """A model's identity across spellings: "unsloth/Qwen2.5-1.5B-Instruct", its "-unsloth-bnb-4bit" repo and a
    local folder of the same name agree; so do the cpu preset's "SmolLM2-135M-Instruct (embedded, ...)" and the
    cached folder .../SmolLM2-135M-Instruct that its adapters name."""
    key = Path(str(name).split(" (")[0].rstrip("/")).name.lower()
    for suffix in ("-unsloth-bnb-4bit", "-bnb-4bit", "-4bit"):
        key = key.removesuffix(suffix)
    return key


def locate_adapter(kit, staged: str | os.PathLike | None = None, mount=None) -> Path:
    """The trained adapter a lesson after 05 uses, first found of:

    1. <run folder>/adapter - 05's run in this runtime, or the run folder on Drive (prepare(..., drive=True));
    2. `staged`: a folder the instructor shared (a path, e.g. on Drive: MyDrive/grpo-kit/staged/adapter), or a
       Hugging Face repo id "owner/name" holding the adapter files (downloaded once);
    3. MyDrive/grpo-kit/staged/adapter when Drive is mounted (where the instructor guide says to put it).

    Raises AdapterMissing naming every place it looked and the fixes. An adapter made for another base model than
    the preset's is refused (its answers would be noise).
    """
    looked = []
    candidates = [Path(kit.run_dir) / "adapter"]
    if staged:
        staged_path = Path(staged).expanduser()
        if not staged_path.exists() and "/" in str(staged) and not str(staged).startswith(("/", ".", "~")) \
                and str(staged).count("/") == 1:
            candidates.append(_download_adapter(str(staged)))
        else:
            candidates.append(staged_path)
    if on_colab() and (COLAB_CONTENT / "drive" / "MyDrive").is_dir():
        candidates.append(COLAB_CONTENT / "drive" / "MyDrive" / DRIVE_KIT_FOLDER / "staged" / "adapter")
    for folder in candidates:
        looked.append(str(folder))
        if is_adapter(folder):
            if not adapter_fits(folder, kit.preset):
                raise AdapterMissing(
                    f"the adapter in {folder} was trained on {adapter_base_model(folder)}, but this preset "
                    f"({kit.preset.name}) loads {kit.preset.model_name}. "
                    "Fix: use an adapter from a run with the same preset (the t4 preset on a T4 runtime, the cpu "
                    "preset on a CPU runtime), or set PRESET to match it.")
            print(f"[grpo-kit] using the trained adapter in {folder}")
            return Path(folder)
    raise AdapterMissing(
        "No trained adapter found; looked in: " + ", ".join(looked) + ". Fix, one of: (a) train one with this "
        "preset first (05 with the same RUN_DIR, or TRAIN_IF_MISSING = True here); (b) if 05 ran in another "
        "runtime, keep USE_DRIVE = None (or True) in both with the same RUN_DIR so this notebook reads the run folder "
        "from Drive; (c) ask your instructor for a pre-trained adapter of this preset and set STAGED_ADAPTER to its "
        "folder (e.g. /content/drive/MyDrive/grpo-kit/staged/adapter) or its Hugging Face repo id. docs/colab.md "
        "explains the three.")


def _download_adapter(repo_id: str) -> Path:
    """An adapter repo from the Hugging Face Hub, into the local cache (token from Colab secrets if private)."""
    from huggingface_hub import snapshot_download

    token = None
    try:
        from helpers.sharing import MissingTokenError, hf_token

        token = hf_token()
    except MissingTokenError:
        token = None  # a public repo needs none
    return Path(snapshot_download(repo_id=repo_id, token=token, allow_patterns=["adapter_*", "*.json", "*.txt",
                                                                                  "*.model", "*.jinja"]))


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
    if drive is None:
        drive = runtime.on_colab
    if runtime.on_colab and not runtime.has_gpu and needs_gpu and not preset_name:
        raise rt.RuntimeProblem(rt.NO_GPU_ON_COLAB)
    overrides = {k: v for k, v in overrides.items() if v is not None}
    try:
        preset = get_preset(resolve_preset_name(preset_name, runtime, lesson), **overrides)
    except PresetError as err:
        raise _with_parameter(err) from None
    # A GPU preset without a GPU -> the fix; too little free memory -> said now, before anything loads; Unsloth first.
    warnings = guard.check_before_loading(preset, runtime)
    want_gpu = preset.backend == "unsloth"
    run_dir = Path(run_dir or DEFAULT_RUN_DIR)
    if drive:
        run_dir = drive_run_dir(run_dir, mount=mount)
        run_dir.mkdir(parents=True, exist_ok=True)
    elif not run_dir.is_absolute():
        run_dir = root / run_dir
    kit = Kit(root=root, runtime=runtime, preset=preset, run_dir=run_dir, overrides=overrides)
    if not quiet:
        print(f"[grpo-kit] kit: {root}")
        print(f"[grpo-kit] runtime: {runtime.describe()}")
        if lesson is not None and not needs_gpu:
            print(f"[grpo-kit] lesson {lesson}: no GPU needed ({LESSONS[lesson].why})")
        print(f"[grpo-kit] preset: {preset.name} - {preset.description}")
        if overrides:
            print(f"[grpo-kit] overrides: {overrides}")
        flags = precision_flags(runtime) if want_gpu else precision_flags(rt.Runtime(on_colab=runtime.on_colab))
        print(f"[grpo-kit] precision flags for training: {flags}")
        print(f"[grpo-kit] run folder: {run_dir}" + (" (Google Drive: kept when this runtime ends)" if drive else ""))
        for w in warnings:
            print(f"[grpo-kit] warning: {w}")
    return kit
