"""GRPO from scratch: dataset -> model + LoRA -> rewards -> GRPOConfig -> GRPOTrainer -> train -> saved adapter.
On a CPU the embedded SmolLM2-135M with peft; on a GPU with the T4 lab's stack, Qwen2.5-1.5B in 4 bits with Unsloth.
Check it (capstone/README.md): python -m helpers.capstone train_grpo.py"""
import argparse
import importlib.util
import re

import torch

GPU = torch.cuda.is_available() and importlib.util.find_spec("unsloth") is not None  # the T4 stack
if GPU:
    from unsloth import FastLanguageModel  # before TRL: Unsloth patches TRL when it is imported
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from helpers.data import load_gsm8k, synthetic_dataset
from helpers.model import prepare_embedded_model
from helpers.run.trl_patches import patch_trl_for_cpu

ap = argparse.ArgumentParser()
ap.add_argument("--max-steps", type=int, default=40)
ap.add_argument("--output-dir", default="runs/capstone")
args = ap.parse_args()

# 1. The dataset (helpers.data: synthetic_dataset on a CPU, load_gsm8k on a GPU): prompt (chat messages), answer
dataset = load_gsm8k("train") if GPU else synthetic_dataset(500, "train", seed=0)

# 2. The model and its LoRA adapter: peft's get_peft_model on a CPU (the folder: prepare_embedded_model()),
#    FastLanguageModel.from_pretrained + get_peft_model on a GPU. LoRA B starts at zero: training must change it
LAYERS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
if GPU:
    model, tokenizer = FastLanguageModel.from_pretrained(model_name="unsloth/Qwen2.5-1.5B-Instruct",
                                                         max_seq_length=768, load_in_4bit=True)
    model = FastLanguageModel.get_peft_model(model, r=16, lora_alpha=16, target_modules=LAYERS,
                                             use_gradient_checkpointing="unsloth", random_state=0)
else:
    tokenizer = AutoTokenizer.from_pretrained(prepare_embedded_model())
    model = AutoModelForCausalLM.from_pretrained(prepare_embedded_model(), dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=LAYERS, task_type="CAUSAL_LM"))


# 3. The rewards, TRL's contract: f(prompts, completions, answer, **kwargs) -> one float per completion
def correctness_reward(prompts, completions, answer, **kwargs):
    found = [re.search(r"<answer>\s*([-\d.,]+)\s*</answer>", c[0]["content"]) for c in completions]
    return [2.0 if m and m.group(1).replace(",", "") == str(a) else 0.0 for m, a in zip(found, answer)]


def format_reward(completions, **kwargs):  # partial credit per tag: a group's scores differ, so it learns
    tags = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")
    return [sum(0.125 for t in tags if c[0]["content"].count(t) == 1) for c in completions]


# 4. The training settings: GRPOConfig(max_steps=args.max_steps, logging_steps=1, ...), use_cpu on a CPU, fp16 on a T4
config = GRPOConfig(output_dir=args.output_dir, max_steps=args.max_steps, logging_steps=1, report_to="none",
                    learning_rate=5e-6 if GPU else 5e-4, num_generations=4, per_device_train_batch_size=4,
                    max_completion_length=256 if GPU else 64, beta=0.0, save_strategy="no",
                    use_cpu=not GPU, bf16=False, fp16=GPU, gradient_checkpointing=False)  # fp16: a T4 has no bf16

# 5. The trainer: patch_trl_for_cpu() on a CPU, then GRPOTrainer(...) and trainer.train()
if not GPU:
    patch_trl_for_cpu()  # TRL's log-prob kernel needs Triton, which CPU PyTorch lacks
trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[correctness_reward, format_reward],
                      args=config, train_dataset=dataset)
trainer.train()

# 6. The adapter: model.save_pretrained(f"{args.output_dir}/adapter")
model.save_pretrained(f"{args.output_dir}/adapter")
tokenizer.save_pretrained(f"{args.output_dir}/adapter")
