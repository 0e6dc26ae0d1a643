"""The run folder: a fresh start, a resume, or a refusal, decided before any model loads; config.json written, read
and compared, so that a resumed run is the same recipe as its first start and a finished run is never overwritten
silently."""

from __future__ import annotations

import errno
import json
import shutil
import time
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

from helpers.config import Preset
from helpers.run import checkpoints as ck


class RunDirError(ValueError):
    """The run folder cannot be used as asked (it would overwrite an earlier run, or cannot be created)."""


# Settings that may change between a first start and its resume (they do not change what is trained).
RESUMABLE_CHANGES = ("max_steps", "eval_size", "eval_max_new_tokens", "vllm_enforce_eager")
SUMMARY_FILE = "summary.json"
RUN_FILES = (SUMMARY_FILE, "metrics.jsonl", "adapter", "before.json", "config.json")
CONFIG_FILE = "config.json"


@dataclass
class RunFolder:
    """Where a run writes, and whether it starts fresh or continues an earlier start."""

    run_dir: Path
    checkpoint_dir: Path
    resume_from: ck.Checkpoint | None = None  # None: a fresh start (or an unfinished run continued from step 0)
    continuing: bool = False  # an unfinished run is being continued (from a checkpoint or from step 0)


def default_run_dir(preset_name: str) -> Path:
    return Path("runs") / f"{preset_name}-{time.strftime('%Y%m%d-%H%M%S')}"


def config_differences(saved: dict, config: dict) -> list[str]:
    """The settings that differ from the first start's. A setting only one side has (the kit gained or dropped a
    preset field in between, e.g. Preset.extra became typed fields) is unchanged when it holds its default or is
    empty: a run started before a kit update still resumes."""
    defaults = json.loads(json.dumps({f.name: f.default for f in fields(Preset) if f.default is not MISSING},
                                     default=list))

    def differs(k):
        if k in saved and k in config:
            return saved[k] != config[k]
        present = saved.get(k, config.get(k))
        return present != defaults.get(k) and present not in ({}, [], None)

    keys = sorted((set(saved) | set(config)) - set(RESUMABLE_CHANGES))
    return [f"{k}: {saved.get(k)!r} -> {config.get(k)!r}" for k in keys if differs(k)]


def make_folder(path: Path, flag: str = "--run-dir") -> None:
    """mkdir -p, with the reason and the fix when the folder cannot be created (a missing or read-only parent, a
    file in the way) instead of a raw OSError traceback."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise RunDirError(f"{flag} {path}: a file is in the way of this folder. Fix: choose another path.") from None
    except PermissionError:
        parent = next((p for p in path.parents if p.exists()), path.parent)
        raise RunDirError(f"{flag} {path} cannot be created: {parent} is not writable. Fix: choose a folder you can "
                          "write to (e.g. runs/demo inside the kit).") from None
    except OSError as err:
        if err.errno not in (errno.EROFS, errno.ENOENT, errno.ENOTDIR):
            raise
        raise RunDirError(f"{flag} {path} cannot be created ({err.strerror}). Fix: choose a folder on a writable "
                          "disk (e.g. runs/demo inside the kit).") from None
    if not _writable(path):
        raise RunDirError(f"{flag} {path} is not writable. Fix: choose a folder you can write to.")


def _writable(path: Path) -> bool:
    probe = path / ".grpo-kit-write-test"
    try:
        probe.write_text("")
        probe.unlink()
        return True
    except OSError:
        return False


def plan_run_folder(run_dir: Path | None, preset_name: str, overwrite: bool, resume: bool | None = None,
                    checkpoint_dir: Path | None = None, config: dict | None = None) -> RunFolder:
    """Decide between a fresh start, a resume, and a refusal; create the run folder.

    - a finished run (summary.json) continues from its last checkpoint when max_steps is now larger (the same
      command with a larger --max-steps), and is refused otherwise unless --overwrite;
    - an unfinished run (config.json but no summary.json) is resumed from its latest COMPLETE checkpoint
      (incomplete ones are named and moved aside), or restarted from step 0 when it has none; the settings
      must be the same as the first start's (except RESUMABLE_CHANGES);
    - --overwrite removes the earlier run's metrics and checkpoints, saying what it removes.
    """
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir(preset_name)
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"--run-dir {run_dir} is a file, not a folder. Fix: choose another path.")
    ckpt_dir = Path(checkpoint_dir) if checkpoint_dir is not None else run_dir / ck.TRAINER_SUBDIR
    ckpts = ck.list_checkpoints(ckpt_dir)
    earlier = [n for n in RUN_FILES if (run_dir / n).exists()] + ([f"{len(ckpts)} checkpoint(s)"] if ckpts else [])
    if overwrite:
        return _overwrite(run_dir, ckpt_dir, ckpts, earlier)
    if (run_dir / SUMMARY_FILE).exists():
        return _extend(run_dir, ckpt_dir, ckpts, earlier, resume, config)
    if not earlier:
        if resume:
            raise RunDirError(f"--resume: {run_dir} holds no run to resume (no checkpoints in {ckpt_dir}).")
        make_folder(run_dir)
        return RunFolder(run_dir, ckpt_dir)
    if resume is False:
        raise RunDirError(
            f"--run-dir {run_dir} holds an unfinished run ({', '.join(earlier)}) and --no-resume was given. Fix: "
            "leave out --no-resume to continue it, choose a new --run-dir, or pass --overwrite to start it over."
        )
    _refuse_another_recipe(run_dir, ckpt_dir, earlier, config)
    return _continue(run_dir, ckpt_dir, ckpts)


def _extend(run_dir: Path, ckpt_dir: Path, ckpts: list, earlier: list[str], resume: bool | None,
            config: dict | None) -> RunFolder:
    """A finished run continues only when asked for more steps than it took (the same command with a larger
    --max-steps, or MAX_STEPS in the notebook), from the checkpoint its last step wrote; anything else is refused
    with the fix. Its summary.json and eval.json are kept beside the new ones as <name>-step-N.json."""
    finished = json.loads((run_dir / SUMMARY_FILE).read_text()).get("steps", 0)
    wanted = (config or {}).get("max_steps", 0)
    if resume is False or wanted <= finished:
        more = f", or raise --max-steps above {finished} to continue it" if resume is not False else ""
        raise RunDirError(
            f"--run-dir {run_dir} already holds a finished run of {finished} steps ({', '.join(earlier)}). Fix: "
            f"choose a new --run-dir, pass --overwrite to replace it{more}."
        )
    _refuse_another_recipe(run_dir, ckpt_dir, earlier, config)
    last = ck.latest_complete(ckpt_dir)
    if last is None or last.step != finished:
        raise RunDirError(
            f"--run-dir {run_dir} finished at step {finished} without a checkpoint of that step (it ran with "
            "--save-steps 0, or the checkpoint was removed), so it cannot be continued. Fix: choose a new --run-dir, "
            "or pass --overwrite to train from step 0."
        )
    ck.say(f"the finished run in {run_dir} took {finished} steps and max_steps is now {wanted}: continuing it")
    for name in (SUMMARY_FILE, "eval.json"):
        if (run_dir / name).exists():
            kept = run_dir / f"{Path(name).stem}-step-{finished}.json"
            (run_dir / name).replace(kept)
            ck.say(f"{name} of the first {finished} steps kept as {kept.name}")
    return _continue(run_dir, ckpt_dir, ckpts)


def _overwrite(run_dir: Path, ckpt_dir: Path, ckpts: list, earlier: list[str]) -> RunFolder:
    if earlier:
        ck.say(f"--overwrite: replacing the earlier run in {run_dir} ({', '.join(earlier)})")
    for name in ("metrics.jsonl", "before.json", "eval.json"):
        if (run_dir / name).exists():
            (run_dir / name).unlink()
    for c in ckpts:
        shutil.rmtree(c.path)
    make_folder(run_dir)
    return RunFolder(run_dir, ckpt_dir)


def _refuse_another_recipe(run_dir: Path, ckpt_dir: Path, earlier: list[str], config: dict | None) -> None:
    """An unfinished run continues only with the settings it started with (its config.json)."""
    saved_path = next((p for p in (run_dir / CONFIG_FILE, ckpt_dir / CONFIG_FILE) if p.is_file()), None)
    if saved_path is None:
        raise RunDirError(
            f"--run-dir {run_dir} holds files ({', '.join(earlier)}) but no config.json from the kit, so it is not a "
            "run that can be continued. Fix: choose a new --run-dir, or pass --overwrite to replace them."
        )
    if config is None:
        return
    diff = config_differences(json.loads(saved_path.read_text()), config)
    if diff:
        raise RunDirError(
            f"--run-dir {run_dir} holds an unfinished run with other settings ({'; '.join(diff)}); continuing it "
            "would mix two recipes. Fix: run the same command as the first time, choose a new --run-dir, or "
            "pass --overwrite to start over."
        )


def _continue(run_dir: Path, ckpt_dir: Path, ckpts: list) -> RunFolder:
    latest = ck.latest_complete(ckpt_dir)
    for c in ckpts:
        if not c.complete and (latest is None or c.step > latest.step):
            ck.set_aside(c)
    step = latest.step if latest is not None else 0
    if latest is not None:
        ck.say(f"resuming from step {step} ({latest.path})")
    else:
        ck.say("this run stopped before its first complete checkpoint: continuing it from step 0")
    ck.trim_metrics(run_dir / "metrics.jsonl", step)
    make_folder(run_dir)
    return RunFolder(run_dir, ckpt_dir, latest, continuing=True)


def write_config(folder: RunFolder, config: dict, save_steps: int) -> None:
    """config.json in the run folder, and beside the checkpoints when they live elsewhere (e.g. Drive): a resume
    needs it there."""
    (folder.run_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2))
    if save_steps:
        make_folder(folder.checkpoint_dir, flag="--checkpoint-dir")
        if not checkpoints_inside(folder):
            shutil.copy2(folder.run_dir / CONFIG_FILE, folder.checkpoint_dir / CONFIG_FILE)


def checkpoints_inside(folder: RunFolder) -> bool:
    """The checkpoints live inside the run folder (else, e.g. on Drive, what a resume needs is copied there)."""
    return folder.run_dir.resolve() in folder.checkpoint_dir.resolve().parents
