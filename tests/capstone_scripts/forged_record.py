"""A student's script that never calls trainer.train(): it reaches the checker's recorder (builtins.__import__'s
closure), writes the record a real run would leave (2 steps counted, rewards logged, scored completions, its rewards'
scores on 04's completions) and saves an adapter whose LoRA B matrices it filled with small noise. Expected:
refused: the saved adapter does not move the recorded completions the way their advantages say."""
import argparse
import builtins
import json

import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from helpers.data import synthetic_problems
from helpers.model import prepare_embedded_model
from helpers.prompts import build_messages, extract_answer, format_completion
from helpers.run.trl_patches import patch_trl_for_cpu

ap = argparse.ArgumentParser()
ap.add_argument("--max-steps", type=int, default=40)
ap.add_argument("--output-dir", default="runs/capstone")
args = ap.parse_args()

problems = synthetic_problems(50, "train")
rows = [{"prompt": build_messages(p["question"]), "answer": p["answer"]} for p in problems]
tokenizer = AutoTokenizer.from_pretrained(prepare_embedded_model())
model = AutoModelForCausalLM.from_pretrained(prepare_embedded_model(), dtype=torch.float32)
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"],
                                         task_type="CAUSAL_LM"))


def correct(prompts, completions, answer, **kwargs):
    return [2.0 if extract_answer(c[0]["content"]) == str(gold) else 0.0 for c, gold in zip(completions, answer)]


patch_trl_for_cpu()
config = GRPOConfig(output_dir=args.output_dir, max_steps=args.max_steps, logging_steps=1, report_to="none",
                    num_generations=4, per_device_train_batch_size=4, use_cpu=True, bf16=False)
trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[correct], args=config,
                      train_dataset=Dataset.from_list(rows))

# the recorder, through the watched import's closure
recorder = next(c.cell_contents for c in builtins.__import__.__closure__
                if type(c.cell_contents).__name__ == "_Recorder")
record = next(t for t in recorder.trainers if t["trainer"] is trainer)
torch.manual_seed(0)
with torch.no_grad():
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.add_(0.01 * torch.randn_like(p))
lora = {n.replace(".default", ""): p.detach().numpy().copy() for n, p in model.named_parameters() if "lora_B" in n}
gold = problems[0]["answer"]
texts = [format_completion("I add them.", gold), format_completion("I guess.", "7"), "no idea", gold]
ids = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
completions = [[{"role": "assistant", "content": t}] for t in texts]
scores = correct(None, completions, [gold] * 4)
cases = json.loads((recorder.folder / "capstone_reward_cases.json").read_text())
case_scores = correct(None, [[{"role": "assistant", "content": c["text"]}] for c in cases], [c["gold"] for c in cases])
record.update(train_called=True, steps=args.max_steps, reward_logs=[0.5, 0.75], reward_std=[1.0, 1.0],
              reward_funcs=[{"name": "correct", "module": "__main__", "file": __file__}],
              config={"max_steps": args.max_steps, "num_iterations": 1, "logging_steps": 1, "num_generations": 4},
              lora_end=lora, lora_b=len(lora), lora_b_changed=len(lora), reward_weights=[1.0],
              batches=[{"prompts": [rows[0]["prompt"]] * 4, "completions": completions, "completion_ids": ids,
                        "columns": {"answer": [gold] * 4}, "rewards": [[s] for s in scores]}],
              questions=[p["question"] for p in problems], probe={"scores": {"correct": [case_scores, case_scores]}})
model.save_pretrained(f"{args.output_dir}/adapter")
