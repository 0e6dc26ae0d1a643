"""A student's script written as a program: everything inside main(), the rewards nested in it, a GRPOTrainer
subclass that logs the mean reward its own way; loss_type="dr_grpo" with two micro-batches of 4 completions
accumulated per step (TRL then samples once per step: steps_per_generation = 2), and lesson 05's KL penalty,
beta=0.04 (TRL then keeps a frozen `ref` copy of the adapter beside the trained one). Expected: passed."""
import argparse
import re

import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from helpers import data
from helpers import model as kit_model
from helpers.prompts import build_messages, extract_answer
from helpers.run.trl_patches import patch_trl_for_cpu


class LoudTrainer(GRPOTrainer):
    def log(self, logs, *args, **kwargs):
        if "reward" in logs:
            print(f"step {self.state.global_step}: reward {logs['reward']:.3f}")
        super().log(logs, *args, **kwargs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-steps", type=int, default=40)
    ap.add_argument("--output-dir", default="runs/capstone")
    args = ap.parse_args()

    problems = data.synthetic_problems(300, "train", seed=1)
    dataset = Dataset.from_list([{"prompt": build_messages(p["question"]), "answer": p["answer"]}
                                 for p in problems])
    folder = kit_model.prepare_embedded_model()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
    number = re.compile(r"-?\d+(?:\.\d+)?")

    def correctness(prompts, completions, answer, **kwargs):
        out = []
        for completion, gold in zip(completions, answer):
            found = extract_answer(completion[0]["content"])
            nums = number.findall((found or "").replace(",", ""))
            out.append(2.0 if len(nums) == 1 and float(nums[0]) == float(gold) else 0.0)
        return out

    def formatting(prompts, completions, **kwargs):
        return [0.25 * ("<answer>" in c[0]["content"]) + 0.25 * ("</reasoning>" in c[0]["content"])
                for c in completions]

    config = GRPOConfig(output_dir=args.output_dir, max_steps=args.max_steps, logging_steps=1, report_to="none",
                        save_strategy="no", num_generations=4, per_device_train_batch_size=4,
                        gradient_accumulation_steps=2, max_completion_length=32, learning_rate=2.5e-4,
                        loss_type="dr_grpo", beta=0.04, use_cpu=True, bf16=False, gradient_checkpointing=False)
    patch_trl_for_cpu()
    trainer = LoudTrainer(model=model, processing_class=tokenizer, reward_funcs=[correctness, formatting],
                          args=config, train_dataset=dataset)
    trainer.train()
    trainer.model.save_pretrained(f"{args.output_dir}/adapter")


if __name__ == "__main__":
    main()
