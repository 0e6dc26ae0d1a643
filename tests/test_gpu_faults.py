"""The GPU-path faults of issue 11, each exercised on CPU with fake Unsloth / vLLM / torch objects.

The fakes copy what the pinned sources do (unsloth 2026.10.9, unsloth_zoo 2026.10.9; tests/test_gpu_contracts.py
checks those facts against the pinned wheels): Unsloth sets model.vllm_engine only when it started vLLM and sets
fast_generate either way; load_lora(path, load_tensors=True) sends the live adapter's tensors; save_pretrained_gguf
writes the GGUF files into the sibling folder `<path>_gguf`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from helpers import model as hm
from helpers import runtime as rt
from helpers import sharing
from helpers.config import get_preset

ROOT = Path(__file__).resolve().parents[1]
T4 = get_preset("t4")
PROMPTS = ["What is 2 + 3?", "What is 7 - 4?"]


# ------------------------------------------------------------------------------------------------ fakes


class FakeTokenizer:
    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        return str(messages)

    def save_pretrained(self, path):
        Path(path, "tokenizer.json").write_text("{}")


class FakeRequest:
    def __init__(self, answer):
        self.answer = answer


class FakeEngine:
    """Stands for vllm.LLM: the object Unsloth stores as model.vllm_engine."""


class FakeVllmModel:
    """An Unsloth model loaded with fast_inference=True: an engine, fast_generate, load_lora, save_lora.

    vLLM answers from the weights it is given, wherever they come from: the live adapter's tensors or a saved
    folder; the base model answers "base".
    """

    def __init__(self, live_weights="trained-v2", lora_b=1.0):
        self.vllm_engine = FakeEngine()
        self.live_weights = live_weights
        self.lora_b = lora_b
        self.load_lora_calls = []

    def state_dict(self):
        return {"layers.0.q_proj.lora_A.default.weight": torch.ones(2, 2),
                "layers.0.q_proj.lora_B.default.weight": torch.full((2, 2), self.lora_b)}

    def save_lora(self, path):
        Path(path).mkdir(parents=True, exist_ok=True)
        Path(path, "adapter_model.safetensors").write_text(self.live_weights)

    def load_lora(self, path, load_tensors=False):
        self.load_lora_calls.append((path, load_tensors))
        weights = self.live_weights if load_tensors else Path(path, "adapter_model.safetensors").read_text()
        return FakeRequest(f"answer-for:{weights}")

    def fast_generate(self, texts, sampling_params=None, lora_request=None):
        answer = lora_request.answer if lora_request is not None else "base"
        return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=answer)]) for _ in texts]


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.SamplingParams = lambda **kw: kw
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


@pytest.fixture(autouse=True)
def no_engine_yet(monkeypatch):
    monkeypatch.setattr(hm, "_LOADED_ENGINE", None)
    for var in rt.ALLOC_CONF_VARS:  # detect() sets the allocator default: restore the environment afterwards
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)


def fake_unsloth(monkeypatch, make_model, disabled_reason=None):
    """A stand-in `unsloth` package whose FastLanguageModel returns make_model()."""
    loads, peft_calls = [], []

    class FastLanguageModel:
        @staticmethod
        def from_pretrained(**kwargs):
            loads.append(kwargs)
            return make_model(), FakeTokenizer()

        @staticmethod
        def get_peft_model(model, **kwargs):
            peft_calls.append(kwargs)
            return model

    module = types.ModuleType("unsloth")
    module.FastLanguageModel = FastLanguageModel
    module.peft_calls = peft_calls  # get_peft_model's keywords, one dict a call
    fixes = types.ModuleType("unsloth.import_fixes")
    fixes.VLLM_DISABLED_REASON = disabled_reason
    monkeypatch.setitem(sys.modules, "unsloth", module)
    monkeypatch.setitem(sys.modules, "unsloth.import_fixes", fixes)
    return loads


# ------------------------------------------------------------------- vLLM disabled at load -> raise the fix


class ModelWithoutEngine:
    """What Unsloth returns when it disabled vLLM: fast_generate wraps HF generate, no vllm_engine."""

    def fast_generate(self, *args, **kwargs):
        if "sampling_params" in kwargs:
            raise ValueError("Unsloth: `sampling_params` is only supported when `fast_inference=True` (vLLM).")


def test_vllm_disabled_at_load_raises_with_the_fix(monkeypatch):
    reason = "Unsloth: Detected broken vLLM binary extension; disabling vLLM imports and continuing import."
    fake_unsloth(monkeypatch, ModelWithoutEngine, disabled_reason=reason)
    with pytest.raises(hm.ModelSetupError, match=r"WITHOUT vLLM.*broken vLLM binary.*Fix: Runtime > Disconnect"):
        hm.load_unsloth(T4)


def test_engine_not_fast_generate_decides_the_vllm_branch():
    assert not hm.has_vllm_engine(ModelWithoutEngine())
    assert hm.has_vllm_engine(FakeVllmModel())


def test_without_fast_inference_no_engine_is_expected(monkeypatch):
    fake_unsloth(monkeypatch, ModelWithoutEngine)
    model, _ = hm.load_unsloth(replace(T4, fast_inference=False))
    assert isinstance(model, ModelWithoutEngine)


# ------------------------------------------------------------------------- never two vLLM engines


def test_a_second_vllm_engine_is_refused_before_loading(monkeypatch):
    loads = fake_unsloth(monkeypatch, FakeVllmModel)
    first, _ = hm.load_unsloth(T4)
    assert hm.loaded_vllm_engine() is first.vllm_engine
    with pytest.raises(hm.ModelSetupError, match=r"already running.*Restart session"):
        hm.load_unsloth(T4)
    assert len(loads) == 1, "the second from_pretrained (a second engine) must never start"


def test_an_engine_that_was_freed_allows_a_new_load(monkeypatch):
    import gc

    fake_unsloth(monkeypatch, FakeVllmModel)
    first, _ = hm.load_unsloth(T4)
    del first
    gc.collect()
    second, _ = hm.load_unsloth(T4)
    assert hm.loaded_vllm_engine() is second.vllm_engine


# ------------------------------------------- 02's and 05's own Unsloth cell: the calls helpers.model makes


def _load_branch(lesson: str):
    """A lesson's load as the build writes it (lessons/unsloth_load.py included): the `if kit.on_gpu:` statement and
    the ones after it that belong to the load (`if not kit.on_gpu:`, handing the model to the run)."""
    import ast
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_notebooks", ROOT / "scripts" / "make_notebooks.py")
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    body = ast.parse(maker.lesson_text(ROOT / "lessons" / f"{lesson}.py")).body
    (start,) = [i for i, node in enumerate(body) if isinstance(node, ast.If) and ast.unparse(node.test) == "kit.on_gpu"
                and "FastLanguageModel.from_pretrained" in ast.unparse(node)]
    end = start + 1
    while end < len(body) and ("kit.on_gpu" in ast.unparse(getattr(body[end], "test", ast.Pass()))
                               or ast.unparse(body[end]).startswith("state.model")):
        end += 1
    return compile(ast.Module(body=body[start:end], type_ignores=[]), f"<{lesson}>", "exec")


@pytest.mark.parametrize("lesson", ["02_load_model", "05_train"])
@pytest.mark.parametrize("eager", [False, True])
def test_the_lessons_unsloth_cell_loads_as_helpers_model_does(lesson, eager, monkeypatch, tmp_path):
    """02 and 05 run Unsloth's two calls written out (the T4 lab's load is the student's own code, not a kit call):
    on a faked T4 the cell passes from_pretrained and get_peft_model exactly the keywords helpers.model.load_unsloth
    passes (contract-tested against the pinned Unsloth), checks vLLM started, remembers the engine (a second load
    is refused) and, in 05, hands the model to the run (evaluate_before and the trainer use state.model)."""
    from helpers import notebook_setup
    from helpers.model import unsloth_guard
    from helpers.run import pipeline

    preset = get_preset("t4", vllm_enforce_eager=True) if eager else T4
    loads = fake_unsloth(monkeypatch, FakeVllmModel)
    kit_model, _ = hm.load_unsloth(preset)
    monkeypatch.setattr(hm, "_LOADED_ENGINE", None)  # the kit's load above stands for another process
    kit = notebook_setup.Kit(root=ROOT, runtime=rt.fake_runtime("t4"), preset=preset, run_dir=tmp_path, overrides={})
    state = types.SimpleNamespace(model=None, tokenizer=None)
    notebook = {"kit": kit, "p": preset, "state": state, "pipeline": pipeline, "unsloth_guard": unsloth_guard,
                "import_unsloth": rt.import_unsloth}
    exec(_load_branch(lesson), notebook)  # noqa: S102 - the lesson's own code

    assert loads[1] == loads[0] == hm.unsloth_load_kwargs(preset)
    assert ("enforce_eager" in loads[1]) is eager
    peft_calls = sys.modules["unsloth"].peft_calls
    assert peft_calls[1] == peft_calls[0] == hm.unsloth_peft_kwargs(preset)
    assert hm.loaded_vllm_engine() is notebook["model"].vllm_engine, "the cell remembers its vLLM engine"
    if lesson == "05_train":
        assert state.model is notebook["model"] and state.tokenizer is notebook["tokenizer"]
    with pytest.raises(hm.ModelSetupError, match="already running"):  # run the cell twice: no second engine
        exec(_load_branch(lesson), notebook)  # noqa: S102
    assert len(loads) == 2


def test_the_lessons_unsloth_cell_stops_when_vllm_did_not_start(monkeypatch, tmp_path):
    """05's cell on a T4 where Unsloth loaded without vLLM (a broken vLLM wheel): the kit's check inside the cell
    stops with the reason and the fix instead of training with slow generation."""
    from helpers import notebook_setup
    from helpers.model import unsloth_guard

    fake_unsloth(monkeypatch, ModelWithoutEngine)
    kit = notebook_setup.Kit(root=ROOT, runtime=rt.fake_runtime("t4"), preset=T4, run_dir=tmp_path, overrides={})
    notebook = {"kit": kit, "p": T4, "state": types.SimpleNamespace(), "unsloth_guard": unsloth_guard,
                "import_unsloth": rt.import_unsloth}
    with pytest.raises(hm.ModelSetupError, match="vLLM"):
        exec(_load_branch("05_train"), notebook)  # noqa: S102
    assert not hasattr(notebook["state"], "model")


# ------------------------------------------------------------- check_reload compares live vs saved


def test_check_reload_on_vllm_compares_the_live_adapter_with_the_saved_one(tmp_path, fake_vllm):
    model = FakeVllmModel(live_weights="trained-v1")
    saved = sharing.save_adapter(model, FakeTokenizer(), tmp_path / "adapter")
    assert sharing.check_reload(model, FakeTokenizer(), saved, T4, prompts=PROMPTS)["match"]
    # the point of the check: the folder on disk no longer holds what is in memory
    model.live_weights = "trained-v2"
    check = sharing.check_reload(model, FakeTokenizer(), saved, T4, prompts=PROMPTS)
    assert not check["match"]
    assert check["original"][0] == "answer-for:trained-v2" and check["reloaded"][0] == "answer-for:trained-v1"
    live = [Path(p) for p, load_tensors in model.load_lora_calls if load_tensors]
    assert live and saved not in live, "the live adapter goes through a scratch folder, never the saved one"
    assert (saved / "adapter_model.safetensors").read_text() == "trained-v1"


def test_check_reload_before_the_trained_weights_are_attached_says_so(tmp_path, fake_vllm, capsys):
    trained = FakeVllmModel(live_weights="trained")
    saved = sharing.save_adapter(trained, FakeTokenizer(), tmp_path / "adapter")
    fresh = FakeVllmModel(live_weights="fresh-lora", lora_b=0.0)  # 06 right after loading: B starts at zero
    check = sharing.check_reload(fresh, FakeTokenizer(), saved, T4, prompts=PROMPTS)
    assert not check["match"], "a fresh adapter in memory must not pass for the trained one on disk"
    assert "untrained LoRA adapter" in check["note"] and "Attach the trained weights first" in capsys.readouterr().out
    assert sharing.check_reload(trained, FakeTokenizer(), saved, T4, prompts=PROMPTS)["note"] is None


# ------------------------------------------------------------------------ GGUF: Unsloth's real folder


class FakeGgufModel:
    """unsloth save_pretrained_gguf: the 16-bit merge into `path`, the GGUF files into `<path>_gguf`."""

    def save_pretrained_gguf(self, save_directory, tokenizer, quantization_method="fast_quantized"):
        os.makedirs(save_directory, exist_ok=True)
        Path(save_directory, "model.safetensors").write_text("merged")
        gguf_dir = f"{save_directory}_gguf"
        os.makedirs(gguf_dir, exist_ok=True)
        Path(gguf_dir, f"model.{quantization_method.upper()}.gguf").write_text("gguf")
        return {"save_directory": save_directory, "gguf_directory": gguf_dir}


def test_export_gguf_returns_the_folder_holding_the_gguf_file(tmp_path):
    out = sharing.export_gguf(FakeGgufModel(), FakeTokenizer(), tmp_path / "gguf")
    assert out == tmp_path / "gguf_gguf" == sharing.gguf_folder(tmp_path / "gguf")
    assert [p.name for p in out.glob("*.gguf")] == ["model.Q4_K_M.gguf"]


def test_export_gguf_never_overwrites_an_earlier_gguf_folder(tmp_path):
    earlier = tmp_path / "gguf_gguf"
    earlier.mkdir()
    (earlier / "mine.gguf").write_text("a user's earlier export")
    with pytest.raises(sharing.SharingError, match="gguf_gguf already exists"):
        sharing.export_gguf(FakeGgufModel(), FakeTokenizer(), tmp_path / "gguf")
    assert (earlier / "mine.gguf").read_text() == "a user's earlier export" and not (tmp_path / "gguf").exists()
    out = sharing.export_gguf(FakeGgufModel(), FakeTokenizer(), tmp_path / "gguf", overwrite=True)
    assert not (out / "mine.gguf").exists() and (out / "model.Q4_K_M.gguf").is_file()


# ------------------------------------------------------------ GiB, and allocator settings before CUDA


def fake_torch(monkeypatch, free_bytes, total_bytes):
    seen = {}

    def mem_get_info(device=0):
        seen["alloc_conf_at_cuda_start"] = os.environ.get("PYTORCH_ALLOC_CONF")
        return free_bytes, total_bytes

    cuda = types.SimpleNamespace(
        is_available=lambda: True, is_initialized=lambda: False, mem_get_info=mem_get_info,
        get_device_properties=lambda i: types.SimpleNamespace(name="Tesla T4", major=7, minor=5))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    return seen


def test_detect_reports_gib_like_the_memory_model(monkeypatch):
    free, total = 6_143_000_000, 15_634_000_000  # bytes, as torch.cuda.mem_get_info returns them
    fake_torch(monkeypatch, free, total)
    r = rt.detect()
    assert r.free_gpu_gb == pytest.approx(free / 2**30) and r.total_gpu_gb == pytest.approx(total / 2**30)
    assert "5.72 of 14.56 GiB free" in r.describe()


def test_allocator_settings_are_in_place_before_cuda_starts(monkeypatch):
    for var in rt.ALLOC_CONF_VARS + ("UNSLOTH_VLLM_STANDBY",):
        monkeypatch.delenv(var, raising=False)
    seen = fake_torch(monkeypatch, 1, 2)
    rt.detect()
    assert seen["alloc_conf_at_cuda_start"] == "expandable_segments:True"


def test_allocator_respects_the_user_and_standby(monkeypatch):
    env = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}
    rt.configure_cuda_allocator(env)
    assert "PYTORCH_ALLOC_CONF" not in env, "a user's own allocator config is kept as it is"
    env = {"UNSLOTH_VLLM_STANDBY": "1"}
    assert not rt.configure_cuda_allocator(env) and "PYTORCH_ALLOC_CONF" not in env  # standby refuses them


# ------------------------------------------------------- Unsloth imported before transformers and TRL


FAKE_UNSLOTH = '''
import json, os, sys
json.dump({"transformers": "transformers" in sys.modules, "trl": "trl" in sys.modules,
           "alloc_conf": os.environ.get("PYTORCH_ALLOC_CONF")}, open(os.environ["FAKE_UNSLOTH_RECORD"], "w"))
'''


def _train_with_fake_unsloth(tmp_path, argv, gpu: bool):
    """`python -m helpers.train ARGV` as students run it, a stand-in unsloth recording what was imported before it;
    gpu=True: on a machine that detect() reports as a T4 (this one has no GPU)."""
    (tmp_path / "fake" / "unsloth").mkdir(parents=True, exist_ok=True)
    (tmp_path / "fake" / "unsloth" / "__init__.py").write_text(FAKE_UNSLOTH)
    record = tmp_path / "record.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(ROOT)]),
           "FAKE_UNSLOTH_RECORD": str(record)}
    for var in rt.ALLOC_CONF_VARS:
        env.pop(var, None)
    fake_gpu = "import helpers.runtime as rt; rt.detect = lambda: rt.fake_runtime('t4'); " if gpu else ""
    code = f"import sys; {fake_gpu}from helpers import train; sys.exit(train.main({argv!r}))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return proc, (json.loads(record.read_text()) if record.is_file() else None)


def test_python_m_helpers_train_imports_unsloth_before_transformers(tmp_path):
    """The GPU entry point: every value is checked first (no library imported), then Unsloth comes before
    transformers and TRL, with the allocator set before CUDA starts."""
    argv = ["--preset", "t4", "--run-dir", str(tmp_path / "run")]
    proc, seen = _train_with_fake_unsloth(tmp_path, argv, gpu=True)
    assert seen == {"transformers": False, "trl": False, "alloc_conf": "expandable_segments:True"}, proc.stderr[-2000:]
    proc, seen = _train_with_fake_unsloth(tmp_path / "cpu", argv, gpu=False)
    assert proc.returncode == 2 and "needs an NVIDIA GPU" in proc.stderr  # this machine has none: said clearly,
    assert seen is None  # before Unsloth (or anything heavy) is imported


def test_memory_monitor_module_does_not_import_transformers():
    code = "import sys, helpers.memory.monitor; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------ the shared-prefix pre-fill is a CPU speed-up, nowhere else


class PrefillSpyModel:
    """A model on `device` whose generate records its inputs; a pre-fill (a forward call) raises."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.config = None
        self.generated = []

    def __call__(self, **kwargs):
        raise AssertionError("pre-filled the shared prefix")

    def generate(self, **kwargs):
        self.generated.append(kwargs)
        return kwargs["input_ids"]


def _shared_prefix_batch():
    prefix = list(range(10, 10 + 2 * hm.MIN_SHARED_PREFIX))  # long enough to be worth pre-filling on CPU
    ids = torch.tensor([[0] + prefix + [5, 6], prefix + [7, 8, 9]])  # row 0 left-padded with id 0
    return ids, (ids != 0).long()


@pytest.mark.parametrize("device", ["cuda", "meta"])
def test_a_model_off_the_cpu_goes_through_plain_generate(device):
    """Unsloth's generate drops a pre-filled cache and may not honour a padding gap mid-row: on a GPU (a model
    without a vLLM engine) the inputs reach generate untouched, with no cache."""
    model, (ids, mask) = PrefillSpyModel(device), _shared_prefix_batch()
    assert hm.generate_shared_prefix(model, ids, mask, max_new_tokens=4) is ids
    (call,) = model.generated
    assert call["input_ids"] is ids and call["attention_mask"] is mask and "past_key_values" not in call
    with pytest.raises(AssertionError, match="pre-filled"):  # the same batch on the CPU is pre-filled
        hm.generate_shared_prefix(PrefillSpyModel("cpu"), ids, mask, max_new_tokens=4)


# ----------------------------------------- vLLM installed but disabled by Unsloth is not "vLLM is not installed"

BROKEN = "Unsloth: Detected broken vLLM binary extension; disabling vLLM imports and continuing import."


def unsloth_disabled_vllm(monkeypatch, reason=BROKEN):
    """What importing Unsloth leaves when it disabled vLLM: its reason recorded, vllm hidden from find_spec."""
    fixes = types.ModuleType("unsloth.import_fixes")
    fixes.VLLM_DISABLED_REASON = reason
    monkeypatch.setitem(sys.modules, "unsloth.import_fixes", fixes)
    real_find_spec = rt.importlib.util.find_spec
    monkeypatch.setattr(rt.importlib.util, "find_spec",
                        lambda name, package=None: None if name == "vllm" else real_find_spec(name, package))


def test_vllm_disabled_by_unsloth_gives_unsloths_reason_and_the_fix(monkeypatch):
    unsloth_disabled_vllm(monkeypatch)
    seen = rt.detect()
    assert not seen.has_vllm and seen.vllm_unavailable == BROKEN
    gpu = replace(rt.fake_runtime("t4"), has_vllm=False, vllm_unavailable=seen.vllm_unavailable)
    with pytest.raises(rt.RuntimeProblem) as err:
        rt.check(gpu, want_gpu=True)
    message = str(err.value)
    assert "installed but disabled" in message and BROKEN in message and "Disconnect and delete runtime" in message
    assert "not installed" not in message
    assert "vllm=disabled" in gpu.describe()


def test_vllm_installed_but_hidden_without_a_reason_says_so(monkeypatch):
    unsloth_disabled_vllm(monkeypatch, reason=None)
    monkeypatch.setattr(rt.importlib.metadata, "version", lambda name: "0.19.1" if name == "vllm" else "1")
    assert rt.detect().vllm_unavailable == "vLLM 0.19.1 is installed but cannot be imported in this process."


def test_vllm_really_missing_still_says_not_installed(monkeypatch):
    monkeypatch.delitem(sys.modules, "unsloth.import_fixes", raising=False)
    def missing(name):
        raise rt.importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(rt.importlib.metadata, "version", missing)
    assert rt.detect().vllm_unavailable is None
    with pytest.raises(rt.RuntimeProblem, match="vLLM is not installed"):
        rt.check(rt.fake_runtime("t4", has_vllm=False), want_gpu=True)


def test_the_guard_says_so_when_importing_unsloth_just_disabled_vllm(monkeypatch):
    """The first setup cell checks the runtime before Unsloth is imported; importing it may disable vLLM."""
    from helpers.run import guard

    unsloth_disabled_vllm(monkeypatch)
    monkeypatch.setattr(rt, "start_gpu_process", lambda backend: None)  # Unsloth "imported"
    with pytest.raises(rt.RuntimeProblem, match=r"installed but disabled.*broken vLLM binary.*Fix: Runtime"):
        guard.check_before_loading(T4, rt.fake_runtime("t4"))
    guard.check_before_loading(replace(T4, fast_inference=False), rt.fake_runtime("t4"))  # no vLLM needed


def test_load_unsloth_stops_before_loading_when_vllm_was_disabled(monkeypatch):
    loads = fake_unsloth(monkeypatch, FakeVllmModel, disabled_reason=BROKEN + "\n")
    with pytest.raises(hm.ModelSetupError, match=r"WITHOUT vLLM.*broken vLLM binary.*Fix: Runtime > Disconnect"):
        hm.load_unsloth(T4)
    assert loads == [], "Unsloth's loader would raise its own error without the kit's fix"


# --------------------------------------------- the trainer samples with the model's own vLLM engine and adapter


class PatchedVLLMGeneration:
    """TRL's VLLMGeneration as Unsloth's patch leaves it: llm = model.vllm_engine, the model's load_lora kept, and
    generate wrapped (and marked) to send the adapter with every request."""

    def __init__(self, llm, load_lora):
        self.llm = llm
        self._unsloth_load_lora = load_lora

    def generate(self, *args, **kwargs):
        return []


setattr(PatchedVLLMGeneration.generate, hm.UNSLOTH_LORA_GENERATE_MARK, True)


class UnpatchedVLLMGeneration:
    """TRL's own VLLMGeneration: Unsloth's patch did not apply."""

    def __init__(self, llm):
        self.llm = llm

    def generate(self, *args, **kwargs):
        return []


def trainer_with(generation=None):
    return types.SimpleNamespace(vllm_generation=generation) if generation is not None else types.SimpleNamespace()


def test_a_trainer_on_the_models_engine_passes():
    model = FakeVllmModel()
    hm.check_trainer_uses_model_engine(trainer_with(PatchedVLLMGeneration(model.vllm_engine, model.load_lora)), model)


def test_a_trainer_with_its_own_engine_is_refused_with_the_fix():
    model = FakeVllmModel()
    with pytest.raises(hm.ModelSetupError, match=r"vLLM engine of its own.*Fix: restart the runtime"):
        hm.check_trainer_uses_model_engine(trainer_with(UnpatchedVLLMGeneration(FakeEngine())), model)


def test_a_trainer_without_an_engine_on_a_fast_inference_model_is_refused():
    model = FakeVllmModel()
    with pytest.raises(hm.ModelSetupError, match=r"has no vLLM engine.*use_vllm.*Fix: restart the runtime"):
        hm.check_trainer_uses_model_engine(trainer_with(), model)


def test_the_models_engine_without_unsloths_lora_wrapper_is_refused():
    """Half-patched: the engine is shared, but nothing sends the adapter: rollouts from the base model."""
    model = FakeVllmModel()
    with pytest.raises(hm.ModelSetupError, match=r"base model.*Fix: restart the runtime"):
        hm.check_trainer_uses_model_engine(trainer_with(UnpatchedVLLMGeneration(model.vllm_engine)), model)
    unpatched_loader = PatchedVLLMGeneration(model.vllm_engine, None)
    with pytest.raises(hm.ModelSetupError, match=r"base model"):
        hm.check_trainer_uses_model_engine(trainer_with(unpatched_loader), model)


def test_older_trl_keeps_the_engine_on_trainer_llm():
    model = FakeVllmModel()
    hm.check_trainer_uses_model_engine(types.SimpleNamespace(llm=model.vllm_engine), model)
    with pytest.raises(hm.ModelSetupError, match="of its own"):
        hm.check_trainer_uses_model_engine(types.SimpleNamespace(llm=FakeEngine()), model)


def test_a_model_without_an_engine_has_nothing_to_check():
    """The CPU path (a peft model) and fast_inference=False: whatever the trainer holds, no error."""
    hm.check_trainer_uses_model_engine(trainer_with(), ModelWithoutEngine())
    hm.check_trainer_uses_model_engine(trainer_with(UnpatchedVLLMGeneration(FakeEngine())), ModelWithoutEngine())


def test_the_pipeline_checks_the_trainer_it_builds(monkeypatch):
    import trl

    from helpers.run import pipeline

    model = FakeVllmModel()
    monkeypatch.setattr(pipeline, "grpo_config", lambda state: "config")
    monkeypatch.setattr(pipeline, "kit_callbacks", lambda state: [])
    state = types.SimpleNamespace(model=model, tokenizer=FakeTokenizer(), reward_funcs=[len])
    for generation, ok in ((PatchedVLLMGeneration(model.vllm_engine, model.load_lora), True),
                           (UnpatchedVLLMGeneration(FakeEngine()), False)):
        monkeypatch.setattr(trl, "GRPOTrainer", lambda _g=generation, **kwargs: trainer_with(_g))
        if ok:
            assert pipeline.build_trainer(state, []).vllm_generation is generation
        else:
            with pytest.raises(hm.ModelSetupError, match="of its own"):
                pipeline.build_trainer(state, [])


# -------------------------------------- 06 with TRAIN_IF_MISSING on a GPU: one vLLM engine, evaluated in place


def _lesson_cell(lesson: str, marker: str) -> str:
    """The code cell of lessons/<lesson>.py (jupytext percent format) that contains `marker`."""
    cells = (ROOT / "lessons" / f"{lesson}.py").read_text().split("\n# %%")
    (cell,) = [c for c in cells if marker in c and not c.lstrip().startswith("[markdown]")]
    return cell.split("\n", 1)[1]


def test_06_train_if_missing_on_a_gpu_evaluates_with_the_tiny_runs_engine(tmp_path, monkeypatch, fake_vllm):
    """Before: the tiny run loaded the model (vLLM engine 1) and 06 then loaded it again for evaluation, which
    helpers.model refuses ("a vLLM engine is already running"): a dead end. Now 06 evaluates with the tiny run's
    model. The two cells of 06 run here as a notebook runs them, on a faked T4 with a faked Unsloth."""
    from helpers import evaluation, notebook_setup
    from helpers.run import pipeline

    loads = fake_unsloth(monkeypatch, FakeVllmModel)
    preset = replace(T4, dataset="synthetic", eval_size=2)  # offline questions
    kit = notebook_setup.Kit(root=ROOT, runtime=rt.fake_runtime("t4"), preset=preset, run_dir=tmp_path, overrides={})

    def tiny_run(preset, options, reward_funcs=None):  # what pipeline.run leaves: the model it loaded and trained
        model, tokenizer = hm.load(preset, kit.runtime)
        sharing.save_adapter(model, tokenizer, options.run_dir / "adapter")
        (options.run_dir / "adapter" / "adapter_config.json").write_text("{}")
        return types.SimpleNamespace(model=model, tokenizer=tokenizer, summary={})

    monkeypatch.setattr(pipeline, "run", tiny_run)
    notebook = {"kit": kit, "setup": notebook_setup, "STAGED_ADAPTER": None, "TRAIN_IF_MISSING": True}
    for marker in ("course.adapter_for_this_runtime(", "evaluation.load_for_eval("):
        exec(compile(_lesson_cell("06_evaluate_and_save", marker), "<06>", "exec"), notebook)  # noqa: S102

    assert len(loads) == 1, "one vLLM engine: 06 evaluated with the tiny run's model"
    assert notebook["work_dir"] == tmp_path.parent / f"{tmp_path.name}-t4", "the tiny run has a folder of its own"
    assert notebook["model"].vllm_engine is hm.loaded_vllm_engine()
    result = notebook["result"]
    assert {s["completion"] for s in result["before"]["samples"]} == {"base"}  # no adapter: the base model
    assert {s["completion"] for s in result["after"]["samples"]} == {"answer-for:trained-v2"}  # the saved adapter
    with pytest.raises(hm.ModelSetupError, match="already running"):  # the dead end the lesson no longer takes
        evaluation.load_for_eval(kit.preset, notebook["adapter"], kit.runtime)


def test_06_gguf_cell_exports_the_evaluated_adapter_on_a_cpu_and_on_a_t4(tmp_path, monkeypatch):
    """06's GGUF cell, run as the notebook runs it, with the exports recorded instead of written: on a CPU the F16
    merge of the adapter 06 evaluated (export_gguf_cpu, whose file tests/test_sharing.py reads back), on a T4
    Unsloth's export (export_gguf); with EXPORT_GGUF = False nothing. (06's notebook test leaves EXPORT_GGUF off:
    one 270 MB GGUF written per suite run, not two.)"""
    calls, listed = [], []
    monkeypatch.setattr(sharing, "export_gguf_cpu", lambda *a, **kw: calls.append(("cpu", a, kw)) or tmp_path / "g")
    monkeypatch.setattr(sharing, "export_gguf", lambda *a, **kw: calls.append(("gpu", a, kw)) or tmp_path / "g")
    course = types.SimpleNamespace(list_folder=lambda folder, note: listed.append(folder))
    cell = compile(_lesson_cell("06_evaluate_and_save", "sharing.export_gguf_cpu("), "<06>", "exec")
    model, tokenizer, adapter, exports = object(), object(), tmp_path / "adapter", tmp_path / "exports"
    for on_gpu, export in ((False, True), (True, True), (False, False)):
        kit = types.SimpleNamespace(on_gpu=on_gpu, preset=T4 if on_gpu else get_preset("cpu"))
        exec(cell, {"EXPORT_GGUF": export, "OVERWRITE_EXPORTS": False, "kit": kit, "model": model,  # noqa: S102
                    "tokenizer": tokenizer, "adapter": adapter, "exports": exports, "sharing": sharing,
                    "course": course})
    assert calls == [("cpu", (model, exports / "gguf", get_preset("cpu")), {"adapter_path": adapter, "overwrite": False}),
                     ("gpu", (model, tokenizer, exports / "gguf"), {"overwrite": False})]
    assert listed == [tmp_path / "g", tmp_path / "g"]  # the folder is shown after each export, not without one
