"""The models and GPUs the memory model knows: each model's shape from its public config.json, each card's memory
as PyTorch reports it, and the lookups from a hub id, a table key or a config.json path."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from helpers.config import LORA_TARGETS


class MemoryModelError(ValueError):
    """Settings the memory model cannot estimate; the message names the fix. (Here, the package's lowest module,
    so every module of helpers.memory can raise it.)"""


@dataclass(frozen=True)
class ModelArch:
    """The numbers of a decoder-only transformer that decide its memory (from its config.json)."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    attention_bias: bool = False

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of the seven projections in one decoder layer."""
        h, q, kv, i = self.hidden_size, self.q_dim, self.kv_dim, self.intermediate_size
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    @property
    def linear_params(self) -> int:
        """Weights of all projection layers (what 4-bit quantizes): layers x sum(in x out)."""
        return self.num_layers * sum(a * b for a, b in self.linear_shapes().values())

    @property
    def other_params(self) -> int:
        """Embeddings, lm_head (unless tied), norms and biases: kept in 16 bits even in a 4-bit model."""
        emb = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else emb
        norms = (2 * self.num_layers + 1) * self.hidden_size
        bias = self.num_layers * (self.q_dim + 2 * self.kv_dim) if self.attention_bias else 0
        return emb + head + norms + bias

    @property
    def total_params(self) -> int:
        return self.linear_params + self.other_params

    def lora_params(self, rank: int, targets=LORA_TARGETS) -> int:
        """LoRA adds A (r x in) and B (out x r) to each targeted projection: layers x sum r x (in + out)."""
        shapes = self.linear_shapes()
        unknown = sorted(set(targets) - set(shapes))
        if unknown:
            raise MemoryModelError(f"unknown LoRA target module(s) {unknown}. Fix: use names from {list(shapes)}.")
        return self.num_layers * sum(rank * (shapes[t][0] + shapes[t][1]) for t in targets)


def _arch(name, h, layers, heads, kv, inter, vocab, tied, head_dim=None, bias=False) -> ModelArch:
    return ModelArch(name, h, layers, heads, kv, head_dim or h // heads, inter, vocab, tied, bias)


# From each model's public config.json (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
# head_dim, intermediate_size, vocab_size, tie_word_embeddings; Qwen2.5 has q/k/v biases).
MODELS: dict[str, ModelArch] = {
    "qwen2.5-0.5b": _arch("Qwen2.5-0.5B", 896, 24, 14, 2, 4864, 151936, True, bias=True),
    "qwen2.5-1.5b": _arch("Qwen2.5-1.5B", 1536, 28, 12, 2, 8960, 151936, True, bias=True),
    "qwen2.5-3b": _arch("Qwen2.5-3B", 2048, 36, 16, 2, 11008, 151936, True, bias=True),
    "qwen2.5-7b": _arch("Qwen2.5-7B", 3584, 28, 28, 4, 18944, 152064, False, bias=True),
    "qwen3-0.6b": _arch("Qwen3-0.6B", 1024, 28, 16, 8, 3072, 151936, True, head_dim=128),
    "qwen3-1.7b": _arch("Qwen3-1.7B", 2048, 28, 16, 8, 6144, 151936, True, head_dim=128),
    "qwen3-4b": _arch("Qwen3-4B", 2560, 36, 32, 8, 9728, 151936, True, head_dim=128),
    "qwen3-8b": _arch("Qwen3-8B", 4096, 36, 32, 8, 12288, 151936, False, head_dim=128),
    "llama-3.2-1b": _arch("Llama-3.2-1B", 2048, 16, 32, 8, 8192, 128256, True, head_dim=64),
    "llama-3.2-3b": _arch("Llama-3.2-3B", 3072, 28, 24, 8, 8192, 128256, True, head_dim=128),
    "llama-3.1-8b": _arch("Llama-3.1-8B", 4096, 32, 32, 8, 14336, 128256, False, head_dim=128),
    "gemma-3-1b": _arch("Gemma-3-1B", 1152, 26, 4, 1, 6912, 262144, True, head_dim=256),
    "smollm2-135m": _arch("SmolLM2-135M", 576, 30, 9, 3, 1536, 49152, True),
}

# GPU memory as PyTorch reports it (GiB). T4: measured by Unsloth's T4 CI (unslothai/unsloth
# .github/scripts/kaggle_t4_ci/legs.py); the others are the card's nvidia-smi size less the same ~0.45 GiB the T4
# loses (ASSUMPTION, not measured here).
GPUS: dict[str, float] = {"t4": 14.56, "l4": 22.0, "a10g": 22.0, "a100-40": 39.4, "a100-80": 79.1, "h100": 79.1}
GPU_ALIASES = {"a100": "a100-40", "a100-40gb": "a100-40", "a100-80gb": "a100-80", "h100-80": "h100"}


def model_key(name: str) -> str:
    """The MODELS key of a model name: 'unsloth/Qwen2.5-1.5B-Instruct' -> 'qwen2.5-1.5b' (organisation, quantization
    and chat suffixes and the kit's '(embedded, ...)' note dropped)."""
    n = name.strip().split(" (")[0].rstrip("/").split("/")[-1].lower()
    for suffix in ("-unsloth-bnb-4bit", "-bnb-4bit", "-instruct", "-it", "-base", "-pt"):
        if n.endswith(suffix):
            n = n[: -len(suffix)]
    return n


def arch_from_config(path) -> ModelArch:
    """A ModelArch from a Hugging Face config.json (a file, or a folder holding one; text_config is followed)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    cfg = json.loads(path.read_text())
    cfg = cfg.get("text_config", cfg)
    try:
        h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
        return ModelArch(
            name=path.parent.name or path.stem,
            hidden_size=h,
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or h // heads,
            intermediate_size=cfg["intermediate_size"],
            vocab_size=cfg["vocab_size"],
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")),
        )
    except KeyError as err:
        raise MemoryModelError(f"{path} lacks {err} . Fix: pass a decoder-only model's config.json.") from None


def resolve_model(model) -> ModelArch:
    """A ModelArch from a table key ('qwen2.5-1.5b'), a hub id ('unsloth/Qwen2.5-1.5B-Instruct'), a
    config.json path, or a ModelArch."""
    if isinstance(model, ModelArch):
        return model
    if str(model).endswith(".json") or Path(str(model)).is_dir() and (Path(str(model)) / "config.json").is_file():
        if not Path(str(model)).exists():
            raise MemoryModelError(f"config file {model} does not exist. Fix: give the path to a config.json.")
        return arch_from_config(model)
    key = model_key(str(model))
    if key in MODELS:
        return MODELS[key]
    raise MemoryModelError(
        f"unknown model {model!r}. Fix: use one of {', '.join(MODELS)}, or pass the path to the model's config.json."
    )


def gpu_total_gb(gpu) -> float:
    """Total memory (GiB, as PyTorch reports it) of a GPU name from GPUS, or a number of GB."""
    if isinstance(gpu, (int, float)):
        return float(gpu)
    key = str(gpu).lower().replace(" ", "")
    key = GPU_ALIASES.get(key, key)
    if key not in GPUS:
        raise MemoryModelError(f"unknown GPU {gpu!r}. Fix: use one of {', '.join(GPUS)} (or a number of GB).")
    return GPUS[key]
