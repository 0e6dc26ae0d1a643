"""The run folder: a fresh start, a resume, or a refusal, decided before any model loads; config.json written, read
and compared, so that a resumed run is the same recipe as its first start and a finished run is never overwritten
silently."""

from __future__ import annotations

import errno
import functools
import json
import os
import shlex
import shutil
import socket
import sys
import threading
import time
import weakref
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from filelock import FileLock, Timeout

from helpers.config import Preset
from helpers.messages import say
from helpers.run import checkpoints as ck


class RunDirError(ValueError):
    """The run folder cannot be used as asked (it would overwrite an earlier run, or cannot be created)."""


# Settings that may change between a first start and its resume (they do not change what is trained).
RESUMABLE_CHANGES = ("max_steps", "eval_size", "eval_max_new_tokens", "vllm_enforce_eager")
SUMMARY_FILE = "summary.json"
RUN_FILES = (SUMMARY_FILE, "metrics.jsonl", "adapter", "before.json", "config.json")
CONFIG_FILE = "config.json"
# Everything a run writes into its folder, removed by --overwrite (summary.json first: an interrupted overwrite
# must never leave "a finished run"); config.json last, just before the new one is written.
RESULT_FILES = (SUMMARY_FILE, "eval.json", "samples.jsonl", "adapter", "reward_curve.png", "dashboard.png",
                "dashboard_samples.json", "metrics.jsonl", "metrics.redone.jsonl", "before.json")
EARLIER_RESULTS = ("summary-step-*.json", "eval-step-*.json")  # what _extend kept of a finished run's first steps
LOCK_FILE = ".grpo-kit.lock"  # flock'ed while a process writes the folder (released by the OS if it dies)
LOCK_INFO = ".grpo-kit.lock.json"  # who holds it: pid, host, start time, command


@dataclass
class RunFolder:
    """Where a run writes, and whether it starts fresh or continues an earlier start."""

    run_dir: Path
    checkpoint_dir: Path
    resume_from: ck.Checkpoint | None = None  # None: a fresh start (or an unfinished run continued from step 0)
    continuing: bool = False  # an unfinished run is being continued (from a checkpoint or from step 0)
    training_done: bool = False  # resume_from already reached max_steps: only the final evaluation is left
    lock: RunLock | None = field(default=None, repr=False, compare=False)  # this process's claim on run_dir

    def release(self) -> None:
        """Give up the claim on the run folder (finish() does, at the end of a run); harmless twice."""
        if self.lock is not None:
            self.lock.release()


# ------------------------------------------------------------------------------------ one writer per folder

_HELD: dict[str, list] = {}  # resolved lock path -> [FileLock, claims by this process]
# Re-entrant: the garbage collector may run an old claim's finalizer (_drop) while this thread holds the guard in
# RunLock.__init__; a plain Lock deadlocked there (seen in the test suite).
_HELD_GUARD = threading.RLock()


class RunLock:
    """This process's claim on a run folder, so two processes never train into one folder (a double-click, a cell
    re-run while the first still trains). A flock on <run_dir>/.grpo-kit.lock (filelock): the OS releases it when
    the holder dies, even by kill -9, so a stale lock clears itself; .grpo-kit.lock.json says who holds it.

    The same process may claim its folder again (a notebook re-running its start cell while the earlier RunState
    still exists): claims are counted, and the flock goes when the last is released or garbage collected."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        key = str(self.path.resolve())
        with _HELD_GUARD:
            held = _HELD.get(key)
            if held is None:
                held = _HELD[key] = [_acquire(self.path), 0]
            held[1] += 1
        self._finalizer = weakref.finalize(self, _drop, key, os.getpid())

    @property
    def held(self) -> bool:
        return self._finalizer.alive

    def release(self) -> None:
        self._finalizer()

    def __reduce__(self):
        """Several processes (accelerate): the planned RunFolder is sent to the others, the claim stays with
        process 0 (they arrive with lock=None)."""
        return type(None), ()


def _holder(info: Path) -> dict:
    try:
        found = json.loads(info.read_text())
        return found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        return {}



def _acquire(path: Path) -> FileLock:
    """Take the flock at once or refuse, naming who holds it and what to do."""
    info = path.with_name(LOCK_INFO)
    lock = FileLock(path, thread_local=False, blocking=False)
    try:
        lock.acquire()
    except Timeout:
        who = _holder(info)
        named = (f"process {who.get('pid')} on {who.get('host')}, started {who.get('started')} "
                 f"({who.get('command')})" if who.get("pid") else "another process (it is just starting)")
        kill = f"kill {who['pid']}" if who.get("host") == socket.gethostname() else "stop it"
        raise RunDirError(
            f"--run-dir {path.parent} is in use by {named}: one process writes a run folder at a time. Fix: wait "
            f"for it to finish, stop it ({kill}, or interrupt its notebook kernel) and run this again to resume, or "
            "choose another --run-dir."
        ) from None
    earlier = _holder(info)
    here = socket.gethostname()
    if earlier.get("pid") and not (earlier.get("pid") == os.getpid() and earlier.get("host") == here):
        if earlier.get("host") in (None, here):
            say(f"cleared a stale lock on {path.parent}: process {earlier['pid']} (started {earlier.get('started')}) "
                "is no longer running")
        else:  # a lock is held per machine: one on another host that shares this disk cannot be seen from here
            say(f"took over the lock on {path.parent} last written by process {earlier['pid']} on another machine, "
                f"{earlier.get('host')} (started {earlier.get('started')}): no process on this machine holds it, but "
                f"the kit cannot see {earlier.get('host')}'s processes. If that machine shares this folder (a network "
                "disk, Drive), make sure that run is no longer training before going on")
    info.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                                "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else ""}))
    return lock


def _drop(key: str, owner_pid: int) -> None:
    if os.getpid() != owner_pid:
        return  # a forked child: unlocking the shared descriptor would release the parent's lock
    with _HELD_GUARD:
        held = _HELD.get(key)
        if held is None:
            return
        held[1] -= 1
        if held[1] > 0:
            return
        del _HELD[key]
    try:
        Path(key).with_name(LOCK_INFO).unlink(missing_ok=True)
    except OSError:
        pass  # the folder went away: the flock is released below all the same
    held[0].release()


def default_run_dir(preset_name: str) -> Path:
    return Path("runs") / f"{preset_name}-{time.strftime('%Y%m%d-%H%M%S')}"


def resolve_run_dir(run_dir, preset_name: str) -> Path:
    """--run-dir as given, with ~ expanded (`--run-dir=~/x` reaches us unexpanded: the shell only expands a ~ that
    starts a word); None: a new timestamped folder."""
    return Path(run_dir).expanduser() if run_dir is not None else default_run_dir(preset_name)


def read_json(path: Path, fix: str = "pass --overwrite to start the run over, or choose a new --run-dir.",
              required: tuple[str, ...] = ()) -> dict:
    """A JSON file of the run folder, or a RunDirError that names it and the fix (a kill or a full disk while it was
    written leaves it cut off) instead of a JSON traceback. required: text keys it must hold (config.json's name)."""
    try:
        found = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        found = err
    missing = next((k for k in required if not isinstance(found, dict) or not isinstance(found.get(k), str)), None)
    if not isinstance(found, dict) or missing:
        why = (f"{type(found).__name__}: {found}" if isinstance(found, Exception) else
               "not a JSON object" if not isinstance(found, dict) else f'no "{missing}"')
        raise RunDirError(f"{path} is unreadable ({why}): it was cut off (a kill or a full disk while it was written) "
                          f"or edited. Fix: {fix}")
    return found


def _done(summary: dict, max_steps) -> bool:
    """The finished-run rule: a finished run is not trained again (refused with the fix) unless max_steps is now larger
    than the steps it took (then it continues from its last checkpoint)."""
    return summary.get("status", "finished") == "finished" and (max_steps or 0) <= summary.get("steps", 0)


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
    if write_problem(path):
        raise RunDirError(f"{flag} {path} is not writable. Fix: choose a folder you can write to.")


def write_problem(path: Path) -> str | None:
    """Why a file cannot be written in the folder (a probe file, not os.access: as root os.access says yes to a
    read-only mount), or None."""
    probe = path / ".grpo-kit-write-test"
    try:
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        return f"{err.strerror or err}: {err.filename or path}"
    return None


def plan_run_folder(run_dir: Path | None, preset_name: str, overwrite: bool, resume: bool | None = None,
                    checkpoint_dir: Path | None = None, config: dict | None = None) -> RunFolder:
    """Claim the run folder (RunLock: one writer at a time), then decide between a fresh start, a resume, and a
    refusal. Called after the settings were validated, so a refused command never claims or changes a folder.

    - a finished run (summary.json) continues from its last checkpoint when max_steps is now larger (the same
      command with a larger --max-steps), and is refused otherwise unless --overwrite;
    - an unfinished run (config.json but no summary.json) is resumed from its latest COMPLETE checkpoint
      (incomplete ones are named and moved aside), or restarted from step 0 when it has none; the settings
      must be the same as the first start's (except RESUMABLE_CHANGES), unless it never trained a step (a late
      failure before step 1): then the new settings replace it;
    - --overwrite removes every result of the earlier run first, saying what it removes.
    The returned RunFolder holds the claim (folder.lock) until folder.release() or until it is garbage collected.
    """
    run_dir = resolve_run_dir(run_dir, preset_name)
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"--run-dir {run_dir} is a file, not a folder. Fix: choose another path.")
    created = not run_dir.exists()
    make_folder(run_dir)
    lock = RunLock(run_dir)
    try:
        ckpt_dir = Path(checkpoint_dir).expanduser() if checkpoint_dir is not None else run_dir / ck.TRAINER_SUBDIR
        folder = _plan(run_dir, ckpt_dir, overwrite, resume, config)
    except BaseException:
        lock.release()
        if created:  # a refusal leaves no empty folder behind
            (run_dir / LOCK_FILE).unlink(missing_ok=True)
            if not any(run_dir.iterdir()):
                run_dir.rmdir()
        raise
    folder.lock = lock
    return folder


def _plan(run_dir: Path, ckpt_dir: Path, overwrite: bool, resume: bool | None, config: dict | None) -> RunFolder:
    ckpts = ck.list_checkpoints(ckpt_dir)
    earlier = [n for n in RUN_FILES if (run_dir / n).exists()] + ([f"{len(ckpts)} checkpoint(s)"] if ckpts else [])
    if overwrite:
        old = _results(run_dir, ckpt_dir)
        if old:
            say(f"--overwrite: replacing the earlier run in {run_dir} ({', '.join(earlier)}): removing "
                f"{', '.join(_named(p, run_dir) for p in old)} before anything new is written")
        remove_results(run_dir, ckpt_dir)
        return RunFolder(run_dir, ckpt_dir)
    if (run_dir / SUMMARY_FILE).exists():
        return _extend(run_dir, ckpt_dir, ckpts, earlier, resume, config)
    if not earlier:
        if resume:
            raise RunDirError(f"--resume: {run_dir} holds no run to resume (no checkpoints in {ckpt_dir}).")
        return RunFolder(run_dir, ckpt_dir)
    if resume is False:
        raise RunDirError(
            f"--run-dir {run_dir} holds an unfinished run ({', '.join(earlier)}) and --no-resume was given. Fix: "
            "leave out --no-resume to continue it, choose a new --run-dir, or pass --overwrite to start it over."
        )
    diff = _recipe_differences(run_dir, ckpt_dir, earlier, config)
    if diff and not resume and not ckpts and not _metrics_rows(run_dir):
        say(f"{run_dir} holds a run that stopped before its first step (no checkpoint, no metrics) with other "
            f"settings ({'; '.join(diff)}): starting it afresh with this command's settings")
        remove_results(run_dir, ckpt_dir)
        return RunFolder(run_dir, ckpt_dir)
    if diff:
        raise RunDirError(
            f"--run-dir {run_dir} holds an unfinished run whose config.json has other settings ({'; '.join(diff)}); "
            "continuing it would mix two recipes. Either this command differs from the first start's, or config.json "
            "was edited since (the kit writes it once, at the first start). Fix: run the first start's command (if "
            "config.json was edited, put its old values back), choose a new --run-dir, or pass --overwrite to start "
            "over."
        )
    return _continue(run_dir, ckpt_dir, ckpts, (config or {}).get("max_steps"))


def _metrics_rows(run_dir: Path) -> bool:
    """Some step was logged (metrics.redone.jsonl: steps trained before a restart from step 0)."""
    paths = [run_dir / "metrics.jsonl", run_dir / "metrics.redone.jsonl"]
    return any(p.is_file() and any(line.strip() for line in p.read_text(errors="replace").splitlines()) for p in paths)


def _extend(run_dir: Path, ckpt_dir: Path, ckpts: list, earlier: list[str], resume: bool | None,
            config: dict | None) -> RunFolder:
    """A finished run continues only when asked for more steps than it took (the same command with a larger
    --max-steps, or MAX_STEPS in the notebook), from the checkpoint its last step wrote; anything else is refused
    with the fix. Its summary.json and eval.json are kept beside the new ones as <name>-step-N.json."""
    summary = read_json(run_dir / SUMMARY_FILE)
    finished, wanted = summary.get("steps", 0), (config or {}).get("max_steps", 0)
    if summary.get("status", "finished") != "finished":  # helpers.run.health stopped it: nothing good to continue
        raise RunDirError(
            f"--run-dir {run_dir} holds a run that {summary['status']}"
            + ("" if "--overwrite" in summary["status"] else " Fix: rerun with --overwrite or a new --run-dir.")
        )
    if resume is False or _done(summary, wanted):
        more = f", or raise --max-steps above {finished} to continue it" if resume is not False else ""
        raise RunDirError(
            f"--run-dir {run_dir} already holds a finished run of {finished} steps ({', '.join(earlier)}). Fix: "
            f"choose a new --run-dir, pass --overwrite to replace it{more}."
        )
    diff = _recipe_differences(run_dir, ckpt_dir, earlier, config)
    if diff:
        raise RunDirError(
            f"--run-dir {run_dir} holds a finished run with other settings ({'; '.join(diff)}); continuing it "
            "would mix two recipes. Fix: raise only --max-steps, choose a new --run-dir, or pass --overwrite to "
            "start over."
        )
    last = ck.latest_complete(ckpt_dir)
    if last is None or last.step != finished:
        raise RunDirError(
            f"--run-dir {run_dir} finished at step {finished} without a checkpoint of that step (it ran with "
            "--save-steps 0, or the checkpoint was removed), so it cannot be continued. Fix: choose a new --run-dir, "
            "or pass --overwrite to train from step 0."
        )
    say(f"the finished run in {run_dir} took {finished} steps and max_steps is now {wanted}: continuing it")
    if config and "lr_scheduler_type" in config:
        say(schedule_on_extension(config, finished, wanted))
    for name in (SUMMARY_FILE, "eval.json"):
        if (run_dir / name).exists():
            kept = run_dir / f"{Path(name).stem}-step-{finished}.json"
            (run_dir / name).replace(kept)
            say(f"{name} of the first {finished} steps kept as {kept.name}")
    return _continue(run_dir, ckpt_dir, ckpts, wanted)


def learning_rate_at(config: dict, step: int, max_steps: int) -> float:
    """The learning rate TRL logs at `step` of a run planned for `max_steps`: transformers' own schedule (the one
    Trainer.create_scheduler builds from lr_scheduler_type and warmup_steps) after `step` optimizer steps."""
    import torch
    from transformers import get_scheduler

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=config["learning_rate"])
    schedule = get_scheduler(config["lr_scheduler_type"], optimizer, num_warmup_steps=config.get("warmup_steps", 0),
                             num_training_steps=max_steps)
    return config["learning_rate"] * schedule.lr_lambdas[0](step)


def schedule_on_extension(config: dict, finished: int, wanted: int) -> str:
    """What extending a finished run does to its learning rate, said at extension. The kit's choice (which is what
    Trainer does when it reloads the checkpoint's scheduler with the new max_steps): the schedule is re-planned for
    the new total, so steps finished+1 .. wanted get the learning rate a `wanted`-step run has at those steps, with
    no second warm-up (the optimizer's state is resumed). A decaying schedule had reached its end at `finished`, so
    the learning rate jumps back up at finished+1."""
    kind, lr = config["lr_scheduler_type"], functools.partial(learning_rate_at, config)
    one = wanted == finished + 1
    added = f"step {wanted}" if one else f"steps {finished + 1}-{wanted}"
    if all(lr(s, finished) == lr(s, wanted) for s in (1, finished)):
        return (f"learning rate: the {kind} schedule does not depend on max_steps, so {added} "
                f"{'goes' if one else 'go'} on at {lr(finished + 1, wanted):.3g}, as before")
    was, now = lr(finished, finished), lr(finished + 1, wanted)
    return (f"learning rate: the {kind} schedule is re-planned for {wanted} steps, not restarted: "
            f"{added} {'gets' if one else 'get'} the learning rate a {wanted}-step run has there ({now:.3g} at step "
            f"{finished + 1}, {lr(wanted, wanted):.3g} at step {wanted}), without a new warm-up. The first {finished} "
            f"steps were planned for {finished}: their schedule had reached {was:.3g} at step {finished}"
            + (", so the rate jumps back up" if now > was else "") + " (docs/training-and-resume.md, extending a run)")


def _results(run_dir: Path, ckpt_dir: Path) -> list[Path]:
    """Every result of an earlier run, in the order remove_results removes them: summary.json first (an
    interruption half-way leaves an unfinished run, never "a finished run" beside new settings), config.json last.
    incomplete-checkpoint-* folders set aside earlier are not results (the kit never deletes them)."""
    paths = [run_dir / n for n in RESULT_FILES]
    paths += sorted(p for pattern in EARLIER_RESULTS for p in run_dir.glob(pattern))
    paths += [c.path for c in ck.list_checkpoints(ckpt_dir)]
    paths += [ckpt_dir / "before.json", ckpt_dir / CONFIG_FILE, run_dir / CONFIG_FILE]
    return [p for p in paths if p.exists() or p.is_symlink()]


def _named(path: Path, run_dir: Path) -> str:
    return str(path.relative_to(run_dir)) if run_dir in path.parents else str(path)


def remove_results(run_dir: Path, ckpt_dir: Path) -> None:
    """Remove every result of an earlier run (_results), so new settings never sit beside old results."""
    for path in _results(run_dir, ckpt_dir):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _recipe_differences(run_dir: Path, ckpt_dir: Path, earlier: list[str], config: dict | None) -> list[str]:
    """How `config` differs from the settings the run started with (its config.json); a folder without one is
    not the kit's run and is refused."""
    saved_path = next((p for p in (run_dir / CONFIG_FILE, ckpt_dir / CONFIG_FILE) if p.is_file()), None)
    if saved_path is None:
        raise RunDirError(
            f"--run-dir {run_dir} holds files ({', '.join(earlier)}) but no config.json from the kit, so it is not a "
            "run that can be continued. Fix: choose a new --run-dir, or pass --overwrite to replace them."
        )
    saved = read_json(saved_path)
    return config_differences(saved, config) if config is not None else []


def _continue(run_dir: Path, ckpt_dir: Path, ckpts: list, max_steps: int | None) -> RunFolder:
    latest = ck.latest_complete(ckpt_dir)
    for c in ckpts:
        if not c.complete and (latest is None or c.step > latest.step):
            ck.set_aside(c)
    step = latest.step if latest is not None else 0
    done = latest is not None and max_steps is not None and step >= max_steps
    if done:
        say(f"{latest.path.name} already reached max_steps={max_steps}: the run stopped after training (e.g. "
            "during the final evaluation). Not training again: going straight to the final evaluation")
    elif latest is not None:
        say(f"resuming from step {step} ({latest.path})")
    else:
        say("this run stopped before its first complete checkpoint: continuing it from step 0")
    try:
        ck.trim_metrics(run_dir / "metrics.jsonl", step)
    except OSError as err:
        if not ck.disk_full(err):
            raise
        raise RunDirError(f"the disk is full: moving the metrics of the steps after {step} to metrics.redone.jsonl "
                          f"failed ({ck.free_gb(run_dir):.1f} GB free). Nothing was lost: metrics.jsonl and the "
                          f"checkpoints in {ckpt_dir} are as they were. Fix: free some space (old runs, exports), then "
                          "run the same command again.") from None
    return RunFolder(run_dir, ckpt_dir, latest, continuing=True, training_done=done)


def reward_names(reward_funcs) -> list[str]:
    """The names TRL logs the rewards under (rewards/<name>/mean), as config.json lists them."""
    return [getattr(f, "__name__", type(f).__name__) for f in reward_funcs]


def run_config(preset: Preset, reward_funcs) -> dict:
    """What config.json holds: every Preset field, and the reward functions by name."""
    config = json.loads(json.dumps(preset.to_dict(), default=list))
    config["reward_funcs"] = reward_names(reward_funcs)
    return config


def plan_folder(preset: Preset, options, reward_funcs) -> RunFolder:
    """plan_run_folder for these settings (RunOptions): the folder, its checkpoints (Drive when asked) and the
    config.json a resume is compared with. `python -m helpers.train` calls it before TRL is imported, so a folder in
    use, a finished run or other settings are refused in seconds; the pipeline's start() calls it otherwise."""
    run_dir = resolve_run_dir(options.run_dir, preset.name)
    checkpoint_dir = options.checkpoint_dir
    if options.drive and checkpoint_dir is None:
        checkpoint_dir = ck.checkpoint_root(use_drive=True, run_dir=run_dir)
    return plan_run_folder(run_dir, preset.name, options.overwrite, resume=options.resume,
                           checkpoint_dir=checkpoint_dir, config=run_config(preset, reward_funcs))


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
