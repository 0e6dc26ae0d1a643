"""Share a trained model: the LoRA adapter, a merged 16-bit model, a GGUF file, and the Hugging Face Hub; and find
the trained adapter a lesson after 05 uses (locate_adapter: 05's run, a staged folder or Hub repo, Drive).

    folder = export_dir("runs/demo")                                 # runs/demo/exports: never Drive unless asked
    save_adapter(model, tokenizer, folder / "adapter")               # megabytes; needs the base model to use
    check_reload(model, tokenizer, folder / "adapter", preset)       # reload it: same greedy answers?
    export_merged(model, tokenizer, folder / "merged", preset)       # one standalone 16-bit model folder
    export_gguf(model, tokenizer, folder / "gguf", preset)           # GPU: <folder>/gguf_gguf; CPU: F16 in <folder>/gguf
    push_folder(folder / "merged", "your-name/grpo-math")            # token from Colab secrets or HF_TOKEN

Never overwrites an existing export folder unless overwrite=True. Exports go to this machine's disk, never to
Google Drive unless asked (export_dir(..., to_drive=True)): a run folder on Drive gets its exports in
/content/exports/<run name> (a merged 1.5B model is about 3 GB; Drive's free quota is 15 GB). The Hugging Face
token is read from Colab's secrets (google.colab.userdata.get("HF_TOKEN")), else huggingface_hub.get_token() (the
HF_TOKEN environment variable, or the token `hf auth login` saved under HF_HOME), passed straight to the upload call, and never printed, logged or written anywhere; error messages from the upload
are scrubbed of it.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import zipfile
from dataclasses import replace
from pathlib import Path

from helpers import data
from helpers import colab
from helpers.colab import download, upload, without_drive
from helpers.messages import say
from helpers.model import LIVE_ADAPTER, generate, has_vllm_engine, load_cpu
from helpers.run.folder import RunLock
from helpers.runtime import COLAB_CONTENT, DRIVE_KIT_FOLDER, mount_drive, on_colab

TOKEN_NAME = "HF_TOKEN"
MISSING_TOKEN = (
    "No Hugging Face token found. Create one at https://huggingface.co/settings/tokens (type 'Write'), then:\n"
    "  - on Colab: click the key icon in the left sidebar > Secrets > Add new secret, name it HF_TOKEN, paste the "
    "token as its value, and switch on 'Notebook access';\n"
    "  - elsewhere: run `hf auth login` once (it saves the token under ~/.cache/huggingface), or export "
    "HF_TOKEN=... in the shell that starts Jupyter or python.\n"
    "Never paste the token into a notebook cell: notebooks get shared, and the token goes with them."
)


class SharingError(RuntimeError):
    """An export or upload that cannot be done as asked; the message says what to do instead."""


class MissingTokenError(SharingError):
    pass


def on_drive(path) -> bool:
    """Whether path lies on Google Drive as Colab mounts it (helpers.colab.on_drive, under this module's /content)."""
    return colab.on_drive(path, COLAB_CONTENT)


def fresh_folder(path, overwrite: bool) -> Path:
    """A folder to write into: created if missing; one holding files is refused (SharingError, with the fix)
    unless overwrite=True, which says what it replaces. Nothing a user made is removed silently."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        if not overwrite:
            raise SharingError(f"{path} already exists and is not empty; nothing was written. Choose another folder, "
                               "or pass overwrite=True to replace it.")
        say(f"overwrite=True: replacing {path}")
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


# ----------------------------------------------------------------------------------------- where exports go

EXPORTS = "exports"


def export_dir(run_dir, to_drive: bool = False, environ=None, mount=None) -> Path:
    """The folder a run's exports (saved adapter, merged model, GGUF, the evaluation report) are written to.

    to_drive=False (the default): this machine's disk, never Google Drive - `<run_dir>/exports` for a local run
    folder; for a run folder on Drive (USE_DRIVE on Colab), `/content/exports/<run name>` on the runtime's own disk.
    to_drive=True (Colab only, asked for explicitly): on Drive - `<run_dir>/exports` for a run folder already there,
    else `MyDrive/grpo-kit/exports/<run name>` (Drive is mounted first if needed; `mount` replaces
    google.colab.drive.mount in tests). Off Colab: SharingError with the fix. Nothing is created here; the export
    calls refuse to replace a folder holding files (fresh_folder).

    Exports inside the run folder are its writers too: the first call claims the run folder's lock
    (helpers.run.folder.RunLock) for this process's life (a notebook's kernel), so a run training into it is
    refused here with its holder named, and a training started later is refused until the kernel stops.
    """
    run_dir = Path(run_dir)
    if not to_drive and not on_drive(run_dir) and run_dir.is_dir():
        _claim(run_dir)
    if not to_drive:
        return COLAB_CONTENT / EXPORTS / run_dir.name if on_drive(run_dir) else run_dir / EXPORTS
    if on_drive(run_dir):
        return run_dir / EXPORTS
    if not on_colab(environ):
        raise SharingError(f"EXPORT_TO_DRIVE = True needs Google Colab (Drive is mounted through google.colab). "
                           f"Elsewhere exports are already on your own disk, in {run_dir / EXPORTS}: set "
                           "EXPORT_TO_DRIVE = False.")
    return mount_drive(COLAB_CONTENT, mount) / DRIVE_KIT_FOLDER / EXPORTS / run_dir.name


_CLAIMS: dict[str, RunLock] = {}  # the run folders this process writes exports into, held until it exits


def _claim(run_dir: Path) -> None:
    """This process's claim on the run folder (once per folder): RunDirError naming the holder when in use."""
    key = str(run_dir.resolve())
    if key not in _CLAIMS:
        _CLAIMS[key] = RunLock(run_dir)


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
    say(f"loaded the trained adapter weights from {weights} into the model for export")


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
        say(f"note: {note}")
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
    merged = _merged_copy(model, settings, adapter_path).to(getattr(torch, dtype))
    merged.save_pretrained(str(path), safe_serialization=True)
    tokenizer.save_pretrained(str(path))
    return path


def _merged_copy(model, settings, adapter_path=None):
    """CPU (peft): the adapter merged into a copy of the base model (from adapter_path when given, else a deep copy
    of model), so the model in memory keeps its adapter."""
    if adapter_path is not None:
        work, _ = load_cpu(settings, adapter_path=adapter_path)
    else:
        work = copy.deepcopy(model)
    return work.merge_and_unload()


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


def export_gguf(model, tokenizer, path, settings=None, adapter_path=None, overwrite: bool = False,
                quantization_method: str = "q4_k_m") -> Path:
    """GGUF file(s) (llama.cpp, Ollama, LM Studio). Returns the folder holding them. Like export_merged, one call
    for both paths: given `settings` (the preset), a model without Unsloth goes to export_gguf_cpu (an F16 file).

    GPU (Unsloth): the merged 16-bit model goes into `path` and the GGUF files into `<path>_gguf`; both are checked
    before anything is written, so neither an earlier export nor a user's folder is replaced silently.
    """
    if not hasattr(model, "save_pretrained_gguf"):
        if settings is not None:
            return export_gguf_cpu(model, path, settings, adapter_path=adapter_path, overwrite=overwrite)
        raise SharingError(
            "GGUF export goes through Unsloth's save_pretrained_gguf, which this kit uses on the GPU path only "
            "(the CPU path has a plain transformers + peft model). On the CPU pass the preset, "
            "export_gguf(model, tokenizer, path, preset): it writes an F16 GGUF of the merged model with the gguf "
            "package (export_gguf_cpu)."
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


# llama.cpp's tensor names for a Llama-architecture model (SmolLM2 is one), from the transformers names.
GGUF_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
              "lm_head.weight": "output.weight"}
GGUF_LAYER_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def gguf_tensor_name(name: str) -> str:
    """The GGUF (llama.cpp) name of a Llama model's weight: model.layers.3.self_attn.q_proj.weight -> blk.3.attn_q.weight."""
    if name in GGUF_NAMES:
        return GGUF_NAMES[name]
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.weight", name)
    if not m or m.group(2) not in GGUF_LAYER_NAMES:
        raise SharingError(f"{name}: no GGUF name for this weight (the CPU GGUF export knows the Llama architecture "
                           "of the embedded SmolLM2 only)")
    return f"blk.{m.group(1)}.{GGUF_LAYER_NAMES[m.group(2)]}.weight"


def gguf_permute(weight, n_head: int):
    """q_proj / k_proj rows from the transformers rotary layout to llama.cpp's (what llama.cpp's convert_hf_to_gguf.py
    does; transformers' GGUF loader undoes it). n_head: attention heads for q, key-value heads for k."""
    return weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(
        weight.shape)


def export_gguf_cpu(model, path, settings, adapter_path=None, overwrite: bool = False, template=None) -> Path:
    """CPU path: one F16 GGUF file (llama.cpp, Ollama, LM Studio) of the merged model, written with the `gguf`
    package (no llama.cpp build, no GPU). Returns the folder holding it.

    The adapter is merged into a copy of the base model (as export_merged does); the file takes every metadata entry
    (architecture, tokenizer, chat template) from `template`, the embedded model's own GGUF (what the cpu preset
    loads), and its weights from the merge: matrices in F16, norms in F32. Refused before anything is written when
    the merged model's weights are not exactly the template's tensors (another architecture).
    """
    import gguf
    import numpy as np

    from helpers.model import embedded_gguf_path

    if _is_unsloth(model):
        raise SharingError("export_gguf_cpu is the CPU path's GGUF export; on the GPU use export_gguf (Unsloth).")
    if not overwrite:
        fresh_folder(path, overwrite=False)  # an earlier export is refused before the template is read, the merge made
    template = Path(template or embedded_gguf_path())
    reader = gguf.GGUFReader(str(template))
    order = [t.name for t in reader.tensors]
    merged = _merged_copy(model, settings, adapter_path).float()
    config = merged.config
    tensors = {}
    for name, tensor in merged.state_dict().items():
        if name == "lm_head.weight" and getattr(config, "tie_word_embeddings", False):
            continue  # tied: the file holds token_embd.weight once, as the template does
        weight = tensor.detach().numpy()
        if name.endswith("self_attn.q_proj.weight"):
            weight = gguf_permute(weight, config.num_attention_heads)
        elif name.endswith("self_attn.k_proj.weight"):
            weight = gguf_permute(weight, config.num_key_value_heads)
        tensors[gguf_tensor_name(name)] = weight.astype(np.float16 if weight.ndim == 2 else np.float32)
    if set(tensors) != set(order):
        raise SharingError(f"the merged model's weights do not match {template.name}'s tensors (missing "
                           f"{sorted(set(order) - set(tensors))[:3]}, extra {sorted(set(tensors) - set(order))[:3]}); "
                           "nothing was written.")
    path = fresh_folder(path, overwrite)
    path.mkdir(parents=True, exist_ok=True)
    out = path / (template.name.split(".")[0] + "-grpo-F16.gguf")
    writer = gguf.GGUFWriter(str(out), arch=str(reader.fields["general.architecture"].contents()))
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type",
                                              "general.quantization_version"):  # the writer sets the first itself
            continue
        writer.add_key_value(key, field.contents(), field.types[0],
                             sub_type=field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for name in order:  # the template's order
        writer.add_tensor(name, tensors[name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# ----------------------------------------------------------------------------------------- the Hub


def hf_token(environ=None, userdata=None) -> str:
    """The token from Colab secrets, else $HF_TOKEN, else the one `hf auth login` saved (huggingface_hub.get_token()
    reads both, as every Hub call does); MissingTokenError (with how to add it) otherwise.

    The value is returned to the caller only; it is never printed. `userdata` replaces google.colab.userdata and
    `environ` os.environ (tests): with an `environ` of its own, only that mapping is read, not this machine's login.
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
    if not token and environ is os.environ:
        from huggingface_hub import get_token  # the environment, then HF_HOME's token file (`hf auth login`)

        token = get_token()
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
    say(f"uploaded {folder} to {url}")
    return url


# ---------------------------------------------------------------------------- finding a trained adapter (06 and later)

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


class AdapterMissing(FileNotFoundError):
    """No trained adapter where a lesson looked; the message lists where it looked and the three ways to get one."""


def is_adapter(folder: str | os.PathLike) -> bool:
    return all((Path(folder) / name).is_file() for name in ADAPTER_FILES)


def adapter_base_model(folder: str | os.PathLike) -> str | None:
    try:
        return json.loads((Path(folder) / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except (OSError, ValueError):
        return None


def adapter_fits(folder: str | os.PathLike, preset) -> bool:
    """Whether folder holds an adapter this preset's model can load: the same base model, or one it does not name."""
    if not is_adapter(folder):
        return False
    base = adapter_base_model(folder)
    return not base or not preset.model_name or base_model_key(base) == base_model_key(preset.model_name)


def base_model_key(name: str) -> str:
    """A model's identity across spellings: "unsloth/Llama-3.2-1B-Instruct", its "-unsloth-bnb-4bit" repo and a
    local folder of the same name agree; so do the cpu preset's "SmolLM2-135M-Instruct (embedded, ...)" and the
    cached folder .../SmolLM2-135M-Instruct that its adapters name."""
    key = Path(str(name).split(" (")[0].rstrip("/")).name.lower()
    for suffix in ("-unsloth-bnb-4bit", "-bnb-4bit", "-4bit"):
        key = key.removesuffix(suffix)
    return key


def locate_adapter(kit, staged: str | os.PathLike | None = None, mount=None) -> Path:
    """The trained adapter a lesson after 05 uses, first found of:

    1. <run folder>/adapter - 05's run in this runtime, or the run folder on Drive (prepare(..., drive=True));
    2. `staged`: a folder the instructor shared (a path, e.g. on Drive: MyDrive/grpo-kit/staged/adapter), or a
       Hugging Face repo id "owner/name" holding the adapter files (downloaded once);
    3. MyDrive/grpo-kit/staged/adapter when Drive is mounted (where the instructor guide says to put it).

    Raises AdapterMissing naming every place it looked and the fixes. An adapter made for another base model than
    the preset's is refused (its answers would be noise).
    """
    looked = []
    candidates = [Path(kit.run_dir) / "adapter"]
    if staged:
        staged_path = Path(staged).expanduser()
        if not staged_path.exists() and "/" in str(staged) and not str(staged).startswith(("/", ".", "~")) \
                and str(staged).count("/") == 1:
            candidates.append(_download_adapter(str(staged)))
        else:
            candidates.append(staged_path)
    if on_colab() and (COLAB_CONTENT / "drive" / "MyDrive").is_dir():
        candidates.append(COLAB_CONTENT / "drive" / "MyDrive" / DRIVE_KIT_FOLDER / "staged" / "adapter")
    for folder in candidates:
        looked.append(str(folder))
        if is_adapter(folder):
            if not adapter_fits(folder, kit.preset):
                raise AdapterMissing(
                    f"the adapter in {folder} was trained on {adapter_base_model(folder)}, but this preset "
                    f"({kit.preset.name}) loads {kit.preset.model_name}. "
                    "Fix: use an adapter from a run with the same preset (the t4 preset on a T4 runtime, the cpu "
                    "preset on a CPU runtime), or set PRESET to match it.")
            say(f"using the trained adapter in {folder}")
            return Path(folder)
    raise AdapterMissing(
        "No trained adapter found; looked in: " + ", ".join(looked) + ". Fix, one of: (a) train one with this "
        "preset first (05 with the same RUN_DIR, or TRAIN_IF_MISSING = True here); (b) if 05 ran in another "
        "runtime, keep USE_DRIVE = None (or True) in both with the same RUN_DIR so this notebook reads the run folder "
        "from Drive; (c) ask your instructor for a pre-trained adapter of this preset and set STAGED_ADAPTER to its "
        "folder (e.g. /content/drive/MyDrive/grpo-kit/staged/adapter) or its Hugging Face repo id. docs/colab.md "
        "explains the three.")


def _download_adapter(repo_id: str) -> Path:
    """An adapter repo from the Hugging Face Hub, into the local cache (token from Colab secrets if private)."""
    from huggingface_hub import snapshot_download

    try:
        token = hf_token()
    except MissingTokenError:
        token = None  # a public repo needs none
    return Path(snapshot_download(repo_id=repo_id, token=token, allow_patterns=["adapter_*", "*.json", "*.txt",
                                                                                  "*.model", "*.jinja"]))


# ---------------------------------------------------------------------------- 05 -> 06 without Google Drive

# What 06 reads of 05's run: its results and the adapter, not the checkpoints (hundreds of MB, only for resuming).
RUN_HANDOFF = ("summary.json", "eval.json", "metrics.jsonl", "config.json", "before.json", "samples.jsonl",
               "dashboard.png", "reward_curve.png", "training_curves.png", "my_rewards.py", "adapter")


def handoff_zip(run_dir) -> Path:
    """<run name>-run.zip beside the run folder: the run's results and adapter (RUN_HANDOFF), no checkpoints."""
    run_dir = Path(run_dir)
    path = run_dir.parent / f"{run_dir.name}-run.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in RUN_HANDOFF:
            item = run_dir / name
            for f in sorted(item.rglob("*")) if item.is_dir() else [item] if item.is_file() else []:
                if f.is_file():
                    zf.write(f, f.relative_to(run_dir).as_posix())
    return path


def hand_off_run(run_dir, files=None) -> Path | None:
    """05's end on Colab without Drive: download the run as one zip, for 06 (receive_run) in another runtime. None,
    doing nothing, when the run folder is on Drive or this is not Colab."""
    if not without_drive(run_dir):
        return None
    path = handoff_zip(run_dir)
    say(f"no Google Drive: downloading {path.name} ({path.stat().st_size / 1e6:.1f} MB: the run's results and adapter, "
        f"no checkpoints) to your computer. In 06, keep RUN_DIR = {Path(run_dir).name!r} and choose this file when "
        "it asks (on this runtime the checkpoints stay until it ends: extend the run before that)")
    download(path, files)
    return path


def _upload_name(name: str) -> str:
    """The name the student saved: a browser's second download of my_rewards.py is "my_rewards (1).py"."""
    return re.sub(r" \(\d+\)(?=\.[^.]+$)", "", Path(name).name)


def receive_files(run_dir, uploaded: dict, allowed=RUN_HANDOFF) -> list[str]:
    """Put uploaded files ({name: bytes}, as google.colab.files.upload returns them) into the run folder: a zip is
    unpacked (only RUN_HANDOFF entries, never a path out of the folder), another file kept if its name is allowed.
    Returns the top-level names received; anything else is named and skipped."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    got = []
    for raw, content in uploaded.items():
        name = _upload_name(raw)
        if name.endswith(".zip"):
            got += _unpack_run_zip(run_dir, content, raw)
        elif name in allowed:
            (run_dir / name).write_bytes(content)
            got.append(name)
        else:
            say(f"skipped {raw}: not a file the run folder takes ({', '.join(allowed)})")
    return sorted(set(got))


def _unpack_run_zip(run_dir: Path, content: bytes, raw: str) -> list[str]:
    import io

    got = []
    with zipfile.ZipFile(io.BytesIO(content)) as zf:
        for member in zf.infolist():
            parts = Path(member.filename).parts
            outside = ".." in parts or Path(member.filename).is_absolute()
            if member.is_dir() or not parts or parts[0] not in RUN_HANDOFF or outside:
                continue
            target = run_dir.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(member))
            got.append(parts[0])
    if not got:
        say(f"skipped {raw}: it holds none of a run's files (is it the zip 05 downloaded?)")
    return got


def receive_run(run_dir, files=None) -> bool:
    """06 on Colab without Drive: when RUN_DIR holds no finished run, ask for the zip 05 downloaded (hand_off_run)
    and unpack it there. True when a run arrived; False (doing nothing) on Drive, off Colab, or with a run there."""
    run_dir = Path(run_dir)
    if not without_drive(run_dir) or (run_dir / "summary.json").is_file():
        return False
    say(f"no Google Drive, and no finished run in {run_dir}: choose the {run_dir.name}-run.zip that 05 downloaded "
        "(the button below), or cancel to go on without the class run")
    got = receive_files(run_dir, upload(files))
    if "summary.json" in got:
        say(f"received the run: {', '.join(got)}")
        return True
    say("no run received: the cells below show no class run and work on a CPU model")
    return False
