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
    (get_preset("t4"), fake_runtime("cpu"), RuntimeProblem),                  # a GPU preset on a CPU machine
    (get_preset("t4"), fake_runtime("t4", free_gpu_gb=1.0), RuntimeProblem),  # too little free GPU memory
    (get_preset("t4"), fake_runtime("t4", has_vllm=False), RuntimeProblem),   # the GPU stack is missing
])
def test_the_guard_refuses_with_the_fix_before_anything_loads(preset, runtime, error):
    with pytest.raises(error, match="Fix:"):
        guard.check_before_loading(preset, runtime)


def test_the_setup_cell_and_the_pipeline_call_the_same_guard(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(guard, "check_before_loading",
                        lambda preset, runtime=None, num_processes=1, options=None: calls.append(preset.name) or [])
    notebook_setup.prepare("cpu", run_dir=tmp_path / "nb", quiet=True)
    pipeline.start(get_preset("cpu"), pipeline.RunOptions(run_dir=tmp_path / "cli"), runtime=fake_runtime("cpu"))
    assert calls == ["cpu", "cpu"]


@pytest.mark.parametrize("options,match", [
    (pipeline.RunOptions(keep=0), r"^--keep 0: .*Fix: use --keep 1 or more, or --save-steps 0"),
    (pipeline.RunOptions(save_steps=-1), r"^--save-steps -1: cannot be negative\. Fix:"),
    (pipeline.RunOptions(pass_k_samples=-1), r"^--pass-k-samples -1: cannot be negative\. Fix:"),
    (pipeline.RunOptions(dashboard="fancy"), r"^--dashboard 'fancy': is not a dashboard mode\. Fix: use one of auto"),
    (pipeline.RunOptions(drive=True), r"^--drive: Google Drive is mounted only on Colab.*Fix: leave --drive off"),
    (pipeline.RunOptions(keep="two"), r"^keep='two': is the text 'two', not a whole number\. Fix:"),
])
def test_run_options_are_refused_by_the_guard_before_anything_loads(options, match):
    """`--keep 0` failed at the first checkpoint; `--drive` off Colab raised a traceback after the model loaded."""
    with pytest.raises(PresetError, match=match):
        guard.check_before_loading(get_preset("cpu"), fake_runtime("cpu"), options=options)


def test_run_options_that_can_work_pass_the_guard(tmp_path):
    guard.validate_options(pipeline.RunOptions(keep=0, save_steps=0, run_dir=str(tmp_path)), fake_runtime("cpu"))
    guard.validate_options(pipeline.RunOptions(drive=True), fake_runtime("cpu", on_colab=True))


def test_a_notebook_parameter_of_the_wrong_type_is_refused_by_the_setup_cell(tmp_path):
    """papermill `-p EVAL_SIZE ten` hands prepare the string 'ten': refused with the parameter and the fix before
    any model loads (it failed inside the evaluation before)."""
    with pytest.raises(PresetError, match=r"eval_size='ten'.*Fix: .*EVAL_SIZE = 50; with papermill: -p EVAL_SIZE 50"):
        notebook_setup.prepare("cpu", run_dir=tmp_path, quiet=True, eval_size="ten")
    kit = notebook_setup.prepare("cpu", run_dir=tmp_path, quiet=True, eval_size="7", max_steps=2)
    assert kit.preset.eval_size == 7 and kit.preset.max_steps == 2
