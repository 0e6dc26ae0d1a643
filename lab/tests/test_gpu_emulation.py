"""lab/gpu_emulation.py: a big card told to behave like a T4. Its effect needs a GPU; what is checked here on
CPU, with stand-ins for the modules it patches: the arithmetic, what each patch gives, and that everything is put
back. tests/test_gpu_contracts.py checks that the patched names exist in the pinned Unsloth and vLLM."""

from __future__ import annotations

import pytest

from helpers.runtime import GIB
from lab import gpu_emulation as ge

H100_GIB = 79.179


def test_t4_emulation_caps_pytorch_and_scales_vllm_to_the_same_gib():
    card = 79.19
    fraction = ge.memory_fraction(14.56, card)
    assert fraction * card == pytest.approx(14.56)
    scaled = ge.scaled_utilization(0.3, 14.56, card)
    assert scaled * card == pytest.approx(0.3 * 14.56)
    assert ge.scaled_utilization(None, 14.56, card) is None
    assert not ge.EMULATED["t4"].bf16
    with pytest.raises(SystemExit, match="bigger card"):
        ge.memory_fraction(14.56, 12.0)





def test_emulated_mem_info_answers_as_the_smaller_card_less_what_is_used():
    gib = GIB
    mem_info = ge.emulated_mem_info(ge.EMULATED["t4"], lambda: (int(70 * gib), int(H100_GIB * gib)))
    free, total = mem_info()
    assert total == int(14.56 * gib)
    assert free / gib == pytest.approx(14.56 - (H100_GIB - 70), abs=1e-6)
    full = ge.emulated_mem_info(ge.EMULATED["t4"], lambda: (int(10 * gib), int(H100_GIB * gib)))
    assert full()[0] == 0, "more used than the emulated card has: nothing free, not a negative number"


class _FakeLLM:
    def __init__(self, model=None, **kwargs):
        self.kwargs = dict(model=model, **kwargs)


def test_a_lessons_own_unsloth_load_gets_fp16_on_an_emulated_t4_and_the_loader_is_put_back(monkeypatch):
    """Lesson 05 calls FastLanguageModel.from_pretrained itself (lessons/unsloth_load.py): on a bf16 card emulating a
    T4 it must load in fp16 as a T4 would (TRL's fp16 config beside a bf16 model is refused by Unsloth); a dtype the
    caller gives is kept; outside the emulation, Unsloth's own staticmethod again."""
    import sys
    import types

    import torch

    class FastLanguageModel:
        @staticmethod
        def from_pretrained(model_name=None, **kwargs):
            return dict(model_name=model_name, **kwargs)

    unsloth = types.ModuleType("unsloth")
    unsloth.FastLanguageModel = FastLanguageModel
    monkeypatch.setitem(sys.modules, "unsloth", unsloth)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (int(70 * GIB), int(H100_GIB * GIB)))
    original = FastLanguageModel.__dict__["from_pretrained"]
    with ge.emulated_card(ge.EMULATED["t4"], H100_GIB, {}):
        assert FastLanguageModel.from_pretrained(model_name="m", load_in_4bit=True)["dtype"] is torch.float16
        assert FastLanguageModel.from_pretrained(model_name="m", dtype=torch.bfloat16)["dtype"] is torch.bfloat16
    assert FastLanguageModel.__dict__["from_pretrained"] is original
    assert "dtype" not in FastLanguageModel.from_pretrained(model_name="m")


def test_the_engine_gets_the_t4_backend_and_the_same_gib_of_this_card():
    passed = {}
    init = ge.with_emulated_engine(_FakeLLM.__init__, ge.EMULATED["t4"], H100_GIB, passed)
    engine = _FakeLLM.__new__(_FakeLLM)
    init(engine, model="m", gpu_memory_utilization=0.3, attention_backend="FLASH_ATTN")
    assert engine.kwargs["attention_backend"] == "TRITON_ATTN", "Unsloth's FLASH_ATTN pin is what a T4 cannot run"
    assert engine.kwargs["gpu_memory_utilization"] * H100_GIB == pytest.approx(0.3 * 14.56)
    assert passed == {"gpu_memory_utilization_from_unsloth": 0.3, "attention_backend_passed": "TRITON_ATTN",
                      "gpu_memory_utilization_passed": engine.kwargs["gpu_memory_utilization"]}


def test_unsloth_loads_in_fp16_under_t4_emulation():
    from helpers.config import get_preset
    from helpers.model import unsloth_load_kwargs

    preset = get_preset("t4")
    kwargs = ge.with_load_dtype(unsloth_load_kwargs, "float16")(preset)
    assert kwargs == {**unsloth_load_kwargs(preset), "dtype": "float16"}


def test_emulated_card_patches_unsloth_and_vllm_only_while_loading(monkeypatch):
    """With stand-ins for unsloth_zoo.vllm_utils and vllm (neither installs on CPU): inside, Unsloth's memory reader,
    vLLM's engine and the kit's load arguments are the emulated ones; outside, the originals."""
    import sys
    import types

    import torch

    from helpers import model as kit_model

    zoo, utils, vllm = types.ModuleType("unsloth_zoo"), types.ModuleType("unsloth_zoo.vllm_utils"), \
        types.ModuleType("vllm")
    utils.get_mem_info = original_mem_info = lambda: (1, 2)
    zoo.vllm_utils, vllm.LLM = utils, _FakeLLM
    original_init, original_kwargs = _FakeLLM.__init__, kit_model.unsloth_load_kwargs
    for name, module in (("unsloth_zoo", zoo), ("unsloth_zoo.vllm_utils", utils), ("vllm", vllm)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (int(70 * GIB), int(H100_GIB * GIB)))
    passed = {}
    with ge.emulated_card(ge.EMULATED["t4"], H100_GIB, passed):
        assert utils.get_mem_info()[1] == int(14.56 * GIB)
        assert kit_model.unsloth_load_kwargs(__import__("helpers.config").config.get_preset("t4"))["dtype"] \
            is torch.float16
        engine = _FakeLLM(model="m", gpu_memory_utilization=0.3)
        assert engine.kwargs["attention_backend"] == "TRITON_ATTN"
    assert utils.get_mem_info is original_mem_info and _FakeLLM.__init__ is original_init
    assert kit_model.unsloth_load_kwargs is original_kwargs
    assert passed["gpu_memory_utilization_from_unsloth"] == 0.3
    with ge.emulated_card(None, H100_GIB, passed):
        assert "attention_backend" not in _FakeLLM(model="m").kwargs


def test_the_kit_steps_are_told_they_run_on_the_emulated_card(monkeypatch):
    from helpers import runtime as rt

    h100 = rt.fake_runtime("h100")
    monkeypatch.setattr(rt, "detect", lambda: rt.fake_runtime("h100", free_gpu_gb=h100.total_gpu_gb - 1.0))
    runtime = ge.emulated_runtime(ge.EMULATED["t4"])
    assert runtime.gpu_name.endswith("as Tesla T4") and runtime.compute_capability == (7, 5)
    assert runtime.total_gpu_gb == 14.56 and runtime.free_gpu_gb == pytest.approx(13.56)
    assert runtime.precision == "fp16", "the GRPOConfig a T4 gets"
    assert ge.emulated_runtime(None) == rt.detect()


def test_the_emulation_makes_vllm_follow_the_colab_pins_rules_unless_the_user_chose():
    """vLLM 0.25.1 counts CUDA graphs inside gpu_memory_utilization and runs Qwen2 on Model Runner V2; the Colab pin
    (0.19.1) does neither. The emulation sets both back where the user has not, and says who set each."""
    environ = {"VLLM_USE_V2_MODEL_RUNNER": "1", "PATH": "/bin"}
    rules = ge.mirror_colab_vllm(environ)
    assert rules == {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": {"value": "0", "set_by": "emulation"},
                     "VLLM_USE_V2_MODEL_RUNNER": {"value": "1", "set_by": "user"}}
    assert environ["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"] == "0" and environ["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    environ["UNSLOTH_VLLM_STANDBY"] = "1"
    assert ge.vllm_environment(environ) == {"UNSLOTH_VLLM_STANDBY": "1", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0",
                                            "VLLM_USE_V2_MODEL_RUNNER": "1"}


def test_a_random_model_folder_is_reused_only_when_it_holds_the_same_model(tmp_path):
    import json

    from helpers.memory import MODELS

    a = MODELS["qwen2.5-1.5b"]
    (tmp_path / "config.json").write_text(json.dumps(
        {"hidden_size": a.hidden_size, "num_hidden_layers": a.num_layers, "vocab_size": a.vocab_size}))
    assert ge.random_model_folder("qwen2.5-1.5b", tmp_path, None) == tmp_path, "reused, nothing written"
    other = next(k for k, m in MODELS.items() if m.hidden_size != a.hidden_size)
    with pytest.raises(SystemExit, match="holds another model.*Fix"):
        ge.random_model_folder(other, tmp_path, None)
    default = ge.default_random_model_dir("qwen2.5-1.5b")
    assert default.name == "qwen2.5-1.5b" and default.parent.name == "grpo-kit-random-model"
