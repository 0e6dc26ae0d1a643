"""Measure real peak GPU memory of GRPO-shaped steps and compare it with helpers.memory's prediction.

    python scripts/benchmark_memory.py            # the whole grid, a table on stdout
    python scripts/benchmark_memory.py --quick --json results.json

Needs a CUDA GPU; on a CPU machine it exits with a message. Nothing is downloaded: each model is built from its
architecture (helpers.memory.MODELS, the numbers of its public config.json) with random weights. The process is
capped with torch.cuda.set_per_process_memory_fraction so a large card behaves like a T4 (14.56 GB).

One GRPO-shaped step per configuration, the way TRL runs one without vLLM:
  1. generation: transformers generate() of per_device_train_batch_size completions (G per prompt), forced to
     max_completion_length new tokens, under no_grad;
  2. training: forward of prompt+completion with logits for the completion positions only (logits_to_keep),
     TRL's selective log-softmax, the GRPO surrogate loss with random advantages, backward, one optimizer step
     on the LoRA parameters (peft).
Measured = torch.cuda.max_memory_reserved() over the step; compared with the estimate minus CUDA_CONTEXT_GB
(the context is invisible to PyTorch's counters). vLLM and Unsloth's chunked loss are NOT exercised here.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers.memory import CUDA_CONTEXT_GB, GIB, MODELS, MemorySettings, estimate  # noqa: E402

T4_GB = 14.56

BASE = MemorySettings(model="qwen2.5-1.5b", quant="16bit", lora_rank=16, num_generations=4,
                      per_device_train_batch_size=4, max_prompt_length=256, max_completion_length=256,
                      gradient_checkpointing=True, optim="adamw_torch", engine="hf", gpu_memory_utilization=None,
                      chunked_logits=False)

GRID = [
    ("smollm2-135m b8 c256", replace(BASE, model="smollm2-135m", num_generations=8, per_device_train_batch_size=8)),
    ("qwen2.5-0.5b b4 c256", replace(BASE, model="qwen2.5-0.5b")),
    ("qwen2.5-1.5b b4 c256", BASE),
    ("qwen2.5-1.5b b8 c256 (G8)", replace(BASE, num_generations=8, per_device_train_batch_size=8)),
    ("qwen2.5-1.5b b4 c512", replace(BASE, max_completion_length=512)),
    ("qwen2.5-1.5b b4 c256 r64", replace(BASE, lora_rank=64)),
    ("qwen2.5-1.5b b4 c256 no-GC", replace(BASE, gradient_checkpointing=False)),
    ("qwen2.5-1.5b 4bit b6 c256 adamw_8bit", replace(BASE, quant="4bit", num_generations=6,
                                                      per_device_train_batch_size=6, optim="adamw_8bit")),
]
QUICK = {"smollm2-135m b8 c256", "qwen2.5-1.5b b4 c256", "qwen2.5-1.5b b4 c512", "qwen2.5-1.5b b4 c256 no-GC",
         "qwen2.5-1.5b b8 c256 (G8)", "qwen2.5-1.5b b4 c256 r64"}


def hf_config(key: str, dtype):
    """A transformers config with the architecture of MODELS[key] (Qwen2 / Llama families)."""
    from transformers import LlamaConfig, Qwen2Config

    a = MODELS[key]
    common = dict(hidden_size=a.hidden_size, num_hidden_layers=a.num_layers, num_attention_heads=a.num_heads,
                  num_key_value_heads=a.num_kv_heads, intermediate_size=a.intermediate_size, vocab_size=a.vocab_size,
                  tie_word_embeddings=a.tie_word_embeddings, max_position_embeddings=4096, pad_token_id=0,
                  bos_token_id=1, eos_token_id=2)
    if key.startswith("qwen2.5"):
        return Qwen2Config(**common)
    return LlamaConfig(head_dim=a.head_dim, **common)


def build_model(s: MemorySettings, dtype, workdir: Path):
    """Random-weight model on the GPU (4-bit: saved once and reloaded through bitsandbytes) with a peft LoRA."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = hf_config(str(s.model), dtype)
    cfg._attn_implementation = "sdpa"
    if s.quant == "4bit":
        from transformers import BitsAndBytesConfig

        folder = workdir / f"{s.model}-random"
        if not (folder / "config.json").is_file():
            AutoModelForCausalLM.from_config(cfg, dtype=dtype).save_pretrained(folder)
        bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                 bnb_4bit_compute_dtype=dtype)
        model = AutoModelForCausalLM.from_pretrained(folder, quantization_config=bnb, dtype=dtype, device_map={"": 0})
    else:
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).to("cuda")
    model.generation_config.eos_token_id = None  # random weights: always generate the full length
    model.generation_config.pad_token_id = 0
    if s.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    lora = LoraConfig(r=s.lora_rank, lora_alpha=2 * s.lora_rank, target_modules=list(s.lora_target_modules),
                      lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


def selective_log_softmax(logits, index):
    """TRL's trick for 16-bit logits: log-softmax one row at a time, gather the chosen token's log-prob."""
    import torch

    out = []
    for row_logits, row_index in zip(logits, index):
        row_logps = torch.nn.functional.log_softmax(row_logits.float(), dim=-1)
        out.append(row_logps.gather(dim=-1, index=row_index.unsqueeze(-1)).squeeze(-1))
    return torch.stack(out)


def grpo_step(model, s: MemorySettings, optimizer) -> None:
    import torch

    b, p, c = s.per_device_train_batch_size, s.max_prompt_length, s.max_completion_length
    vocab = model.config.vocab_size
    prompts = torch.randint(3, vocab, (b // s.num_generations, p), device="cuda").repeat_interleave(s.num_generations, 0)
    mask = torch.ones_like(prompts)
    model.eval()
    with torch.no_grad():
        seq = model.generate(input_ids=prompts, attention_mask=mask, max_new_tokens=c, min_new_tokens=c,
                             do_sample=True, temperature=1.0, top_k=0, top_p=1.0, use_cache=True)
    torch.cuda.synchronize()
    model.train()
    completion = seq[:, p:]
    full_mask = torch.ones_like(seq)
    out = model(input_ids=seq, attention_mask=full_mask, logits_to_keep=c + 1, use_cache=False)
    logits = out.logits[:, :-1, :] / 1.0
    logps = selective_log_softmax(logits, completion)
    advantages = torch.randn(b, 1, device="cuda")
    loss = -(torch.exp(logps - logps.detach()) * advantages).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


def make_optimizer(model, s: MemorySettings):
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    if s.optim.endswith("8bit"):
        import bitsandbytes as bnb

        return bnb.optim.AdamW8bit(params, lr=1e-5)
    return torch.optim.AdamW(params, lr=1e-5)


def measure(label: str, s: MemorySettings, dtype, workdir: Path) -> dict:
    import torch

    est = estimate(s, gpu=T4_GB, budget_gb=T4_GB)
    predicted = est.peak_gb - CUDA_CONTEXT_GB
    row = {"config": label, "estimate_gb": round(predicted, 3), "estimate_phase": est.peak_phase,
           "estimate_fits_t4": est.fits}
    model = optimizer = None
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    started = time.time()
    try:
        model = build_model(s, dtype, workdir)
        optimizer = make_optimizer(model, s)
        grpo_step(model, s, optimizer)
        measured = torch.cuda.max_memory_reserved() / GIB
        row.update(measured_gb=round(measured, 3), rel_error=round((predicted - measured) / measured, 3),
                   allocated_peak_gb=round(torch.cuda.max_memory_allocated() / GIB, 3), status="ok")
    except torch.OutOfMemoryError as err:
        row.update(measured_gb=None, rel_error=None, status=f"OOM under the {T4_GB} GB cap: {str(err).splitlines()[0]}")
    except ImportError as err:
        row.update(measured_gb=None, rel_error=None, status=f"skipped: {err}")
    finally:
        del model, optimizer
        gc.collect()
        torch.cuda.empty_cache()
    row["seconds"] = round(time.time() - started, 1)
    return row


def run_grid(quick: bool = False, cap_gb: float = T4_GB) -> list[dict]:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("benchmark_memory.py needs a CUDA GPU: none is visible to PyTorch. Run it on a GPU "
                         "machine (e.g. a Colab T4); on CPU the memory model can only be explored, not measured.")
    total = torch.cuda.get_device_properties(0).total_memory / GIB
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap_gb / total), 0)
    major, _ = torch.cuda.get_device_capability(0)
    dtype = torch.bfloat16 if major >= 8 else torch.float16
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, s in GRID:
            if quick and label not in QUICK:
                continue
            rows.append(measure(label, s, dtype, Path(tmp)))
            print(format_row(rows[-1]), flush=True)
    return rows


def format_row(r: dict) -> str:
    m = "-" if r.get("measured_gb") is None else f"{r['measured_gb']:.2f}"
    e = "-" if r.get("rel_error") is None else f"{r['rel_error']:+.0%}"
    return f"{r['config']:<40}{r['estimate_gb']:>9.2f}{m:>10}{e:>9}  {r['status']}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"only {len(QUICK)} configurations")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--cap-gb", type=float, default=T4_GB, help="memory cap (default: a T4's 14.56 GB)")
    args = ap.parse_args(argv)
    print(f"{'config':<40}{'estimate':>9}{'measured':>10}{'error':>9}  status   (GB = GiB, estimate excludes "
          f"{CUDA_CONTEXT_GB} GB CUDA context)")
    rows = run_grid(args.quick, args.cap_gb)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
