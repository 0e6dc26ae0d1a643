"""Checkpoint validation on hand-made good / partial / corrupt folders, rotation, metrics trimming, run planning."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from helpers import train
from helpers.run import pipeline
from helpers.run.folder import RunDirError, plan_run_folder
from helpers.run import checkpoints as ck


def make_checkpoint(root: Path, step: int) -> Path:
    folder = root / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    torch.save({"state": {}, "param_groups": []}, folder / "optimizer.pt")
    torch.save({"last_epoch": step}, folder / "scheduler.pt")
    torch.save({"python": 1}, folder / "rng_state.pth")
    save_file({"base_model.layer.lora_A.weight": torch.zeros(2, 3)}, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({"r": 16}))
    return folder


def test_a_complete_checkpoint_has_no_problems(tmp_path):
    assert ck.checkpoint_problems(make_checkpoint(tmp_path, 1)) == []


@pytest.mark.parametrize("damage, expected", [
    (lambda f: (f / "trainer_state.json").unlink(), "trainer_state.json is missing"),
    (lambda f: (f / "trainer_state.json").write_text('{"global_step": 1'), "trainer_state.json is not readable JSON"),
    (lambda f: (f / "trainer_state.json").write_text('{}'), "no global_step"),
    (lambda f: (f / "optimizer.pt").unlink(), "optimizer.pt is missing"),
    (lambda f: (f / "optimizer.pt").write_bytes((f / "optimizer.pt").read_bytes()[:100]), "optimizer.pt is truncated"),
    (lambda f: (f / "scheduler.pt").write_bytes(b""), "scheduler.pt is empty"),
    (lambda f: (f / "adapter_model.safetensors").unlink(), "no model or adapter weights"),
    (lambda f: (f / "adapter_model.safetensors").write_bytes(
        (f / "adapter_model.safetensors").read_bytes()[:-5]), "adapter_model.safetensors is truncated"),
    (lambda f: (f / "adapter_model.safetensors").write_bytes(b"\x10\x00"), "adapter_model.safetensors is truncated"),
    (lambda f: (f / "adapter_model.safetensors").write_bytes(b"\x04\x00\x00\x00\x00\x00\x00\x00{{{{"),
     "unreadable header"),
    (lambda f: (f / "adapter_config.json").unlink(), "adapter_config.json is missing"),
    (lambda f: (f / "adapter_config.json").write_text("{"), "adapter_config.json is not readable JSON"),
    (lambda f: (f / "rng_state.pth").write_bytes(b"junk"), "rng_state.pth is truncated or corrupt"),
])
def test_partial_or_corrupt_checkpoints_are_named(tmp_path, damage, expected):
    folder = make_checkpoint(tmp_path, 1)
    damage(folder)
    problems = ck.checkpoint_problems(folder)
    assert any(expected in p for p in problems), problems


def test_latest_complete_skips_newer_broken_ones_and_says_which(tmp_path):
    make_checkpoint(tmp_path, 1)
    make_checkpoint(tmp_path, 2)
    bad = make_checkpoint(tmp_path, 3)
    (bad / "trainer_state.json").unlink()
    (tmp_path / "checkpoint-10").mkdir()  # an empty folder from a kill right at the start of a save
    (tmp_path / "checkpoint-x").mkdir()  # not a checkpoint name: ignored
    said = []
    chosen = ck.latest_complete(tmp_path, say=said.append)
    assert chosen.step == 2
    assert len(said) == 2 and "checkpoint-10" in said[0] and "checkpoint-3" in said[1]
    assert all("will not be loaded" in s for s in said)
    assert bad.exists()  # reported, not deleted


def test_set_aside_renames_and_never_deletes(tmp_path):
    folder = make_checkpoint(tmp_path, 4)
    (folder / "optimizer.pt").write_bytes(b"x")
    said = []
    moved = ck.set_aside(ck.list_checkpoints(tmp_path)[0], say=said.append)
    assert moved.is_dir() and (moved / "optimizer.pt").read_bytes() == b"x" and not folder.exists()
    assert "checkpoint-4" in said[0] and ck.list_checkpoints(tmp_path) == []


def test_rotation_keeps_the_last_k_complete_and_says_so(tmp_path):
    for step in (1, 2, 3, 4):
        make_checkpoint(tmp_path, step)
    broken = tmp_path / "checkpoint-0"
    broken.mkdir()
    said = []
    removed = ck.rotate(tmp_path, keep=2, say=said.append)
    assert [p.name for p in removed] == ["checkpoint-1", "checkpoint-2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-0", "checkpoint-3", "checkpoint-4"]
    assert "removed checkpoint-1, checkpoint-2" in said[0] and "keeping the last 2" in said[0]
    with pytest.raises(ValueError, match="keep at least 1"):
        ck.rotate(tmp_path, keep=0)


def test_trim_metrics_moves_later_steps_aside(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "reward": s}) + "\n" for s in (1, 2, 3)) + '{"step": 4, "rew')
    said = []
    assert ck.trim_metrics(path, 2, say=said.append) == 2
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2]
    assert len((tmp_path / "metrics.redone.jsonl").read_text().splitlines()) == 2 and "2 metrics line" in said[0]
    assert ck.trim_metrics(tmp_path / "none.jsonl", 1) == 0


def test_checkpoint_root_local_drive_and_refusal(tmp_path, monkeypatch):
    assert ck.checkpoint_root(False, tmp_path / "run") == tmp_path / "run" / "trainer"
    with pytest.raises(ValueError, match="needs Google Colab"):
        ck.checkpoint_root(True, tmp_path / "run", environ={})
    mounted = []
    monkeypatch.setattr(ck, "DRIVE_MOUNT", tmp_path / "drive")
    monkeypatch.setattr(ck, "DRIVE_FOLDER", tmp_path / "drive" / "MyDrive" / "grpo-kit")

    def fake_mount(where):
        mounted.append(where)
        (Path(where) / "MyDrive").mkdir(parents=True)

    root = ck.checkpoint_root(True, tmp_path / "run", environ={"COLAB_RELEASE_TAG": "x"}, mount=fake_mount)
    assert mounted == [str(tmp_path / "drive")] and root == tmp_path / "drive" / "MyDrive" / "grpo-kit" / "run" / "checkpoints"
    ck.checkpoint_root(True, tmp_path / "run", environ={"COLAB_RELEASE_TAG": "x"}, mount=fake_mount)
    assert len(mounted) == 1  # already mounted: not asked again


# ------------------------------------------------------------------------------------------ run planning

CONFIG = {"name": "cpu", "learning_rate": 0.0005, "max_steps": 3}


def _unfinished(tmp_path, steps=(1, 2)):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(CONFIG))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))
    for s in steps:
        make_checkpoint(run / "trainer", s)
    return run


def test_unfinished_run_is_resumed_from_latest_complete(tmp_path, capsys):
    run = _unfinished(tmp_path)
    plan = plan_run_folder(run, "cpu", overwrite=False, config=dict(CONFIG, max_steps=5))  # more steps: allowed
    assert plan.resume_from.step == 2 and plan.continuing
    # vLLM's engine failed to start mid-run: resuming in eager mode trains the same recipe (troubleshooting.md)
    assert plan_run_folder(run, "cpu", overwrite=False, config=dict(CONFIG, vllm_enforce_eager=True)).continuing
    out = capsys.readouterr().out
    assert "resuming from step 2" in out
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_unfinished_run_without_checkpoint_restarts_from_zero(tmp_path, capsys):
    run = _unfinished(tmp_path, steps=())
    plan = plan_run_folder(run, "cpu", overwrite=False, config=CONFIG)
    assert plan.resume_from is None and plan.continuing
    assert "from step 0" in capsys.readouterr().out and (run / "metrics.jsonl").read_text() == ""


def test_resume_refusals(tmp_path):
    run = _unfinished(tmp_path)
    with pytest.raises(RunDirError, match="--no-resume"):
        plan_run_folder(run, "cpu", overwrite=False, resume=False, config=CONFIG)
    with pytest.raises(RunDirError, match="learning_rate"):
        plan_run_folder(run, "cpu", overwrite=False, config=dict(CONFIG, learning_rate=1e-3))
    with pytest.raises(RunDirError, match="no run to resume"):
        plan_run_folder(tmp_path / "empty", "cpu", overwrite=False, resume=True, config=CONFIG)
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "metrics.jsonl").write_text("mine")
    with pytest.raises(RunDirError, match="no config.json"):
        plan_run_folder(stranger, "cpu", overwrite=False, config=CONFIG)
    assert (stranger / "metrics.jsonl").read_text() == "mine"
    (run / "summary.json").write_text('{"steps": 3}')  # finished at its max_steps (3)
    with pytest.raises(RunDirError, match="finished run"):
        plan_run_folder(run, "cpu", overwrite=False, config=CONFIG)
    assert len(ck.list_checkpoints(run / "trainer")) == 2  # nothing touched


def _finished(tmp_path, steps: int, checkpoint: bool = True):
    run = _unfinished(tmp_path, steps=(steps,) if checkpoint else ())
    (run / "summary.json").write_text(json.dumps({"steps": steps, "after": {"accuracy": 0.5}}))
    (run / "eval.json").write_text("{}")
    return run


def test_a_finished_run_continues_when_asked_for_more_steps(tmp_path, capsys):
    run = _finished(tmp_path, steps=2)
    plan = plan_run_folder(run, "cpu", overwrite=False, config=dict(CONFIG, max_steps=4))
    assert plan.continuing and plan.resume_from.step == 2
    assert not (run / "summary.json").exists()  # finish() writes the extended run's
    assert json.loads((run / "summary-step-2.json").read_text())["steps"] == 2 and (run / "eval-step-2.json").exists()
    out = capsys.readouterr().out
    assert "took 2 steps and max_steps is now 4" in out and "resuming from step 2" in out


def test_a_finished_run_is_refused_when_it_cannot_or_should_not_continue(tmp_path):
    run = _finished(tmp_path, steps=2)
    for config, why in [(dict(CONFIG, max_steps=2), "raise --max-steps above 2"),  # the same command again
                        (dict(CONFIG, max_steps=1), "raise --max-steps above 2"),
                        (dict(CONFIG, max_steps=4, learning_rate=1e-3), "learning_rate")]:  # another recipe
        with pytest.raises(RunDirError, match=why):
            plan_run_folder(run, "cpu", overwrite=False, config=config)
    with pytest.raises(RunDirError, match="finished run of 2 steps"):
        plan_run_folder(run, "cpu", overwrite=False, resume=False, config=dict(CONFIG, max_steps=4))
    assert (run / "summary.json").exists()  # nothing moved by a refusal
    (tmp_path / "b").mkdir()
    no_checkpoint = _finished(tmp_path / "b", steps=2, checkpoint=False)
    with pytest.raises(RunDirError, match="without a checkpoint of that step"):
        plan_run_folder(no_checkpoint, "cpu", overwrite=False, config=dict(CONFIG, max_steps=4))


def test_overwrite_says_what_it_replaces(tmp_path, capsys):
    run = _unfinished(tmp_path)
    plan = plan_run_folder(run, "cpu", overwrite=True, config=CONFIG)
    assert plan.resume_from is None and not plan.continuing
    out = capsys.readouterr().out
    assert "--overwrite: replacing" in out and "2 checkpoint(s)" in out
    assert ck.list_checkpoints(run / "trainer") == [] and not (run / "metrics.jsonl").exists()


def test_save_steps_reach_the_grpo_config():
    from helpers.runtime import Runtime
    from helpers.config import get_preset, grpo_config_kwargs

    kw = grpo_config_kwargs(get_preset("cpu"), Runtime(on_colab=False), save_steps=5)
    assert kw["save_strategy"] == "steps" and kw["save_steps"] == 5 and kw["save_only_model"] is False
    assert grpo_config_kwargs(get_preset("cpu"), Runtime(on_colab=False))["save_strategy"] == "no"
    # about five checkpoints per run, at most 25 steps apart
    assert pipeline.default_save_steps(get_preset("cpu", max_steps=30)) == 6
    assert pipeline.default_save_steps(get_preset("cpu", max_steps=40)) == 8
    assert pipeline.default_save_steps(get_preset("t4")) == 25  # 250 steps: capped
    # num_iterations > 1: checkpoints fall where a sampled batch has been used up (TRL does not save the batch)
    assert pipeline.default_save_steps(get_preset("cpu", max_steps=35, num_iterations=2)) == 6
    assert pipeline.default_save_steps(get_preset("cpu", max_steps=5, num_iterations=3)) == 3
    assert pipeline.default_save_steps(get_preset("t4", num_iterations=2)) == 24
    args = train.parse_args(["--save-steps", "3", "--keep", "4", "--no-resume"])
    assert args.save_steps == 3 and args.keep == 4 and args.resume is False
    assert train.parse_args([]).resume is None


def test_a_run_started_before_a_kit_update_resumes(tmp_path):
    """config.json from a kit whose Preset had `extra` (an untyped dict) and no launch fields: the same recipe."""
    from dataclasses import asdict

    from helpers.config import get_preset

    now = json.loads(json.dumps(asdict(get_preset("cpu")), default=list))
    before_update = {k: v for k, v in now.items()
                     if k not in ("accelerate_config", "num_processes", "train_gpus", "vllm_server_gpus")}
    run = _unfinished(tmp_path, steps=())
    (run / "config.json").write_text(json.dumps({**before_update, "extra": {}}))
    assert plan_run_folder(run, "cpu", overwrite=False, config=now).continuing
    (run / "config.json").write_text(json.dumps({**before_update, "extra": {"note": "mine"}}))
    with pytest.raises(RunDirError, match="extra"):  # a setting that is gone but held something: refused
        plan_run_folder(run, "cpu", overwrite=False, config=now)
    (run / "config.json").write_text(json.dumps(before_update))
    with pytest.raises(RunDirError, match="num_processes"):  # a new field set away from its default
        plan_run_folder(run, "cpu", overwrite=False, config={**now, "num_processes": 2})
