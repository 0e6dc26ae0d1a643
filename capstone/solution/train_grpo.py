"""GRPO from scratch: dataset -> model + LoRA -> rewards -> GRPOConfig -> GRPOTrainer -> train -> saved adapter.
On a CPU the embedded SmolLM2-135M with peft; on a GPU the T4 lab's stack: Qwen2.5-1.5B in 4 bits with Unsloth, vLLM
generating from the same weights (fast_inference). Check it (capstone/README.md): python -m helpers.capstone train_grpo.py"""
import argparse
import importlib.util

import torch

GPU = torch.cuda.is_available() and importlib.util.find_spec("unsloth") is not None  # the T4 stack
if GPU:
    from unsloth import FastLanguageModel  # before TRL: Unsloth patches TRL when it is imported
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from helpers import prompts
from helpers.data import gsm8k_records, synthetic_problems
from helpers.model import prepare_embedded_model
from helpers.prompts import extract_answer  # the last <answer> block's text (None without one), as 06 reads it
from helpers.run.trl_patches import patch_trl_for_cpu

ap = argparse.ArgumentParser()
ap.add_argument("--max-steps", type=int, default=40)
ap.add_argument("--output-dir", default="runs/capstone")
args = ap.parse_args()


# 1. The dataset: 03's mapping (gsm8k_to_row) over the questions: synthetic word problems on a CPU, GSM8K on a GPU
#    record -> {"prompt" (chat messages), "answer" (the gold number), "question"}; a 135M model can learn the
#    synthetic ones; the t4 preset's prompts have no worked example
def gsm8k_to_row(record, worked_example=True):
    """One GSM8K record {"question", "answer"} -> the row GRPOTrainer trains on: {"prompt", "answer", "question"}."""
    solution = record["answer"]  # the worked solution; its last line is "#### <number>"
    gold = solution.split("####")[-1].strip().replace(",", "")
    messages = prompts.build_messages(record["question"], worked_example=worked_example)
    return {"prompt": messages, "answer": gold, "question": record["question"]}


records = gsm8k_records("train") if GPU else synthetic_problems(2000, "train", seed=0)
dataset = Dataset.from_list([gsm8k_to_row(r, worked_example=not GPU) for r in records])

# 2. The model and its LoRA adapter: peft on a CPU, Unsloth on a GPU (fast_inference=True: vLLM shares the weights)
#    on a CPU the model's folder is prepare_embedded_model(); LoRA B starts at zero, training must change it
LAYERS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
if GPU:
    model, tokenizer = FastLanguageModel.from_pretrained(model_name="unsloth/Qwen2.5-1.5B-Instruct", max_seq_length=768,
                                                         load_in_4bit=True, fast_inference=True, max_lora_rank=16,
                                                         gpu_memory_utilization=0.13)  # lesson 05's vLLM sizing
    model = FastLanguageModel.get_peft_model(model, r=16, target_modules=LAYERS, lora_alpha=16,
                                             use_gradient_checkpointing="unsloth", random_state=0)
else:
    tokenizer = AutoTokenizer.from_pretrained(prepare_embedded_model())
    model = AutoModelForCausalLM.from_pretrained(prepare_embedded_model(), dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=LAYERS, task_type="CAUSAL_LM"))


# 3. The rewards, TRL's contract: f(prompts, completions, answer, **kwargs) -> one float per completion
#    a chat dataset's completion is [{"role": "assistant", "content": text}]; answers compare as numbers (04)
def as_number(text):
    """04: "1,000" is 1000, "$18" is 18, "72.0" is 72; two numbers ("11 or 12") or none is no answer."""
    try:
        return float(text.replace(",", "").replace("$", "").strip())
    except (AttributeError, ValueError):
        return None


def correctness_reward(prompts, completions, answer, **kwargs):
    found = [as_number(extract_answer(c[0]["content"])) for c in completions]
    return [2.0 if x is not None and x == float(gold) else 0.0 for x, gold in zip(found, answer)]


def format_reward(completions, **kwargs):  # partial credit per tag: a group's scores differ, so it learns
    tags = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")
    return [sum(0.125 for t in tags if c[0]["content"].count(t) == 1) for c in completions]


# 4. The training settings: GRPOConfig with the cpu preset's stable recipe on a CPU, the t4 preset's on a GPU
#    05's measured runs: 5e-4 with one step per batch collapsed onto one answer; 2.5e-4 with each sampled batch
#    trained on twice (num_iterations=2) learned on three seeds. max_steps=args.max_steps, logging_steps=1
config = GRPOConfig(output_dir=args.output_dir, max_steps=args.max_steps, logging_steps=1, report_to="none",
                    save_strategy="no", num_generations=6 if GPU else 8, per_device_train_batch_size=6 if GPU else 8,
                    max_completion_length=256 if GPU else 64, temperature=1.0, beta=0.0,
                    learning_rate=5e-6 if GPU else 2.5e-4, num_iterations=1 if GPU else 2,
                    lr_scheduler_type="cosine" if GPU else "constant", warmup_steps=10 if GPU else 0,
                    weight_decay=0.1 if GPU else 0.0, max_grad_norm=0.1 if GPU else 1.0,
                    optim="adamw_8bit" if GPU else "adamw_torch", use_vllm=GPU, use_cpu=not GPU, bf16=False,
                    fp16=GPU, gradient_checkpointing=False)  # fp16: a T4 has no bf16

# 5. The trainer: patch_trl_for_cpu() on a CPU, then GRPOTrainer(...) and trainer.train()
if not GPU:
    patch_trl_for_cpu()  # TRL's log-prob kernel needs Triton, which CPU PyTorch lacks
trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[correctness_reward, format_reward],
                      args=config, train_dataset=dataset)
trainer.train()

# 6. The adapter: model.save_pretrained(f"{args.output_dir}/adapter")
model.save_pretrained(f"{args.output_dir}/adapter")
tokenizer.save_pretrained(f"{args.output_dir}/adapter")
