"""A student's script: loss_type='dr_grpo', two micro-batches accumulated per step, each step sampling
its own batch (num_iterations=1), 4 completions per question. Expected: passed."""
import argparse

import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from helpers.data import synthetic_problems
from helpers.model import prepare_embedded_model
from helpers.prompts import build_messages, extract_answer
from helpers.run.trl_patches import patch_trl_for_cpu

ap = argparse.ArgumentParser()
ap.add_argument("--max-steps", type=int, default=40)
ap.add_argument("--output-dir", default="runs/capstone")
args = ap.parse_args()

rows = [{"prompt": build_messages(p["question"]), "answer": p["answer"]} for p in synthetic_problems(500, "train")]
tokenizer = AutoTokenizer.from_pretrained(prepare_embedded_model())
model = AutoModelForCausalLM.from_pretrained(prepare_embedded_model(), dtype=torch.float32)
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj", "o_proj"],
                                         task_type="CAUSAL_LM"))


def correct(prompts, completions, answer, **kwargs):
    scores = []
    for c, gold in zip(completions, answer):
        found = extract_answer(c[0]["content"])
        try:
            scores.append(2.0 if float(found.replace(",", "")) == float(gold) else 0.0)
        except (AttributeError, ValueError):
            scores.append(0.0)
    return scores


def tags(completions, **kwargs):
    return [0.125 * sum(c[0]["content"].count(t) == 1 for t in ("<reasoning>", "</reasoning>", "<answer>", "</answer>"))
            for c in completions]


config = GRPOConfig(output_dir=args.output_dir, max_steps=args.max_steps, logging_steps=1, report_to="none",
                    save_strategy="no", num_generations=4, per_device_train_batch_size=4, max_completion_length=32,
                    learning_rate=2.5e-4, num_iterations=1, beta=0.0, loss_type="dr_grpo",
                    gradient_accumulation_steps=2, use_cpu=True, bf16=False)
patch_trl_for_cpu()
trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[correct, tags], args=config,
                      train_dataset=Dataset.from_list(rows))
trainer.train()
model.save_pretrained(f"{args.output_dir}/adapter")
