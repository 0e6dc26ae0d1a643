"""Checkpoints a run can be resumed from after a disconnect or a kill, and where to keep them.

    python -m helpers.train --preset cpu --run-dir runs/demo --save-steps 5 --keep 2
    # ... the session dies at step 12 ...
    python -m helpers.train --preset cpu --run-dir runs/demo --save-steps 5 --keep 2   # same command
    # [grpo-kit] resuming from step 10 (checkpoint-10)

Every `save_steps` steps the Trainer writes `checkpoint-N/` (LoRA adapter, optimizer, scheduler, RNG state and
`trainer_state.json`, which it writes LAST). A kill can leave the newest folder half-written, so before resuming
every folder is checked (`checkpoint_problems`): a partial or corrupt one is named, moved aside (never loaded,
never deleted) and the newest complete one is used. `rotate` removes older complete checkpoints, saying which,
so only the last `keep` stay on disk (the pipeline calls it after each save).

Nothing here imports torch, transformers or peft at module level: the run folder's refusals (helpers.run.folder)
come before TRL's import, in seconds.

On Colab a disconnect wipes the VM's disk: `checkpoint_root(use_drive=True)` mounts Google Drive (only when asked,
only on Colab) and returns a folder there; elsewhere checkpoints live inside the run folder.
"""

from __future__ import annotations

import errno
import json
import re
import shlex
import shutil
import struct
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from helpers.messages import say
from helpers.reuse import write_atomically
from helpers.runtime import COLAB_CONTENT, DRIVE_KIT_FOLDER, mount_drive, on_colab

CHECKPOINT_RE = re.compile(r"checkpoint-(\d+)")
DRIVE_MOUNT = COLAB_CONTENT / "drive"
DRIVE_FOLDER = DRIVE_MOUNT / "MyDrive" / DRIVE_KIT_FOLDER
TRAINER_SUBDIR = "trainer"  # the Trainer's output_dir inside a run folder (checkpoint-N/ go there)
# Weights a checkpoint may hold: a LoRA adapter (the kit), or a whole model (full fine-tuning).
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin", "model.safetensors", "pytorch_model.bin",
                "model.safetensors.index.json")


# --------------------------------------------------------------------------------------------- where


def checkpoint_root(use_drive: bool = False, run_dir=None, environ=None, mount=None) -> Path:
    """The folder for checkpoint-N/ folders.

    use_drive=False: `<run_dir>/trainer` (the run folder's own disk).
    use_drive=True on Colab: mounts Google Drive at /content/drive (asks for permission once) and returns
    /content/drive/MyDrive/grpo-kit/<run folder name>/checkpoints, which survives a disconnect.
    use_drive=True elsewhere: a ValueError that says Drive is only mounted on Colab (no silent fallback).
    `mount` replaces google.colab.drive.mount (tests).
    """
    run_dir = Path(run_dir) if run_dir is not None else Path("runs") / "latest"
    if not use_drive:
        return run_dir / TRAINER_SUBDIR
    if not on_colab(environ):
        raise ValueError(
            "use_drive=True needs Google Colab (Drive is mounted through google.colab). Elsewhere the run folder is "
            f"already on your own disk: use checkpoint_root(use_drive=False) -> {run_dir / TRAINER_SUBDIR}."
        )
    mount_drive(DRIVE_MOUNT.parent, mount)
    root = DRIVE_FOLDER / run_dir.name / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    return root


# -------------------------------------------------------------------------------------------- checking


def _check_json(path: Path) -> str | None:
    try:
        json.loads(path.read_text())
    except (OSError, ValueError) as err:
        return f"{path.name} is not readable JSON ({type(err).__name__})"
    return None


def _check_safetensors(path: Path) -> str | None:
    """Header parses and the file is as long as the header says (a truncated write is shorter)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                return f"{path.name} is truncated ({size} bytes)"
            (n,) = struct.unpack("<Q", raw)
            if n > size - 8:
                return f"{path.name} is truncated (header says {n} bytes, file has {size})"
            header = json.loads(f.read(n))
    except (OSError, ValueError, UnicodeDecodeError) as err:
        return f"{path.name} has an unreadable header ({type(err).__name__})"
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if size != 8 + n + end:
        return f"{path.name} is truncated or padded ({size} bytes, expected {8 + n + end})"
    return None


def _check_torch_file(path: Path) -> str | None:
    """torch.save writes a zip archive whose directory sits at the end: a truncated file has none."""
    try:
        if path.stat().st_size == 0:
            return f"{path.name} is empty"
        with zipfile.ZipFile(path) as zf:
            if not zf.namelist():
                return f"{path.name} is an empty archive"
    except (OSError, zipfile.BadZipFile) as err:
        return f"{path.name} is truncated or corrupt ({type(err).__name__})"
    return None


def _check_weight(path: Path) -> str | None:
    if path.name.endswith(".safetensors"):
        return _check_safetensors(path)
    if path.name.endswith(".json"):
        return _check_json(path)
    return _check_torch_file(path)


def checkpoint_problems(folder) -> list[str]:
    """What keeps `folder` from being a complete checkpoint; [] when it can be resumed from.

    Required: trainer_state.json (readable, with global_step), optimizer.pt and scheduler.pt (complete torch
    archives) and the weights (adapter_model.safetensors + adapter_config.json for LoRA, or the model's
    weights), each checked for truncation. RNG state files are checked when present.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return [f"{folder} is not a folder"]
    problems = []
    state = folder / "trainer_state.json"
    if not state.is_file():
        problems.append("trainer_state.json is missing (the Trainer writes it last: the save was interrupted)")
    else:
        bad = _check_json(state)
        if bad:
            problems.append(bad)
        elif not isinstance(json.loads(state.read_text()).get("global_step"), int):
            problems.append("trainer_state.json has no global_step")
    for name in ("optimizer.pt", "scheduler.pt"):
        path = folder / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        else:
            bad = _check_torch_file(path)
            if bad:
                problems.append(bad)
    weights = [folder / n for n in WEIGHT_FILES if (folder / n).is_file()]
    if not weights:
        problems.append("no model or adapter weights (adapter_model.safetensors) in it")
    for path in weights:
        bad = _check_weight(path)
        if bad:
            problems.append(bad)
    if any(p.name.startswith("adapter_model") for p in weights):
        cfg = folder / "adapter_config.json"
        if not cfg.is_file():
            problems.append("adapter_config.json is missing")
        else:
            bad = _check_json(cfg)
            if bad:
                problems.append(bad)
    for rng in sorted(folder.glob("rng_state*.pth")):
        bad = _check_torch_file(rng)
        if bad:
            problems.append(bad)
    return problems


@dataclass
class Checkpoint:
    path: Path
    step: int
    problems: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.problems


def list_checkpoints(root) -> list[Checkpoint]:
    """Every checkpoint-N folder under root, checked, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        m = CHECKPOINT_RE.fullmatch(child.name)
        if m and child.is_dir():
            found.append(Checkpoint(child, int(m.group(1)), checkpoint_problems(child)))
    return sorted(found, key=lambda c: c.step)


def latest_complete(root, say=say) -> Checkpoint | None:
    """The newest complete checkpoint; every newer incomplete one is named with what is wrong with it."""
    chosen = None
    for ckpt in reversed(list_checkpoints(root)):
        if ckpt.complete:
            chosen = ckpt
            break
        say(f"skipping {ckpt.path.name}: incomplete or corrupt ({'; '.join(ckpt.problems)}); it will not be loaded")
    return chosen


def set_aside(ckpt: Checkpoint, say=say) -> Path:
    """Rename an incomplete checkpoint out of the way (the resumed run will write that step again). Not deleted."""
    target = ckpt.path.with_name(f"incomplete-{ckpt.path.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    ckpt.path.rename(target)
    say(f"moved the incomplete {ckpt.path.name} aside to {target.name} (not loaded, not deleted; delete it "
        "yourself once you no longer need it)")
    return target


# -------------------------------------------------------------------------------------------- rotation


def rotate(root, keep: int, say=say) -> list[Path]:
    """Keep the newest `keep` complete checkpoints in `root` and remove older complete ones, saying which.

    Used instead of TrainingArguments.save_total_limit so that every removal is printed and an incomplete folder
    (which may hold someone's only copy of something) is never removed by rotation."""
    if keep < 1:
        raise ValueError(f"keep={keep}: keep at least 1 checkpoint, or resume has nothing to start from")
    complete = [c for c in list_checkpoints(root) if c.complete]
    old = complete[: max(0, len(complete) - keep)]
    for ckpt in old:
        shutil.rmtree(ckpt.path)
    if old:
        kept = ", ".join(c.path.name for c in complete[len(old):])
        say(f"removed {', '.join(c.path.name for c in old)} (keeping the last {keep}: {kept})")
    return [c.path for c in old]


# -------------------------------------------------------------------------------------- metrics on resume


def trim_metrics(path, step: int, say=say) -> int:
    """Move metrics.jsonl lines logged after `step` (the resumed run will log those steps again) into
    metrics.redone.jsonl, so no step appears twice. Returns how many lines were moved."""
    path = Path(path)
    if not path.is_file():
        return 0
    keep, later = [], []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            row_step = json.loads(line).get("step", 0)
        except ValueError:
            later.append(line)  # a line cut off by the kill
            continue
        (keep if row_step <= step else later).append(line)
    if later:
        with open(path.with_name("metrics.redone.jsonl"), "a") as f:
            f.write("\n".join(later) + "\n")
        write_atomically(path, "".join(line + "\n" for line in keep))  # a full disk leaves it whole
        say(f"moved {len(later)} metrics line(s) logged after step {step} to metrics.redone.jsonl "
            "(those steps run again now)")
    return len(later)


# ------------------------------------------------------------------------------ interruptions and disk full


def same_command(argv=None) -> str:
    """How the user started this run, to be typed again: the command line, or (a notebook) the cells."""
    argv = list(sys.argv if argv is None else argv)
    if argv and Path(argv[0]).parts[-2:] == ("helpers", "train.py"):
        return "`" + shlex.join(["python", "-m", "helpers.train", *argv[1:]]) + "`"
    return "the same steps with the same run folder (in 05: the cells from the start of the run, same RUN_DIR)"


def resume_point(root, save_steps: int) -> str:
    """Where the same command would continue from now: the newest complete checkpoint, or step 0."""
    latest = latest_complete(root, say=lambda _: None) if save_steps else None
    if latest is not None:
        return f"resumes from {latest.path.name} (step {latest.step})"
    if not save_steps:
        return "starts over from step 0 (this run saves no checkpoints: --save-steps 0)"
    return f"starts over from step 0 (no checkpoint yet: the first comes at step {save_steps})"


def disk_full(err: BaseException) -> bool:
    """A write failed for lack of space: OSError ENOSPC, or a library's own error that says so (torch.save's
    RuntimeError "unexpected pos ...", safetensors' SafetensorError "No space left on device (os error 28)"), looked
    for along the exception's causes."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno == errno.ENOSPC:
            return True
        if any(s in str(err) for s in ("unexpected pos", "No space left", "os error 28")):
            return True
        err = err.__cause__ or err.__context__
    return False


def free_gb(path) -> float:
    """Free space (GB) on the disk holding `path` (or its nearest existing parent)."""
    path = Path(path)
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    return shutil.disk_usage(existing).free / 1e9


# ------------------------------------------------------------------- a checkpoint that already reached the end


def restore_trained(trainer, folder) -> None:
    """What trainer.train() would have left after the steps a checkpoint holds, without training: its adapter
    weights in trainer.model and its TrainerState (global_step, log_history). For a run killed after its last step
    (during the final evaluation): resuming trainer.train() there would train one step past max_steps."""
    folder = Path(folder)
    weights = folder / "adapter_model.safetensors"
    if not weights.is_file():
        raise ValueError(f"{folder} holds no adapter_model.safetensors: only a LoRA checkpoint can be restored "
                         "without training. Fix: pass --overwrite to train the run again.")
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file
    from transformers import TrainerState

    result = set_peft_model_state_dict(trainer.model, load_file(str(weights)))
    unexpected = getattr(result, "unexpected_keys", None)
    if unexpected:
        raise ValueError(f"{weights} does not fit this model ({len(unexpected)} unexpected weights, e.g. "
                         f"{unexpected[0]}). Fix: pass --overwrite to train the run again.")
    trainer.state = TrainerState.load_from_json(str(folder / "trainer_state.json"))
