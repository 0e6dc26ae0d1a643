"""helpers.run.guard: the one check before any model loads, which the setup cell and the pipeline's first step
both call."""

import pytest

from helpers import notebook_setup
from helpers.config import PresetError, get_preset
from helpers.run import guard, pipeline
from helpers.runtime import RuntimeProblem, fake_runtime


def test_need_free_gb_falls_back_only_for_a_model_without_a_prediction(monkeypatch):
    """The guard's free-memory figure: the predicted peak; the 7 GB budget only when the memory table lacks the
    model; any other error (a bug in the prediction) is raised, not hidden behind the budget."""
    from helpers import memory

    t4, card = get_preset("t4"), fake_runtime("t4")
    assert guard.need_free_gb(t4, card) == pytest.approx(memory.estimate(t4, gpu=card.total_gpu_gb,
                                                                                   budget_gb=None).peak_gb)
    unknown = t4.with_overrides(model_name="someone/unknown-model")
    assert guard.need_free_gb(unknown, card) == memory.T4_BUDGET_GB

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug in the memory model")

    monkeypatch.setattr(guard, "estimate", broken)
    with pytest.raises(ZeroDivisionError):
        guard.need_free_gb(t4, card)


@pytest.mark.parametrize("preset,runtime,error", [
    (get_preset("t4"), fake_runtime("cpu"), PresetError),                     # a GPU preset on a CPU machine
    (get_preset("t4"), fake_runtime("t4", free_gpu_gb=1.0), RuntimeProblem),  # too little free GPU memory
    (get_preset("t4"), fake_runtime("t4", has_vllm=False), RuntimeProblem),   # the GPU stack is missing
])
def test_the_guard_refuses_with_the_fix_before_anything_loads(preset, runtime, error):
    with pytest.raises(error, match="Fix:"):
        guard.check_before_loading(preset, runtime)


def test_the_setup_cell_and_the_pipeline_call_the_same_guard(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(guard, "check_before_loading",
                        lambda preset, runtime=None, num_processes=1: calls.append(preset.name) or [])
    notebook_setup.prepare("cpu", run_dir=tmp_path / "nb", quiet=True)
    pipeline.start(get_preset("cpu"), pipeline.RunOptions(run_dir=tmp_path / "cli"), runtime=fake_runtime("cpu"))
    assert calls == ["cpu", "cpu"]
