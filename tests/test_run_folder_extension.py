"""Extending a finished run (a larger max_steps): what happens to the learning rate, said at extension and checked
against what transformers' Trainer really does when it reloads the checkpoint's scheduler under the new max_steps."""

import json
import types

import pytest
import torch
from transformers import Trainer

from helpers.config import build_grpo_config, get_preset
from helpers.run import folder as fo
from helpers.run.folder import plan_run_folder
from helpers.runtime import fake_runtime
from tests.test_checkpoints import make_checkpoint

COSINE = dict(lr_scheduler_type="cosine", warmup_steps=10, learning_rate=5e-6)  # the t4 preset's schedule


def _config(preset) -> dict:
    return json.loads(json.dumps(preset.to_dict(), default=list))  # as config.json holds it


def _trainer_lrs(preset, first: int, extended: int, tmp_path) -> tuple[list[float], list[float]]:
    """The learning rates Trainer logs (get_last_lr after each step) for a run of `first` steps, then for the same
    run extended to `extended`: its scheduler built by Trainer.create_scheduler from the kit's GRPOConfig, and on
    resume a new one for the new max_steps with the checkpoint's state loaded, as _load_optimizer_and_scheduler
    does."""
    def scheduler(max_steps):
        args = build_grpo_config(preset.with_overrides(max_steps=max_steps), fake_runtime("cpu"),
                                 output_dir=str(tmp_path))
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
        stand_in = types.SimpleNamespace(args=args, lr_scheduler=None, optimizer=optimizer)
        return Trainer.create_scheduler(stand_in, max_steps, optimizer), optimizer

    def steps(schedule, optimizer, n):
        out = []
        for _ in range(n):
            optimizer.step()
            schedule.step()
            out.append(schedule.get_last_lr()[0])
        return out

    schedule, optimizer = scheduler(first)
    before = steps(schedule, optimizer, first)
    resumed, optimizer = scheduler(extended)
    resumed.load_state_dict(schedule.state_dict())  # the checkpoint's scheduler.pt
    return before, steps(resumed, optimizer, extended - first)


def test_an_extended_cosine_run_gets_the_new_totals_learning_rates_from_the_next_step(tmp_path):
    preset = get_preset("cpu", **COSINE)
    config = _config(preset)
    before, after = _trainer_lrs(preset, 60, 250, tmp_path)
    assert before[-1] == 0.0 == fo.learning_rate_at(config, 60, 60)  # the 60-step plan ends at 0
    assert after[0] == pytest.approx(4.4633e-6, rel=1e-3)  # the step 61
    for step in (61, 62, 125, 249, 250):
        assert after[step - 61] == pytest.approx(fo.learning_rate_at(config, step, 250), abs=1e-15), step
    assert after[-1] == 0.0
    assert before[9] == pytest.approx(5e-6)  # the warm-up's end; none comes again after step 60
    assert max(after) == after[0]


def test_the_extension_says_what_happens_to_the_learning_rate(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    config = _config(get_preset("cpu", max_steps=60, **COSINE))
    (run / "config.json").write_text(json.dumps(config))
    (run / "summary.json").write_text(json.dumps({"steps": 60, "status": "finished"}))
    make_checkpoint(run / "trainer", 60)
    assert plan_run_folder(run, "cpu", overwrite=False, config=dict(config, max_steps=250)).continuing
    out = capsys.readouterr().out
    assert "took 60 steps and max_steps is now 250: continuing it" in out
    assert ("learning rate: the cosine schedule is re-planned for 250 steps, not restarted: steps 61-250 get the "
            "learning rate a 250-step run has there (4.46e-06 at step 61, 0 at step 250), without a new warm-up"
            in out)
    assert "had reached 0 at step 60, so the rate jumps back up" in out


def test_a_constant_schedule_is_said_to_go_on_unchanged():
    config = _config(get_preset("cpu"))
    assert fo.schedule_on_extension(config, 40, 100) == (
        "learning rate: the constant schedule does not depend on max_steps, so steps 41-100 go on at 0.00025, "
        "as before")
    assert fo.schedule_on_extension(config, 3, 4).startswith("learning rate: the constant schedule does not depend on "
                                                              "max_steps, so step 4 goes on at 0.00025")
