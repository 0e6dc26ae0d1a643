"""Share a trained model: the LoRA adapter, a merged 16-bit model, a GGUF file, and the Hugging Face Hub.

    save_adapter(model, tokenizer, "runs/demo/share/adapter")          # megabytes; needs the base model to use
    check_reload(model, tokenizer, "runs/demo/share/adapter", preset)    # reload it: same greedy answers?
    export_merged(model, tokenizer, "runs/demo/share/merged", preset)    # one standalone 16-bit model folder
    export_gguf(model, tokenizer, "runs/demo/share/gguf")                # GPU only: files in runs/demo/share/gguf_gguf
    push_folder("runs/demo/share/merged", "your-name/grpo-math")         # token from Colab secrets or HF_TOKEN

Never overwrites an existing export folder unless overwrite=True. The Hugging Face token is read from Colab's
secrets (google.colab.userdata.get("HF_TOKEN")) or the HF_TOKEN environment variable, passed straight to the
upload call, and never printed, logged or written anywhere; error messages from the upload are scrubbed of it.
"""

from __future__ import annotations

import copy
import os
import shutil
from dataclasses import replace
from pathlib import Path

from helpers import data
from helpers.model import LIVE_ADAPTER, generate, has_vllm_engine, load_cpu

TOKEN_NAME = "HF_TOKEN"
MISSING_TOKEN = (
    "No Hugging Face token found. Create one at https://huggingface.co/settings/tokens (type 'Write'), then:\n"
    "  - on Colab: click the key icon in the left sidebar > Secrets > Add new secret, name it HF_TOKEN, paste the "
    "token as its value, and switch on 'Notebook access';\n"
    "  - elsewhere: export HF_TOKEN=... in the shell that starts Jupyter or python.\n"
    "Never paste the token into a notebook cell: notebooks get shared, and the token goes with them."
)


class SharingError(RuntimeError):
    """An export or upload that cannot be done as asked; the message says what to do instead."""


class MissingTokenError(SharingError):
    pass


def fresh_folder(path, overwrite: bool) -> Path:
    """A folder to write into: created if missing; one holding files is refused (SharingError, with the fix)
    unless overwrite=True, which says what it replaces. Nothing a user made is removed silently."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        if not overwrite:
            raise SharingError(f"{path} already exists and is not empty; nothing was written. Choose another folder, "
                               "or pass overwrite=True to replace it.")
        print(f"[grpo-kit] overwrite=True: replacing {path}")
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _is_unsloth(model) -> bool:
    return hasattr(model, "save_pretrained_merged") or has_vllm_engine(model)


# ----------------------------------------------------------------------------------------- adapter


def save_adapter(model, tokenizer, path, overwrite: bool = False) -> Path:
    """The LoRA adapter and the tokenizer (megabytes). Loading it needs the same base model."""
    path = fresh_folder(path, overwrite)
    if hasattr(model, "save_lora"):  # Unsloth with fast_inference: the form vLLM's load_lora reads
        model.save_lora(str(path))
    else:
        model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


def attach_trained_adapter(model, adapter_path) -> None:
    """GPU path: copy the trained LoRA weights saved in adapter_path into the in-memory peft model, so a merged or
    GGUF export through Unsloth contains the training (helpers.evaluation.load_for_eval loads the base model with a
    fresh adapter; vLLM gets the trained one per request). Not needed on the CPU path (load_cpu loads the adapter
    itself). Not yet run on a GPU."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = Path(adapter_path) / "adapter_model.safetensors"
    result = set_peft_model_state_dict(model, load_file(str(weights)))
    unexpected = getattr(result, "unexpected_keys", None) or []
    if unexpected:
        raise RuntimeError(f"the adapter in {adapter_path} does not match the loaded model ({len(unexpected)} "
                           f"unexpected keys, e.g. {unexpected[0]}): was it trained with another preset?")
    print(f"[grpo-kit] loaded the trained adapter weights from {weights} into the model for export")


def adapter_is_untrained(model) -> bool:
    """True when every LoRA B matrix is zero: a fresh adapter (peft starts B at zero), not trained weights."""
    found = False
    for name, tensor in model.state_dict().items():
        if ".lora_B." in name:
            found = True
            if bool(tensor.detach().abs().sum() != 0):
                return False
    return found


def check_reload(model, tokenizer, adapter_path, settings, prompts=None, max_new_tokens: int = 16) -> dict:
    """Reload the saved adapter and compare its greedy answers with those of the adapter in memory.

    Returns {"match": bool, "prompts": [...], "original": [...], "reloaded": [...], "note": str | None}.
    CPU: a second embedded model + the adapter through peft. GPU (vLLM): the in-memory adapter's tensors
    (LIVE_ADAPTER) against the saved folder, each as its own vLLM LoRA request.
    When the adapter in memory is untrained (every LoRA B zero, as right after loading the base model) the note
    says so: a mismatch then means the trained weights were never attached, not that saving failed.
    """
    note = None
    if adapter_is_untrained(model):
        note = ("the model in memory holds an untrained LoRA adapter (every lora_B is zero): this compares the base "
                "model with the saved adapter. Attach the trained weights first (attach_trained_adapter) to "
                "check the reload of a trained model.")
        print(f"[grpo-kit] note: {note}")
    s = replace(settings, eval_max_new_tokens=max_new_tokens)
    if prompts is None:
        prompts = [r["prompt"] for r in data.synthetic_problems(3, "heldout", seed=settings.seed)]
    if has_vllm_engine(model):
        original = generate(model, tokenizer, prompts, s, greedy=True, lora_path=LIVE_ADAPTER)
        reloaded = generate(model, tokenizer, prompts, s, greedy=True, lora_path=adapter_path)
    else:
        original = generate(model, tokenizer, prompts, s, greedy=True)
        fresh, fresh_tok = load_cpu(settings, adapter_path=adapter_path)
        reloaded = generate(fresh, fresh_tok, prompts, s, greedy=True)
    return {"match": original == reloaded, "prompts": prompts, "original": original, "reloaded": reloaded,
            "note": note}


# ----------------------------------------------------------------------------------------- merged


def merged_16bit_kwargs() -> dict:
    """Keyword arguments for Unsloth's model.save_pretrained_merged (contract-tested against the pin)."""
    return dict(save_method="merged_16bit")


def export_merged(model, tokenizer, path, settings=None, adapter_path=None, overwrite: bool = False,
                  dtype: str = "float16") -> Path:
    """One standalone model folder with the adapter merged into 16-bit weights (no peft needed to load it).

    GPU (Unsloth): model.save_pretrained_merged(path, tokenizer, save_method="merged_16bit").
    CPU (peft): the adapter is merged with merge_and_unload() into a COPY of the model (from adapter_path when
    given, else a deep copy), so the model in memory keeps its adapter; saved as `dtype` safetensors.
    """
    import torch

    path = fresh_folder(path, overwrite)
    if _is_unsloth(model):
        model.save_pretrained_merged(str(path), tokenizer, **merged_16bit_kwargs())
        return path
    if adapter_path is not None:
        work, _ = load_cpu(settings, adapter_path=adapter_path)
    else:
        work = copy.deepcopy(model)
    merged = work.merge_and_unload().to(getattr(torch, dtype))
    merged.save_pretrained(str(path), safe_serialization=True)
    tokenizer.save_pretrained(str(path))
    return path


def load_merged(path, dtype: str = "float16"):
    """(model, tokenizer) from an exported merged folder, with plain transformers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    return AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)), tokenizer


# ----------------------------------------------------------------------------------------- GGUF


def gguf_kwargs(quantization_method: str = "q4_k_m") -> dict:
    """Keyword arguments for Unsloth's model.save_pretrained_gguf (contract-tested against the pin)."""
    return dict(quantization_method=quantization_method)


def gguf_folder(path) -> Path:
    """Where Unsloth's save_pretrained_gguf(path) writes the .gguf files: the SIBLING folder `<path>_gguf`
    (unsloth/save.py _gguf_output_directory); `path` itself receives the 16-bit merge it converts from."""
    path = Path(path)
    return path.with_name(path.name + "_gguf")


def export_gguf(model, tokenizer, path, quantization_method: str = "q4_k_m", overwrite: bool = False) -> Path:
    """GGUF file(s) (llama.cpp, Ollama, LM Studio) through Unsloth. GPU only. Returns the folder holding them.

    Unsloth writes the merged 16-bit model into `path` and the GGUF files into `<path>_gguf`; both are checked
    before anything is written, so neither an earlier export nor a user's folder is replaced silently.
    """
    if not hasattr(model, "save_pretrained_gguf"):
        raise SharingError(
            "GGUF export goes through Unsloth's save_pretrained_gguf, which this kit uses on the GPU path only "
            "(the CPU path has a plain transformers + peft model). On the CPU: export_merged(...) and convert that "
            "folder with llama.cpp's convert_hf_to_gguf.py; on Colab: run this on a T4 runtime."
        )
    out = gguf_folder(path)
    for folder in (Path(path), out):  # check both before touching either
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())) and not overwrite:
            raise SharingError(f"{folder} already exists and is not empty; nothing was written (Unsloth writes the "
                               f"merge into {Path(path)} and the GGUF files into {out}). Choose another folder, or "
                               "pass overwrite=True to replace them.")
    path = fresh_folder(path, overwrite)
    fresh_folder(out, overwrite)
    result = model.save_pretrained_gguf(str(path), tokenizer, **gguf_kwargs(quantization_method))
    if isinstance(result, dict) and result.get("gguf_directory"):
        out = Path(result["gguf_directory"])
    return out


# ----------------------------------------------------------------------------------------- the Hub


def hf_token(environ=None, userdata=None) -> str:
    """The token from Colab secrets, else $HF_TOKEN; MissingTokenError (with how to add it) otherwise.

    The value is returned to the caller only; it is never printed. `userdata` replaces google.colab.userdata
    (tests).
    """
    environ = os.environ if environ is None else environ
    if userdata is None and any(k.startswith("COLAB_") for k in environ):
        try:
            from google.colab import userdata  # Colab only: imported where used
        except ImportError:
            userdata = None
    if userdata is not None:
        try:
            token = userdata.get(TOKEN_NAME)
        except Exception:  # noqa: BLE001 - SecretNotFoundError / NotebookAccessError: fall through to the env var
            token = None
        if token:
            return token
    token = environ.get(TOKEN_NAME)
    if token:
        return token
    raise MissingTokenError(MISSING_TOKEN)


def redact(text: str, token: str) -> str:
    return text.replace(token, "<HF_TOKEN hidden>") if token else text


def push_folder(folder, repo_id: str, private: bool = True, token: str | None = None, api=None,
                commit_message: str = "Upload from the GRPO course kit") -> str:
    """Upload an exported folder (adapter, merged model or GGUF) to the Hub; returns the repo URL.

    The token comes from hf_token() unless given; `api` replaces huggingface_hub.HfApi() (tests). An error from
    the upload is re-raised with the token scrubbed from its message, and without the original traceback
    (which could hold it in a local variable's repr).
    """
    folder = Path(folder)
    if not folder.is_dir() or not any(folder.iterdir()):
        raise SharingError(f"{folder} is missing or empty: export something into it first")
    if "/" not in repo_id:
        raise SharingError(f"repo_id={repo_id!r}: use 'your-username/model-name'")
    token = token or hf_token()
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    try:
        api.create_repo(repo_id, token=token, private=private, exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo_id, token=token, commit_message=commit_message)
    except Exception as err:  # noqa: BLE001 - re-raised below without the token
        message = redact(f"{type(err).__name__}: {err}", token)
        raise SharingError(f"upload to {repo_id} failed: {message}") from None
    url = f"https://huggingface.co/{repo_id}"
    print(f"[grpo-kit] uploaded {folder} to {url}")
    return url
