"""The run folder survives its users: one writer at a time (a lock, stale after a kill), a run that never trained
does not lock out the corrected command, an interrupted --overwrite leaves no old results, Ctrl-C and a full disk
say how to resume, corrupt files and `~` get a clear message. Real processes where the case is about processes."""

import errno
import gc
import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from helpers import runtime as rt
from helpers.config import PresetError, get_preset
from helpers.run import checkpoints as ck
from helpers.run import folder as fo
from helpers.run import guard, pipeline
from helpers.run.folder import RunDirError, plan_run_folder
from helpers.run.options import RunOptions
from tests.test_checkpoints import CONFIG, make_checkpoint

ROOT = Path(__file__).resolve().parents[1]

# Tries the run folder's flock from another process, without the kit: "free" or "held".
PROBE = ("import sys, filelock\nlock = filelock.FileLock(sys.argv[1], blocking=False)\n"
         "try:\n    lock.acquire()\nexcept filelock.Timeout:\n    print('held')\nelse:\n    print('free')")
# Claims a run folder the way the kit does, says so, and holds it until killed.
HOLDER = ("import sys, time\nfrom helpers.run.folder import plan_run_folder\n"
          "folder = plan_run_folder(sys.argv[1], 'cpu', overwrite=False)\nprint('claimed', flush=True)\n"
          "time.sleep(600)")


def _lock_from_another_process(run: Path) -> str:
    return subprocess.run([sys.executable, "-c", PROBE, str(run / fo.LOCK_FILE)], capture_output=True, text=True,
                          timeout=60).stdout.strip()


@pytest.fixture
def holder(tmp_path):
    """A second real process that claimed tmp_path/run and holds it (killed with SIGKILL at the end)."""
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "claimed"
        yield run, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)


# ---------------------------------------------------------------------------------------------- the lock


def test_an_old_claim_collected_while_a_new_one_is_taken_does_not_deadlock(tmp_path, monkeypatch):
    """The garbage collector can finalize an earlier RunLock (its _drop) in the middle of RunLock.__init__, while
    this thread holds the guard: that must not wait for itself."""
    import threading

    old = fo.RunLock(tmp_path / "old")
    acquire = fo._acquire

    def collected_meanwhile(path):
        old.release()  # what gc would do to an unreachable earlier claim, at this point
        return acquire(path)

    monkeypatch.setattr(fo, "_acquire", collected_meanwhile)
    done = []
    worker = threading.Thread(target=lambda: done.append(fo.RunLock(tmp_path / "new")), daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert done and done[0].held and not old.held, "taking a new claim while an old one is finalized deadlocked"
    done[0].release()


def test_a_second_process_is_refused_at_once_naming_the_holder_and_a_killed_holder_leaves_no_lock(holder, capsys):
    run, proc = holder
    started = time.time()
    with pytest.raises(RunDirError) as refused:
        plan_run_folder(run, "cpu", overwrite=False, config=CONFIG)
    assert time.time() - started < 2  # not blocking: refused at once
    text = str(refused.value)
    assert f"in use by process {proc.pid} on {os.uname().nodename}, started 20" in text
    assert "Fix: wait for it to finish, stop it (kill" in text and "choose another --run-dir" in text
    with pytest.raises(RunDirError, match="in use by process"):  # --overwrite does not take a busy folder either
        plan_run_folder(run, "cpu", overwrite=True, config=CONFIG)
    assert json.loads((run / fo.LOCK_INFO).read_text())["pid"] == proc.pid  # the refusals left the holder's claim

    proc.send_signal(signal.SIGKILL)  # the holder dies without releasing anything: its info file stays
    proc.wait(timeout=60)
    assert (run / fo.LOCK_INFO).exists()
    folder = plan_run_folder(run, "cpu", overwrite=False, config=CONFIG)
    assert folder.lock.held
    assert f"cleared a stale lock on {run}: process {proc.pid}" in capsys.readouterr().out
    assert json.loads((run / fo.LOCK_INFO).read_text())["pid"] == os.getpid()
    folder.release()
    assert not (run / fo.LOCK_INFO).exists() and _lock_from_another_process(run) == "free"


def _heavy_imports(stderr: str) -> set[str]:
    """The trl, transformers and peft modules `python -X importtime` says were imported, less TRL's parser (its lazy
    package shell and trl.scripts: helpers.cli)."""
    names = {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}
    parser = {"trl", "trl._compat", "trl.import_utils", "trl._lazy_module", "trl.scripts", "trl.scripts.utils",
              "trl.scripts._hf_argparser"}
    return {m for m in names if m.split(".")[0] in ("trl", "transformers", "peft")} - parser


def test_the_command_line_refuses_a_folder_another_process_trains_in(holder):
    """In seconds, before TRL (or transformers) is imported: the folder is claimed before the pipeline loads."""
    run, proc = holder
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "helpers.train", "--preset", "cpu", "--run-dir",
                        str(run)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"in use by process {proc.pid}" in r.stderr and "Fix: wait for it to finish" in r.stderr
    assert not (run / "config.json").exists()  # nothing written beside the holder's run
    assert _heavy_imports(r.stderr) == set() and time.perf_counter() - start < 10


def test_a_finished_run_and_other_settings_are_refused_before_trl(tmp_path):
    """The resume refusals, too, come before TRL's import: a finished run, and an unfinished one with other settings
    (whose message says config.json may have been edited, not only "run the same command")."""
    finished, other = tmp_path / "finished", tmp_path / "other"
    for run in (finished, other):
        run.mkdir()
        (run / "config.json").write_text(json.dumps(pipeline.run_config(get_preset("cpu"), [])))
    (finished / "summary.json").write_text(json.dumps({"status": "finished", "steps": 40}))
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "learning_rate": 0.5}))  # edited by hand
    (other / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.1}) + "\n")  # it trained a step
    for run, flags, said in ((finished, [], "already holds a finished run of 40 steps"),
                             (other, ["--reward", "helpers.rewards:DEFAULT_REWARDS"], "or config.json was edited")):
        before = {p.name: p.read_bytes() for p in run.iterdir()}
        r = subprocess.run([sys.executable, "-X", "importtime", "-m", "helpers.train", "--preset", "cpu", "--run-dir",
                            str(run), *flags], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and said in r.stderr and "Fix:" in r.stderr, r.stderr[-1500:]
        assert _heavy_imports(r.stderr) == set()
        after = {p.name: p.read_bytes() for p in run.iterdir() if p.name != fo.LOCK_FILE}  # the empty flock file
        assert after == before  # nothing written, nothing lost


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_like_ctrl_c(tmp_path, signum):
    """What a scheduler, `timeout`, a closed terminal or Colab sends: the kit's line with how to continue, the
    folder's lock released, exit 128 + the signal's number (143, 129), no traceback."""
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "helpers.train", "--preset", "cpu", "--max-steps", "2",
                             "--run-dir", str(run)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.time() + 120
        while not (run / fo.LOCK_INFO).exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)  # claimed: the folder is the run's now
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum, err[-2000:]
    assert f"stopped by {signal.Signals(signum).name}" in err and "run the same command again" in err
    assert "Traceback" not in err
    assert not (run / fo.LOCK_INFO).exists() and _lock_from_another_process(run) == "free"


@pytest.mark.parametrize("given", ["", " ", ".", "KIT", "ABOVE"])
def test_an_empty_run_dir_or_the_kits_own_folder_is_refused_before_anything_is_written(tmp_path, given):
    """`--run-dir "$RUN"` with RUN unset trained into the kit's root: an empty path, the kit's checkout and any folder
    above it are refused (exit 2, the fix), and the kit's folder is left as it was."""
    value = {"KIT": str(ROOT), "ABOVE": str(ROOT.parent)}.get(given, given)
    run_files = ("config.json", "adapter", "metrics.jsonl", "trainer", fo.LOCK_FILE, fo.LOCK_INFO)
    assert not any((ROOT / name).exists() for name in run_files)
    r = subprocess.run([sys.executable, "-m", "helpers.train", "--preset", "cpu", "--max-steps", "1", "--run-dir",
                        value], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert ("an empty path" if not given.strip() else "is the kit's own folder") in r.stderr
    assert "Fix:" in r.stderr and "runs/demo" in r.stderr
    assert not any((ROOT / name).exists() for name in run_files)  # nothing of a run beside README.md
    with pytest.raises(PresetError, match="run_dir='': is the text '', not a folder path"):
        guard.validate_options(RunOptions(run_dir=""), rt.detect())  # a notebook's RunOptions, too


def test_a_stale_lock_from_another_machine_is_not_called_dead(tmp_path, capsys):
    """A flock is held per machine: the kit cannot know whether a process on another host still runs."""
    run = tmp_path / "run"
    run.mkdir()
    (run / fo.LOCK_INFO).write_text(json.dumps({"pid": 4242, "host": "other-box", "started": "2026-11-28 10:00:00"}))
    folder = plan_run_folder(run, "cpu", overwrite=False, config=CONFIG)
    said = capsys.readouterr().out
    folder.release()
    assert "last written by process 4242 on another machine, other-box" in said
    assert "no longer running" not in said and "make sure that run is no longer training" in said


def test_the_same_process_may_claim_its_folder_again_until_the_last_claim_goes(tmp_path):
    """A notebook re-running its start cell: the earlier RunState still holds the folder when start() runs again."""
    run = tmp_path / "run"
    first = plan_run_folder(run, "cpu", overwrite=False)
    second = plan_run_folder(run, "cpu", overwrite=False)  # not refused: this process holds it
    assert _lock_from_another_process(run) == "held"
    first.release()
    first.release()  # harmless twice
    assert second.lock.held and _lock_from_another_process(run) == "held"
    del second  # the notebook's variable now points elsewhere: garbage collected, claim released
    gc.collect()
    assert _lock_from_another_process(run) == "free"


def test_start_holds_the_folder_until_finish_releases_it(tmp_path):
    state = pipeline.start(get_preset("cpu", max_steps=2), pipeline.RunOptions(run_dir=tmp_path / "run"))
    assert state.folder.lock.held and _lock_from_another_process(state.run_dir) == "held"
    state.folder.release()  # what finish() does after summary.json
    assert _lock_from_another_process(state.run_dir) == "free"


def test_a_refused_plan_claims_nothing_and_leaves_no_folder(tmp_path):
    with pytest.raises(RunDirError, match="no run to resume"):
        plan_run_folder(tmp_path / "new", "cpu", overwrite=False, resume=True, config=CONFIG)
    assert not (tmp_path / "new").exists()
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text('{"steps": 3}')
    with pytest.raises(RunDirError, match="finished run"):
        plan_run_folder(run, "cpu", overwrite=False, config=CONFIG)
    assert _lock_from_another_process(run) == "free" and not (run / fo.LOCK_INFO).exists()


# ------------------------------------------------------------------------- a run that never trained a step


def test_a_run_that_failed_before_its_first_step_is_replaced_by_the_corrected_command(tmp_path, capsys):
    """e.g. --lr-scheduler-type bogus found after the model loaded and before.json was written: config.json and
    before.json are all the folder holds, and the corrected command must not be refused as "other settings"."""
    run = tmp_path / "run"
    failed = pipeline.start(get_preset("cpu", learning_rate=1e-4), pipeline.RunOptions(run_dir=run))
    (run / "before.json").write_text('{"accuracy": 0.1}')
    (run / "metrics.jsonl").write_text("")
    del failed  # the failed process ended
    gc.collect()
    fixed = pipeline.start(get_preset("cpu", learning_rate=2e-4), pipeline.RunOptions(run_dir=run))
    out = capsys.readouterr().out
    assert "stopped before its first step (no checkpoint, no metrics) with other settings (learning_rate: 0.0001 " \
           "-> 0.0002)" in out and "starting it afresh" in out
    assert not fixed.folder.continuing and fixed.folder.resume_from is None
    assert json.loads((run / "config.json").read_text())["learning_rate"] == 2e-4
    assert not (run / "before.json").exists()  # evaluated under the old settings: evaluated again


def test_a_run_that_trained_keeps_refusing_other_settings(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(CONFIG))
    (run / "metrics.jsonl").write_text('{"step": 1}\n')  # a step was trained (no checkpoint: --save-steps 0)
    with pytest.raises(RunDirError, match="other settings"):
        plan_run_folder(run, "cpu", overwrite=False, config=dict(CONFIG, learning_rate=1e-3))
    (run / "metrics.jsonl").write_text("")
    with pytest.raises(RunDirError, match="other settings"):  # --resume insists on continuing: never replaced
        plan_run_folder(run, "cpu", overwrite=False, resume=True, config=dict(CONFIG, learning_rate=1e-3))
    assert (run / "config.json").exists()


def test_a_run_whose_config_json_says_backend_as_text_resumes(tmp_path, capsys):
    """Before helpers.backend, Preset.backend was plain text and config.json held "backend": "cpu"; the Backend type
    writes the same text, so the same command resumes a run started before it (helpers.evaluate reads it back)."""
    from helpers.backend import Backend
    from helpers.evaluate import preset_from_run

    run = tmp_path / "run"
    first = pipeline.start(get_preset("cpu", max_steps=4), pipeline.RunOptions(run_dir=run))
    first.folder.release()
    assert '"backend": "cpu",' in (run / "config.json").read_text()
    older = dict(json.loads((run / "config.json").read_text()), backend="cpu")  # as the kit wrote it: plain text
    (run / "config.json").write_text(json.dumps(older, indent=2))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2)))
    for step in (1, 2):
        make_checkpoint(first.folder.checkpoint_dir, step)
    again = pipeline.start(get_preset("cpu", max_steps=4), pipeline.RunOptions(run_dir=run))
    again.folder.release()
    assert again.folder.continuing and again.folder.resume_from.step == 2
    assert "resuming from step 2" in capsys.readouterr().out
    assert preset_from_run(run).backend is Backend.CPU and preset_from_run(run) == get_preset("cpu", max_steps=4)


@pytest.mark.parametrize("max_steps, refused", [(1, True), (2, True), (3, False)])
def test_a_finished_run_is_refused_unless_max_steps_is_now_larger(tmp_path, max_steps, refused):
    """plan_run_folder (the command line's, and the notebook's through pipeline.start): a finished run is not trained
    again unless max_steps is now larger; then it continues from its checkpoint."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(dict(CONFIG, max_steps=2)))
    (run / "summary.json").write_text(json.dumps({"steps": 2, "status": "finished"}))
    make_checkpoint(run / "trainer", 2)
    if refused:
        with pytest.raises(RunDirError, match="already holds a finished run of 2 steps"):
            plan_run_folder(run, "cpu", overwrite=False, config=dict(CONFIG, max_steps=max_steps))
    else:
        assert plan_run_folder(run, "cpu", overwrite=False, config=dict(CONFIG, max_steps=max_steps)).continuing


def test_a_cut_off_summary_is_named_with_the_fix(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(dict(CONFIG, max_steps=2)))
    make_checkpoint(run / "trainer", 2)
    (run / "summary.json").write_text('{"steps": 2')  # a kill while it was written
    with pytest.raises(RunDirError, match=r"summary.json is unreadable .*Fix: pass --overwrite"):
        plan_run_folder(run, "cpu", overwrite=False, config=dict(CONFIG, max_steps=2))


# --------------------------------------------------------------------------------- resume never over-trains


@pytest.mark.parametrize("latest, max_steps, done", [(2, 2, True), (3, 2, True), (2, 3, False), (2, 4, False),
                                                     (4, 4, True)])
def test_a_checkpoint_at_max_steps_goes_straight_to_the_final_evaluation(tmp_path, capsys, latest, max_steps, done):
    """num_iterations=2 samples every other step: checkpoints at 2 and 4 end a sampled batch, 3 does not; whichever
    step the latest complete checkpoint holds, it is never trained past max_steps."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(dict(CONFIG, max_steps=max_steps)))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, latest + 1)))
    for step in range(1, latest + 1):
        make_checkpoint(run / "trainer", step)
    plan = plan_run_folder(run, "cpu", overwrite=False, config=dict(CONFIG, max_steps=max_steps))
    assert plan.continuing and plan.resume_from.step == latest and plan.training_done is done
    out = capsys.readouterr().out
    assert (f"checkpoint-{latest} already reached max_steps={max_steps}" in out) is done
    assert (f"resuming from step {latest}" in out) is not done


def test_train_restores_a_finished_checkpoint_instead_of_training(tmp_path, monkeypatch):
    """The adapter and the TrainerState come from the checkpoint: finish() then reports max_steps, not max_steps+1."""
    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from safetensors.torch import save_file

    def tiny():
        torch.manual_seed(0)
        return get_peft_model(torch.nn.Sequential(torch.nn.Linear(4, 4)), LoraConfig(r=2, target_modules=["0"]))

    trained = tiny()
    for name, p in trained.named_parameters():
        if "lora_B" in name:
            p.data.fill_(0.5)  # LoRA B starts at zero: a trained adapter does not
    ckpt = make_checkpoint(tmp_path / "trainer", 2)
    save_file(get_peft_model_state_dict(trained), str(ckpt / "adapter_model.safetensors"))
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 2, "max_steps": 2,
                                                         "log_history": [{"step": 2, "loss": 0.1}]}))
    trainer = types.SimpleNamespace(model=tiny(), state=None, train=lambda **k: pytest.fail("trained again"))
    state = types.SimpleNamespace(preset=get_preset("cpu"), gpu="t4", options=RunOptions(), model=None,
                                  folder=fo.RunFolder(tmp_path, tmp_path / "trainer",
                                                                   ck.list_checkpoints(tmp_path / "trainer")[0],
                                                                   continuing=True, training_done=True))
    monkeypatch.setattr(pipeline, "prepare_trainer", lambda *a: None)
    pipeline.train(state, trainer)
    assert trainer.state.global_step == 2 and trainer.state.log_history == [{"step": 2, "loss": 0.1}]
    got = get_peft_model_state_dict(trainer.model)
    assert all(torch.equal(got[k], v) for k, v in get_peft_model_state_dict(trained).items())


# ----------------------------------------------------------------------------------- --overwrite, interrupted


def _finished_run(tmp_path) -> Path:
    """A finished run that was extended once: every kind of result the kit writes."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(CONFIG))
    for name in ("summary.json", "eval.json", "summary-step-2.json", "eval-step-2.json", "before.json"):
        (run / name).write_text('{"steps": 3}')
    for name in ("samples.jsonl", "metrics.jsonl", "metrics.redone.jsonl", "dashboard_samples.json"):
        (run / name).write_text('{"step": 1}\n')
    for name in ("reward_curve.png", "dashboard.png"):
        (run / name).write_bytes(b"\x89PNG")
    (run / "adapter").mkdir()
    (run / "adapter" / "adapter_model.safetensors").write_bytes(b"old")
    for step in (2, 3):
        make_checkpoint(run / "trainer", step)
    return run


OLD_RESULTS = ("summary.json", "eval.json", "summary-step-2.json", "eval-step-2.json", "before.json", "samples.jsonl",
               "metrics.jsonl", "metrics.redone.jsonl", "dashboard_samples.json", "reward_curve.png", "dashboard.png",
               "adapter", "config.json", "trainer/checkpoint-2", "trainer/checkpoint-3")


def test_overwrite_removes_every_old_result_before_the_new_config_is_written(tmp_path, monkeypatch, capsys):
    run = _finished_run(tmp_path)

    def interrupted(*args, **kwargs):  # the user presses Ctrl-C right after the overwrite planning
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "write_config", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pipeline.start(get_preset("cpu", learning_rate=1e-4), pipeline.RunOptions(run_dir=run, overwrite=True))
    left = [name for name in OLD_RESULTS if (run / name).exists()]
    assert left == [], f"old results left beside new settings: {left}"
    out = capsys.readouterr().out
    assert "--overwrite: replacing the earlier run" in out and "summary.json, eval.json" in out
    assert "trainer/checkpoint-3" in out and "before anything new is written" in out


def test_an_overwrite_cut_short_while_removing_never_leaves_a_finished_run(tmp_path, monkeypatch):
    run = _finished_run(tmp_path)

    def cut(path, *a, **k):
        raise KeyboardInterrupt  # interrupted when it reaches the first folder (adapter/)

    monkeypatch.setattr(fo.shutil, "rmtree", cut)
    with pytest.raises(KeyboardInterrupt):
        plan_run_folder(run, "cpu", overwrite=True, config=CONFIG)
    assert not (run / "summary.json").exists() and not (run / "eval.json").exists()
    monkeypatch.undo()
    with pytest.raises(RunDirError, match="holds an unfinished run whose config.json has other settings"):  # not finished
        plan_run_folder(run, "cpu", overwrite=False, config=dict(CONFIG, learning_rate=1e-3))
    plan_run_folder(run, "cpu", overwrite=True, config=CONFIG)  # the same --overwrite again finishes the job
    assert [name for name in OLD_RESULTS if (run / name).exists()] == []


# ------------------------------------------------------------------------------------ Ctrl-C and a full disk


def _state_with_checkpoint(tmp_path, save_steps=1):
    state = pipeline.start(get_preset("cpu", max_steps=4),
                           pipeline.RunOptions(run_dir=tmp_path / "run", save_steps=save_steps))
    if save_steps:
        make_checkpoint(state.folder.checkpoint_dir, 2)
    return state


def _trainer_raising(err):
    def train(**kwargs):
        raise err

    return types.SimpleNamespace(train=train, state=types.SimpleNamespace(global_step=3))


def test_ctrl_c_during_training_says_how_to_resume_and_reraises(tmp_path, monkeypatch, capsys):
    state = _state_with_checkpoint(tmp_path)
    monkeypatch.setattr(pipeline, "prepare_trainer", lambda *a: None)
    monkeypatch.setattr(sys, "argv", [str(ROOT / "helpers" / "train.py"), "--run-dir", str(state.run_dir)])
    capsys.readouterr()
    with pytest.raises(KeyboardInterrupt):
        pipeline.train(state, _trainer_raising(KeyboardInterrupt()))
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("[grpo-kit]")]
    assert lines == [f"[grpo-kit] interrupted at step 3. To resume, run `python -m helpers.train --run-dir "
                     f"{state.run_dir}` again: it resumes from checkpoint-2 (step 2)"]
    monkeypatch.setattr(sys, "argv", ["ipykernel_launcher.py"])  # a notebook: the cells, not a command
    with pytest.raises(KeyboardInterrupt):
        pipeline.train(state, _trainer_raising(KeyboardInterrupt()))
    assert "same RUN_DIR" in capsys.readouterr().out


@pytest.mark.parametrize("err", [OSError(errno.ENOSPC, "No space left on device"),
                                 RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 3136 vs "
                                              "3030"),
                                 RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")])
def test_a_full_disk_while_saving_a_checkpoint_says_free_space_and_resume(tmp_path, monkeypatch, err):
    state = _state_with_checkpoint(tmp_path)
    monkeypatch.setattr(pipeline, "prepare_trainer", lambda *a: None)
    if "file write failed" in str(err):
        err.__context__ = OSError(errno.ENOSPC, "No space left on device")  # ENOSPC underneath torch's error
    with pytest.raises(RunDirError) as full:
        pipeline.train(state, _trainer_raising(err))
    text = str(full.value)
    assert text.startswith(f"the disk is full: writing {state.folder.checkpoint_dir} failed at step 3 (")
    assert "GB free" in text and "Fix: free some space" in text and "resumes from checkpoint-2 (step 2)" in text


def test_other_errors_in_training_pass_through_unchanged(tmp_path, monkeypatch):
    state = _state_with_checkpoint(tmp_path, save_steps=0)
    monkeypatch.setattr(pipeline, "prepare_trainer", lambda *a: None)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        pipeline.train(state, _trainer_raising(RuntimeError("shape mismatch")))
    assert ck.resume_point(state.folder.checkpoint_dir, 0).startswith("starts over from step 0 (this run saves no")


# ----------------------------------------------------------------------------------- corrupt files and ~


@pytest.mark.parametrize("name", ["config.json", "summary.json"])
def test_a_truncated_json_file_is_named_with_the_fix(tmp_path, name):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(CONFIG))
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    (run / name).write_text('{"steps": 3, "bef')
    with pytest.raises(RunDirError) as bad:
        plan_run_folder(run, "cpu", overwrite=False, config=dict(CONFIG, max_steps=5))
    assert f"{run / name} is unreadable (JSONDecodeError" in str(bad.value)
    assert "Fix: pass --overwrite to start the run over, or choose a new --run-dir" in str(bad.value)
    plan_run_folder(run, "cpu", overwrite=True, config=CONFIG)  # the fix works
    assert not (run / name).exists()


def test_a_tilde_run_dir_and_a_truncated_summary_on_the_command_line(tmp_path):
    """`--run-dir=~/x`: the shell leaves that ~ alone; the kit expands it (no folder named ~ in the kit)."""
    run = tmp_path / "x"
    run.mkdir()
    (run / "config.json").write_text("{}")
    (run / "summary.json").write_text('{"steps": 2, "af')  # the disk filled while it was written
    r = subprocess.run([sys.executable, "-m", "helpers.train", "--preset", "cpu", "--run-dir=~/x"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "HOME": str(tmp_path)})
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"{run / 'summary.json'} is unreadable" in r.stderr and "--overwrite" in r.stderr
    assert not (ROOT / "~").exists()
    assert fo.resolve_run_dir("~/x", "cpu") == Path.home() / "x"


def test_a_run_the_health_check_stopped_is_not_a_finished_run(tmp_path):
    """Its summary.json says 'stopped: ...': the same command (or a larger max_steps) is refused with that status and
    the fix, never 'a finished run' or 'finished without a checkpoint of that step'; the notebook reruns it."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(CONFIG))
    make_checkpoint(run / "trainer", 2)
    status = "stopped: grad_norm is nan at step 3. Fix: lower the learning rate ..."
    (run / "summary.json").write_text(json.dumps({"steps": 3, "status": status}))
    for max_steps in (3, 10):
        with pytest.raises(RunDirError, match=r"holds a run that stopped: grad_norm is nan at step 3.*--overwrite"):
            plan_run_folder(run, "cpu", overwrite=False, config={**CONFIG, "max_steps": max_steps})


def test_a_checkpoint_without_an_adapter_at_max_steps_is_the_kits_error_not_a_traceback(tmp_path, monkeypatch):
    ckpt = make_checkpoint(tmp_path / "trainer", 2)
    (ckpt / "adapter_model.safetensors").unlink(missing_ok=True)
    trainer = types.SimpleNamespace(model=None, state=None, train=lambda **k: pytest.fail("trained again"))
    state = types.SimpleNamespace(preset=get_preset("cpu"), gpu="t4", options=RunOptions(), model=None,
                                  folder=fo.RunFolder(tmp_path, tmp_path / "trainer",
                                                      ck.list_checkpoints(tmp_path / "trainer")[0], continuing=True,
                                                      training_done=True))
    monkeypatch.setattr(pipeline, "prepare_trainer", lambda *a: None)
    with pytest.raises(RunDirError, match="adapter_model.safetensors"):
        pipeline.train(state, trainer)


class _FullDiskModel:
    """save_pretrained writes part of the adapter, then the disk is full (what safetensors says, not an OSError)."""

    def save_pretrained(self, path):
        Path(path).mkdir(parents=True, exist_ok=True)
        Path(path, "adapter_config.json").write_text("{}")
        raise Exception("No space left on device (os error 28)")  # safetensors' SafetensorError is no OSError


def test_a_full_disk_while_writing_the_adapter_keeps_the_earlier_one_and_leaves_no_half(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"earlier")
    with pytest.raises(Exception, match="os error 28"):
        pipeline._save_adapter_beside(_FullDiskModel(), None, adapter)
    assert (adapter / "adapter_model.safetensors").read_bytes() == b"earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]  # no adapter.partial left behind


def test_a_full_disk_in_finish_is_the_kits_message_with_free_space_and_the_resume(tmp_path, monkeypatch):
    state = _state_with_checkpoint(tmp_path)

    def full(*args):
        raise Exception("No space left on device (os error 28)")

    monkeypatch.setattr(pipeline, "_finish", full)
    with pytest.raises(RunDirError) as err:
        pipeline.finish(state, _trainer_raising(None), [], None)
    text = str(err.value)
    assert text.startswith("the disk is full: writing the results in") and "GB free" in text
    assert "Nothing trained is lost" in text and "resumes from checkpoint-2 (step 2)" in text
    assert ck.list_checkpoints(state.folder.checkpoint_dir)[0].path.is_dir()
    state.folder.release()


def test_a_full_disk_on_the_rerun_loses_no_metrics(tmp_path, monkeypatch):
    """Resuming moves the metrics of the steps after the checkpoint aside: a full disk there is the kit's message,
    and metrics.jsonl is left whole (it was rewritten in place before)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(CONFIG))
    make_checkpoint(run / "trainer", 2)
    rows = "".join(json.dumps({"step": s, "reward": s}) + "\n" for s in (1, 2, 3))
    (run / "metrics.jsonl").write_text(rows)

    def full(path, text):
        Path(path).write_text(text[:5])  # what a write cut short by a full disk leaves: here, never in place
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ck, "write_atomically", lambda path, text: full(tmp_path / "elsewhere", text))
    with pytest.raises(RunDirError, match=r"the disk is full: moving the metrics .*GB free.*Nothing was lost"):
        plan_run_folder(run, "cpu", overwrite=False, config=CONFIG)
    assert (run / "metrics.jsonl").read_text() == rows


def test_notebook_06s_exports_are_refused_in_a_folder_a_run_trains_in(holder):
    """The export cells write into <run folder>/exports: with a training process in the folder they are refused,
    naming it, before anything is written; in a free folder the notebook's kernel holds the claim from then on."""
    from helpers import sharing

    run, proc = holder
    with pytest.raises(RunDirError, match=f"in use by process {proc.pid}"):
        sharing.export_dir(run)
    assert not (run / sharing.EXPORTS).exists()
    proc.kill()
    proc.wait(timeout=60)
    assert sharing.export_dir(run) == run / sharing.EXPORTS
    assert _lock_from_another_process(run) == "held"  # this process (a notebook kernel) now writes there
    sharing._CLAIMS.pop(str(run.resolve())).release()
