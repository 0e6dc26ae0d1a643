import pytest

from helpers import runtime as rt


def test_colab_detected_from_any_colab_variable():
    assert rt.on_colab({"COLAB_RELEASE_TAG": "x"})
    assert rt.on_colab({"COLAB_GPU": "1", "HOME": "/root"})
    assert not rt.on_colab({"HOME": "/root", "NOT_COLAB_X": "1"})


def test_detect_on_this_machine_reports_no_gpu_and_cpu_backend():
    r = rt.detect()
    assert not r.has_gpu and r.backend == "cpu" and r.precision == "fp32"
    assert "no GPU" in r.describe()


def test_t4_gets_fp16_and_ampere_gets_bf16():
    t4 = rt.fake_runtime("t4")
    assert t4.compute_capability == (7, 5) and not t4.bf16_supported and t4.precision == "fp16"
    assert t4.total_gpu_gb == pytest.approx(14.56)
    assert rt.fake_runtime("a100").precision == "bf16"
    assert t4.backend == "unsloth"


def test_no_gpu_on_colab_names_the_menu_path():
    for want_gpu in (True, None):  # None: the caller did not choose the CPU path
        with pytest.raises(rt.RuntimeProblem, match=r"Runtime > Change runtime type > T4 GPU.*PRESET = \"cpu\""):
            rt.check(rt.fake_runtime("cpu", on_colab=True), want_gpu=want_gpu)


def test_colab_cpu_runtime_runs_the_cpu_path():
    """A lesson on the embedded model runs on a Colab CPU runtime (docs/colab.md): no GPU asked for, no refusal."""
    assert rt.check(rt.fake_runtime("cpu", on_colab=True), want_gpu=False) == []


def test_gpu_preset_on_cpu_machine_says_what_to_do():
    with pytest.raises(rt.RuntimeProblem, match="--preset cpu"):
        rt.check(rt.fake_runtime("cpu"), want_gpu=True)
    assert rt.check(rt.fake_runtime("cpu")) == []


def test_bf16_on_t4_is_refused_with_the_fix():
    with pytest.raises(rt.RuntimeProblem, match="fp16"):
        rt.check(rt.fake_runtime("t4"), want_gpu=True, precision="bf16")
    rt.check(rt.fake_runtime("a100"), want_gpu=True, precision="bf16")  # fine on Ampere


@pytest.mark.parametrize("missing,word", [("has_unsloth", "Unsloth"), ("has_vllm", "vLLM")])
def test_missing_unsloth_or_vllm_says_to_run_setup(missing, word):
    with pytest.raises(rt.RuntimeProblem, match=word + r".*(setup cell|requirements)"):
        rt.check(rt.fake_runtime("t4", **{missing: False}), want_gpu=True)


def test_too_little_free_memory_is_said_before_loading():
    with pytest.raises(rt.RuntimeProblem, match=r"Only 2\.00 GiB .* about 7\.00 GiB"):
        rt.check(rt.fake_runtime("t4", free_gpu_gb=2.0), want_gpu=True, need_free_gb=7.0)
    rt.check(rt.fake_runtime("t4", free_gpu_gb=14.0), want_gpu=True, need_free_gb=7.0)


def test_unknown_fake_runtime_kind():
    with pytest.raises(ValueError, match="unknown runtime kind"):
        rt.fake_runtime("tpu")


@pytest.mark.parametrize("on_colab", [False, True])
@pytest.mark.parametrize("preset_name", ["t4", "a100x2-qwen7b-lora"])
def test_the_no_gpu_refusal_is_one_text_wherever_it_stops(preset_name, on_colab):
    """The preset's validation (the CLI, the pipeline, the setup cell) and the model loader refuse a GPU preset on a
    machine without a GPU with the same exception and the same words; only the preset and Colab change them."""
    from helpers import model as hm
    from helpers.config import get_preset, validate

    preset = get_preset(preset_name)
    runtime = rt.fake_runtime("cpu", on_colab=on_colab)
    expected = str(rt.no_gpu(preset, on_colab=on_colab))
    for refuse in (lambda: validate(preset, runtime, num_processes=preset.num_processes), lambda: hm.load(preset, runtime)):
        with pytest.raises(rt.RuntimeProblem) as err:
            refuse()
        assert str(err.value) == expected and f"preset {preset_name!r} needs" in expected
    assert expected.startswith("No GPU is attached to this Colab session" if on_colab else "No GPU is visible")
    fix = expected.split("Fix: ", 1)[1]
    if preset.backend == "trl-vllm":
        assert "multi-GPU machine with accelerate launch" in fix
    elif on_colab:
        assert fix.startswith("Runtime > Change runtime type > T4 GPU") and 'PRESET = "cpu"' in fix
    else:
        assert "Runtime > Change runtime type > T4 GPU" in fix and "--preset cpu" in fix


def test_check_without_a_preset_gives_the_same_refusal():
    """rt.check (the guard, 01's show_guards) has no preset to name: the lesson on Colab, the GPU path elsewhere."""
    for on_colab, who in ((True, "this lesson"), (False, "the GPU path")):
        with pytest.raises(rt.RuntimeProblem) as err:
            rt.check(rt.fake_runtime("cpu", on_colab=on_colab), want_gpu=True)
        assert str(err.value) == str(rt.no_gpu(on_colab=on_colab)) and f", and {who} needs an NVIDIA GPU" in str(err.value)


def test_in_notebook_is_true_only_in_a_jupyter_kernel(monkeypatch):
    """One home, below everything that asks (the dashboard, evaluation's side-by-side table)."""
    import sys
    import types

    from helpers import evaluation
    from helpers.run import dashboard

    assert dashboard.in_notebook is rt.in_notebook and not hasattr(evaluation, "in_notebook")
    assert not rt.in_notebook()  # pytest: no kernel

    class ZMQInteractiveShell:  # the kernel's shell class, by name
        pass

    class TerminalInteractiveShell:
        pass

    for shell, expected in ((ZMQInteractiveShell(), True), (TerminalInteractiveShell(), False), (None, False)):
        monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda shell=shell: shell))
        assert rt.in_notebook() is expected
