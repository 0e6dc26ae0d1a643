"""Helpers for the GRPO course kit: every notebook and command calls into this package.

The core, flat (each imports only the core below it):
    messages.py        the kit's one voice: every [grpo-kit] line, through logging's "grpo_kit" (silence or redirect it)
    backend.py         Backend, the preset's backend (cpu, unsloth, trl-vllm): what it needs (a GPU, Unsloth, vLLM)
    runtime.py         what machine this is: Colab, the GPU, free memory (GiB), bf16; the guards that refuse with the fix
    config.py          the presets (cpu, t4, multi-GPU), their validation, the GRPOConfig each becomes on a runtime
    config_types.py    a setting's value as its annotated type: text parsed, a wrong type refused with the fix
    prompts.py         the answer format, defined once: system prompt, tags, worked example
    data.py            GSM8K and offline synthetic questions; which questions a preset trains and is evaluated on
    rewards.py         reward functions with TRL's calling contract; numeric answer checking
    model.py           load (Unsloth + vLLM on GPU, the embedded model + peft on CPU) and one generate() for both
    cli.py             command-line flags generated from dataclass fields (helpers.train, helpers.memory)
    cpu_compat.py      the CPU maths: a plain-PyTorch log-prob kernel (no Triton), the shared-prompt loss, bf16 sampler
    cpu_decode.py      the CPU path's decoding loop: generate's tokens without its per-token overhead
    speedups.py        the CPU path's speed-ups by name: a switch each (--cpu-speedups-off), the ones a run used
    evaluation.py      greedy accuracy, format rate and pass@k, before and after training
    reuse.py           a result computed once here, read back under the key of what decides it (said when reused)
    sharing.py         save the adapter, merged and GGUF exports, Hub upload (token never printed); find an adapter
Front doors (commands and the notebooks' setup):
    train.py           python -m helpers.train: the command line of the run (helpers.run.pipeline does the work)
    evaluate.py        python -m helpers.evaluate: before/after and pass@k of a saved run
    capstone.py        python -m helpers.capstone: checks a student's train_grpo.py
    capstone_watch.py  its watch in the student's Python: train()'s steps by its own callback, the pipeline stopped
    notebook_setup.py  the setup cell of every notebook: its text and prepare() (the preset, the guards, the run folder)
    colab.py           its Colab half: which lessons need the T4, find or clone the kit, install once, Drive
run/        the run's wing: everything between the setup cell (or the command line) and the results:
    pipeline.py        the named steps (start, load_model, ... finish) that the CLI and notebook 05 both call
    options.py         RunOptions: how to run (folder, checkpoints, resume, dashboard), each a flag of helpers.train
    guard.py           the one check before any model loads: validate, predict memory, refuse with the fix, Unsloth first
    folder.py          the run folder: one process at a time (a lock), fresh start, resume or refusal; config.json
                       written, read and compared
    reward_specs.py    a student's reward functions: --reward module:name (before TRL is imported), 05's my_rewards.py
    trl_patches.py     every patch on TRL's private methods (one table, one order) and every read of TRL's private state
    metrics.py         metrics.jsonl per step, the reward curve
    dashboard.py       live curves, samples and warnings while training
    health.py          NaN/inf in loss, gradients or rewards, or an unusable reward output: stop at that step, say why
    checkpoints.py     resumable checkpoints, resume after a disconnect, Google Drive
    extensions.py      the one extension point: what the lab (lab/) plugs into a run; a course run is one process
memory/     GPU memory, predicted and measured (python -m helpers.memory):
    __init__.py        the names the kit imports from the memory model, gathered
    architectures.py   the models (shapes from config.json) and GPUs it knows, and the lookups
    estimate.py        the memory model: formulas, settings and estimate(), GRPO's peak from architecture and settings
    plot.py            the estimate as stacked bars against the budget and the card
    cli.py             python -m helpers.memory: a Preset field has helpers.train's flag, the model's own beside
    monitor.py         memory/* figures added to every log
    measured.py        the GPU runs the lab recorded (results/gpu/), beside the prediction for the same settings
    oom_doctor.py      turns an out-of-memory error into the cheapest fixes that fit
teaching/   what only the lessons and the instructor guide use:
    course.py          what a lesson prints or plots that no library call does
    reward_lab.py      the reward playground (ipywidgets)
    grpo_math.py       GRPO's advantages and policy loss, exactly as TRL computes them, with a slider
    class_plans.py     the instructor guide's class plans as data; T4 times scaled from a logged T4 run
    measured_runs.py   the kit's own measured CPU runs (results/cpu-runs/), read as lesson data
    reruns.py          05's rerun exercise: 08's loop with one setting changed, its curve kept and read back
teaching/exercises/  self-checking exercises, one module per lesson (one source: the lessons' solution cells):
    __init__.py        each lesson's module (ex = nb04), imported when first asked for
    core.py            Exercise (ex.qN.check(...), .hint(), .solution()), CheckResult, Fail: what all judges share
    registry.py        each exercise's number, task and solution, from registry.json (built from the lessons)
    nb01.py            01's judge: the advantages of a right and a wrong answer
    nb02.py            02's judge: the trainable fraction (4-bit weights as peft counts them)
    nb03.py            03's judges: the GSM8K-to-row mapping, the questions a run draws
    nb04.py            04's judges: two rewards against the kit's, a prediction, brevity, advantages
    nb05.py            05's judges: GRPOConfig/GRPOTrainer calls, zero spread, measured runs, clip, KL, beta
    nb05_vllm.py       05's sizing judge: vLLM's KV cache and gpu_memory_utilization, each usual mistake named
    nb06.py            06's judge: pass@k
    nb07.py            07's judge: the largest completion length that fits
    nb08.py            08's judge: the policy loss, value and gradient against TRL's own
"""

__version__ = "0.1.0"

import os as _os

# PyTorch's CPU threads spin while waiting for each other. When anything else uses a core (a notebook kernel,
# a second job, CI's other process) each of the many small ops in token-by-token generation stalls: measured on
# a 2-core machine, one decoding step of 50 sequences took 6.9 s with the default and 0.41 s with PASSIVE.
# It must be set before torch is imported, which is why it lives here; it changes nothing on the GPU.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
