"""Several processes, one run: what `python -m helpers.train` needs when started by `accelerate launch` through the
lab's wrapper (lab.scale_out, which plugs this in through helpers.run.extensions):

    accelerate launch --config_file configs/accelerate/multi_gpu_zero2.yaml -m lab.scale_out --preset 8xh100-qwen7b-lora

TRL's GRPOTrainer does the data-parallel part (each process generates and scores its share of the completions,
gradients are all-reduced, or sharded by DeepSpeed ZeRO). This module does the rest:

- `process_info()`: rank / world size from the launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK), read
  without initialising anything, so validation can name the process count before any model loads;
- `on_main_then_share()`: process 0 plans the run folder (creates or refuses it) and every process gets the
  same plan;
- `save_adapter_once()`: the adapter is written once (under DeepSpeed ZeRO-3 the shards are gathered first, a
  step every process takes part in); only process 0 evaluates and writes results (helpers.run.pipeline);
- `RankMarker`: with GRPO_KIT_RANK_MARKERS=<folder>, every process appends a line per optimizer step to
  <folder>/rank<N>.jsonl (rank, world size, step, a checksum of its trainable weights). The multi-process test
  reads these to check that both ranks trained and ended with the same weights.

One process (no launcher): every function here behaves as the course's run does (no process group is started,
process 0 does everything).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

# transformers' TrainerCallback loads torch, torch.distributed and accelerate anyway: these cost nothing more
import torch
import torch.distributed as dist
from accelerate import PartialState
from accelerate.utils import broadcast_object_list
from transformers import TrainerCallback
from transformers.integrations import is_deepspeed_zero3_enabled

from helpers.messages import say
from helpers.model import load_trl_vllm

RANK_MARKERS_ENV = "GRPO_KIT_RANK_MARKERS"


@dataclass(frozen=True)
class ProcessInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    # what helpers.run.pipeline asks of a run's processes (helpers.run.extensions.OneProcess: the course's one)
    def share(self, fn, cpu: bool | None = None):
        return on_main_then_share(fn, self, cpu)

    def save_adapter(self, trainer, model, tokenizer, path, save):
        return save_adapter_once(trainer, model, tokenizer, path, save, self)

    def model_to_evaluate(self, preset, model, adapter):
        if self.distributed and zero3_active():  # the trained weights are sharded: a fresh copy with the saved adapter
            model, _ = load_trl_vllm(preset, adapter_path=adapter)
        return model


def process_info(environ=None) -> ProcessInfo:
    """Rank and world size as set by accelerate launch / torchrun (absent: one process)."""
    env = os.environ if environ is None else environ
    return ProcessInfo(
        rank=int(env.get("RANK", 0)),
        world_size=int(env.get("WORLD_SIZE", 1)),
        local_rank=int(env.get("LOCAL_RANK", 0)),
    )


def _init_process_group(cpu: bool | None = None):
    """accelerate's PartialState starts the process group the launcher described: gloo when training on the CPU
    (cpu=True, or no CUDA), NCCL on GPUs. TrainingArguments later resets and recreates the state; the process
    group itself is kept, so cpu must match what GRPOConfig will say (use_cpu)."""
    if cpu is None:
        cpu = not torch.cuda.is_available()
    return PartialState(cpu=cpu)


def on_main_then_share(fn, info: ProcessInfo | None = None, cpu: bool | None = None):
    """Process 0 calls fn() (e.g. plan the run folder: create it or refuse); every process gets its result.

    The default run folder has a timestamp, so each process deciding for itself could pick a different one; an
    error on process 0 (an earlier run in the folder) is raised on every process, so none is left waiting. One
    process: just fn().
    """
    info = info or process_info()
    if not info.distributed:
        return fn()
    _init_process_group(cpu)
    box = [None, None]
    if info.is_main:
        try:
            box[0] = fn()
        except Exception as err:  # noqa: BLE001 - re-raised on every process below
            box[1] = err
    broadcast_object_list(box, from_process=0)
    if box[1] is not None:
        raise box[1]
    return box[0]


def zero3_active() -> bool:
    """True once a GRPOConfig was built under an accelerate DeepSpeed ZeRO-3 config (parameters are sharded)."""
    return bool(is_deepspeed_zero3_enabled())


def wait_for_everyone(info: ProcessInfo | None = None) -> None:
    info = info or process_info()
    if info.distributed:
        if dist.is_available() and dist.is_initialized():
            dist.barrier()


def save_adapter_once(trainer, model, tokenizer, path: Path, save, info: ProcessInfo | None = None) -> Path:
    """Write the LoRA adapter exactly once.

    One process, or data parallel / ZeRO-1/2 (every process holds the full weights): process 0 calls
    save(model, tokenizer, path). ZeRO-3: Trainer.save_model gathers the sharded weights (a collective, so every
    process calls it) and only process 0 writes.
    """
    info = info or process_info()
    path = Path(path)
    if info.distributed and zero3_active():
        trainer.save_model(str(path))
    elif info.is_main:
        save(model, tokenizer, path)
    if info.is_main:
        say(f"process {info.rank} of {info.world_size}: adapter written to {path}")
    wait_for_everyone(info)
    return path


def _weights_checksum(model) -> tuple[float, int]:
    """(sum of |w| over trainable parameters, their count): equal on every rank when gradients were all-reduced."""
    total, count = 0.0, 0
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad and p.numel():
                total += float(p.detach().float().abs().sum())
                count += p.numel()
    return total, count


class RankMarker(TrainerCallback):
    """Per-process record of training, written only when GRPO_KIT_RANK_MARKERS names a folder (tests, debugging).

    At the start (step 0) and after each optimizer step it appends {"rank", "world_size", "step", "trainable_abs_sum", "trainable_params"} to
    rank<N>.jsonl. Under ZeRO-3 a process holds only a shard, so the checksum covers its local shard.
    """

    def __init__(self, folder=None, info: ProcessInfo | None = None):
        folder = folder if folder is not None else os.environ.get(RANK_MARKERS_ENV)
        self.folder = Path(folder) if folder else None
        self.info = info or process_info()

    @classmethod
    def from_env(cls):
        return cls() if os.environ.get(RANK_MARKERS_ENV) else None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._write(args, state, model)  # step 0: the weights every process starts from

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self._write(args, state, model)

    def _write(self, args, state, model):
        if self.folder is None or model is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        total, count = _weights_checksum(model)
        row = {"rank": self.info.rank, "world_size": self.info.world_size, "step": state.global_step,
               "process_index": getattr(args, "process_index", None), "trainable_abs_sum": total,
               "trainable_params": count}
        with open(self.folder / f"rank{self.info.rank}.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")


def rank_marker_callbacks() -> list:
    """[RankMarker()] when GRPO_KIT_RANK_MARKERS is set, else [] (what lab.scale_out adds to the kit's callbacks)."""
    marker = RankMarker.from_env()
    return [marker] if marker is not None else []

