"""The Colab half of the setup cell: which lessons need the T4, where the kit is, the pinned install (at most once
per runtime, then a restart when needed) and the run folder on Google Drive.

helpers.notebook_setup (the setup cell's front door) calls into this module; docs/colab.md explains the design
(05 is the one lesson on a T4; the others run on a CPU runtime, and Drive carries 04's reward and 05's run between
them), and LESSONS below is its table. Like notebook_setup, this module imports only the standard library and
helpers.runtime at import time, so it can run *before* the pinned stack (which replaces Colab's torch) is installed
(tests/test_notebook_helpers.py checks it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

# helpers.runtime loads torch only inside functions: safe before the Colab install.
from helpers import runtime as rt
from helpers.messages import say
from helpers.runtime import COLAB_CONTENT, DRIVE_KIT_FOLDER, on_colab

KIT_DIRNAME = "grpo-course-kit"  # the folder SETUP_CELL clones the kit into, under Colab's /content
COLAB_DIR = COLAB_CONTENT / KIT_DIRNAME


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
        say("full install failed; retrying with unsloth/unsloth_zoo installed --no-deps ...")
        rest = [p for p in with_deps if p not in unsloth]
        if _pip(*rest) != 0:
            raise InstallError(f"pip could not install {requirements.name} even without unsloth (its output is "
                               "above). See docs/troubleshooting.md 'Colab install'.")
        no_deps += unsloth
    if no_deps and _pip("--no-deps", *no_deps) != 0:
        raise InstallError(f"pip could not install {' '.join(no_deps)} --no-deps (its output is above).")


def installed_distributions() -> dict[str, str]:
    """{name: version} of every installed distribution: what a pip install may change, pinned or pulled in."""
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
        say(f"Colab ({stack} runtime): the pinned stack ({requirements.name}) is already in place; "
            "no install.")
        return False
    if marker.exists():
        raise InstallError(_unmet_message(unmet, requirements, "was already installed once in this runtime, yet"))
    what = "the GPU stack (Unsloth, vLLM, the torch they pin)" if stack == "gpu" else \
        "the CPU stack (Hugging Face libraries and the embedded model; no vLLM or Unsloth)"
    say(f"Colab: installing {what} from {requirements.name} ({len(unmet)} of {len(pins)} pins to "
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
        say("Installed the GPU stack. The session restarts now, so that torch, vLLM, Unsloth and "
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
            say("Installed and checked.")
            return True
        say(f"Installed. {', '.join(stale)} had already been imported in this session at another "
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



class DriveUnavailable(RuntimeError):
    """USE_DRIVE = True, and Google Drive could not be mounted (a school account may block it)."""


def on_drive(path, content: Path | None = None) -> bool:
    """Whether path lies on Google Drive as Colab mounts it (under <content>/drive; content: Colab's /content)."""
    mount = (Path(content or COLAB_CONTENT) / "drive").resolve()
    path = Path(path).resolve()
    return path == mount or mount in path.parents


def drive_run_dir_or_none(run_dir: str | os.PathLike, required: bool, mount=None) -> Path | None:
    """The run folder on Drive (drive_run_dir), or None when Drive cannot be mounted and the notebook left USE_DRIVE
    = None: the run folder then stays on this runtime's disk, and the lessons hand their files on by download and
    upload (without_drive). required (USE_DRIVE = True): the failure is raised, with the fix. Off Colab, the error
    that Drive needs Colab passes unchanged."""
    if not on_colab():
        return drive_run_dir(run_dir, mount=mount)  # raises: Drive needs Colab
    try:
        return drive_run_dir(run_dir, mount=mount)
    except Exception as err:  # google.colab raises its own error types (MessageError, ValueError, timeouts)
        if required:
            raise DriveUnavailable(
                f"Google Drive could not be mounted ({type(err).__name__}: {err}). Fix: set USE_DRIVE = False (or "
                "None) in the parameters cell: the run folder then stays on this runtime's disk and 04 -> 05 -> 06 "
                "hand their files on by download and upload (docs/colab.md, without Google Drive).") from err
        say(f"Google Drive could not be mounted ({type(err).__name__}: {err}): the run folder stays on this "
            "runtime's disk, lost when the runtime ends. Between lessons, files go by download and upload: 04 "
            "downloads my_rewards.py and 05 asks for it; 05 downloads the run as a zip and 06 asks for it "
            "(docs/colab.md, without Google Drive)")
        return None


# ------------------------------------------------------------------------------- hand-offs without Drive


def without_drive(run_dir) -> bool:
    """On Colab with the run folder on this runtime's disk (USE_DRIVE = False, or Drive could not be mounted): the
    next lesson, in another runtime, cannot read it, so its files go by download and upload instead."""
    return on_colab() and not on_drive(run_dir)


def _colab_files(files=None):
    if files is None:
        from google.colab import files  # only exists on Colab: imported where used
    return files


def download(path: str | os.PathLike, files=None) -> None:
    """Send a file of this runtime to the student's computer (the browser saves it); a failed download is said with
    the manual way, never an error. `files` replaces google.colab.files (tests)."""
    try:
        _colab_files(files).download(str(path))
    except Exception as err:  # noqa: BLE001 - Colab's frontend errors have their own types; the fix is the same
        say(f"the download of {path} did not start ({type(err).__name__}: {err}). Fix: download it from the Files "
            "pane (the folder icon on the left: right-click it > Download)")


def upload(files=None) -> dict[str, bytes]:
    """Ask the student for files from their computer: the cell shows a "Choose files" button and waits. {} when
    nothing came (cancelled, or the upload failed), said, never an error. `files` replaces google.colab.files."""
    try:
        got = _colab_files(files).upload()
    except Exception as err:  # noqa: BLE001 - a cancelled or blocked upload raises on Colab (its own error types)
        say(f"nothing uploaded ({type(err).__name__}: {err})")
        return {}
    return dict(got or {})
