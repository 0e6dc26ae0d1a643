"""helpers.run.extensions: a course run is one process with nothing plugged in; what an extension plugs in (the lab's
step timer, its several processes) reaches the pipeline's steps, and a launcher's processes without one are refused."""

import pytest

from helpers.config import PresetError, get_preset
from helpers.run import extensions, pipeline
from tests.test_cpu_compat import tiny_grpo_trainer


class Recorder:
    """An extension using every hook, recording what the steps hand it."""

    def __init__(self):
        self.seen = []

    def callbacks(self, state):
        self.seen.append("callbacks")
        return ["a callback"]

    def prepare_trainer(self, state, trainer):
        # the kit's CPU patches are already on the instance (the lab's timer must wrap them, not be replaced by them)
        self.seen.append(("prepare_trainer", "_generate_single_turn" in vars(trainer)))

    def summary(self, state, rows):
        return {"recorded": len(rows)}


def _start(tmp_path):
    return pipeline.start(get_preset("cpu"), pipeline.RunOptions(run_dir=tmp_path / "run", dashboard="off"))


def test_a_course_run_is_one_process_with_nothing_plugged_in(tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    state = _start(tmp_path)
    assert isinstance(state.dist, extensions.OneProcess) and state.dist.is_main and not state.dist.distributed
    assert state.dist.share(lambda: 7) == 7
    assert state.dist.model_to_evaluate(state.preset, "model", "adapter") == "model"
    assert pipeline._extension_summary(state, [{"step": 1}]) == {}
    assert "a callback" not in pipeline.kit_callbacks(state)


def test_a_launchers_processes_without_the_lab_are_refused_with_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(PresetError, match=r"WORLD_SIZE=2.*Fix: accelerate launch --num_processes 2 -m lab\.scale_out"):
        _start(tmp_path)
    assert not (tmp_path / "run").exists()  # refused before the run folder was planned


def test_what_an_extension_plugs_in_reaches_the_steps(tmp_path):
    recorder = extensions.use(Recorder())
    assert extensions.use(Recorder()) is not recorder and len(extensions.hooks("summary")) == 1  # replaced, not added
    recorder = extensions.hooks("summary")[0].__self__
    state = _start(tmp_path)
    callbacks = pipeline.kit_callbacks(state)
    assert "a callback" in callbacks and type(callbacks[-1]).__name__ == "TrainingHealth"  # the health check stays last
    assert pipeline._extension_summary(state, [{"step": 1}, {"step": 2}]) == {"recorded": 2}
    trainer = tiny_grpo_trainer(tmp_path / "trainer", ["Say a number."] * 2, lambda completions, **kw: [0.0] * 4)
    with pipeline.training(state, trainer):
        pass
    assert ("prepare_trainer", True) in recorder.seen
    extensions.clear()
    assert extensions.hooks("summary") == [] and isinstance(extensions.processes(), extensions.OneProcess)


def test_the_command_line_refuses_a_launchers_processes_before_trl(tmp_path, monkeypatch, capsys):
    """`accelerate launch -m helpers.train` (not the lab's wrapper): refused by main() with the command to use, exit 2,
    before the rewards are tried, the folder claimed or TRL's trainer imported."""
    import sys

    from helpers import train

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delitem(sys.modules, "trl.trainer.grpo_trainer", raising=False)
    assert train.main(["--preset", "cpu", "--run-dir", str(tmp_path / "run"), "--max-steps", "1"]) == 2
    assert "-m lab.scale_out" in capsys.readouterr().err and not (tmp_path / "run").exists()
    assert "trl.trainer.grpo_trainer" not in sys.modules
