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
