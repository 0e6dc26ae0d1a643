"""The instructor guide's class plans as data: the one home of which notebook runs when, on which runtime, with which
values typed into its parameters cell (the first code cell, read by the setup cell right after it).

docs/instructor-guide.md shows these tables, written by `scripts/make_class_plans.py` (`--check` fails when the
guide differs); tests/test_class_plans.py checks that every name a plan sets is a parameter its notebook reads, and
tests/test_notebooks.py executes the 90-minute plan's CPU equivalent (the notebooks that share the class's run folder)
top to bottom with papermill, in the plan's order, in one kit folder.

A plan's values are the T4 class's. Its CPU equivalent (what CI runs) is the same plan with PRESET = "cpu" and
smaller sizes only (CPU_SIZES, and a block's own `cpu` values such as MAX_STEPS): never another run folder, reward
or switch, so what CI executes is what the class does.

No T4 time of the kit is measured. The T4 times the guide gives are estimates scaled from one logged T4 run
(REFERENCE_RUN, below) by t4_seconds_per_step, and labelled as such.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from helpers.config import PRESETS, Preset
from helpers.memory.architectures import MODELS, model_key
from helpers.teaching.exercises.registry import number as ex  # ex("brevity_reward") -> its number in 04

T4, CPU = "T4", "CPU"

TIMES_FILE = Path(__file__).resolve().parents[2] / "results" / "measured-times.json"


def measured_times(path: Path = TIMES_FILE) -> dict:
    """{name: seconds, or [low, high]} from results/measured-times.json, where each measured time is typed once beside
    its command, machine and date: the build renders them into lessons and docs, the plans below quote them."""
    return {name: entry["seconds"] for name, entry in json.loads(path.read_text())["times"].items()}


def _min_s(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


TIME_FORMATS = {None: lambda s: f"{s} s",  # as measured: 53 s, 441.8 s, 150.0 s
                "round": lambda s: f"{round(s)} s",  # 117.9 -> 118 s
                "min": _min_s,  # 441.8 -> 7 min 22 s
                "minutes": lambda s: f"{s / 60:.1f} minutes"}  # 150.0 -> 2.5 minutes
TIMES = measured_times()


def time_text(name: str, how: str | None = None, times: dict | None = None) -> str:
    """A measured time as the docs write it: time_text("cpu_preset_run", "min") -> "7 min 22 s"; a [low, high] pair
    -> "118-128 s". KeyError naming the known times or filters."""
    times = TIMES if times is None else times
    if name not in times:
        raise KeyError(f"no measured time {name!r} in {TIMES_FILE.name} (times: {', '.join(sorted(times))})")
    if how not in TIME_FORMATS:
        raise KeyError(f"no time filter {how!r} (filters: {', '.join(str(k) for k in TIME_FORMATS if k)})")
    value, fmt = times[name], TIME_FORMATS[how]
    if isinstance(value, list):
        low, high = (fmt(v).removesuffix(" s") for v in value)
        return f"{low}-{high} s" if how in (None, "round") else f"{fmt(value[0])} to {fmt(value[1])}"
    return fmt(value)


def time_span(name: str, how: str | None = None) -> str:
    """A measured time as a fact span of the guide (`<!--{{time.NAME|how}}-->53 s<!--/-->`), which
    scripts/make_notebooks.py rewrites whenever results/measured-times.json changes."""
    return f"<!--{{{{time.{name}{'|' + how if how else ''}}}}}-->{time_text(name, how)}<!--/-->"

# What a block asks of the students (or of you):
SETUP = "setup"        # open the notebook's badge, type `parameters`, run the parameters and setup cells only (install)
RUN = "run"            # type `parameters` (or check them), then Runtime > Run all: CI executes the notebook here
SHOW = "show"          # you run it on your screen while they watch: CI executes it here too
CONTINUE = "continue"  # back to a notebook that is already running (watch, answer its exercises): nothing new runs
TALK = "talk"          # no notebook: a break, a recap
STEPS = (SETUP, RUN, SHOW, CONTINUE, TALK)
EXECUTED = (RUN, SHOW)  # the steps whose notebook the CPU equivalent executes, top to bottom

# The parameters the CPU equivalent may change: sizes only (how much runs), never what runs or where.
SIZE_PARAMETERS = ("MAX_STEPS", "EVAL_SIZE", "NUM_GENERATIONS", "BATCH_SIZE", "MAX_COMPLETION_LENGTH",
                   "EVAL_MAX_NEW_TOKENS", "PASS_K_SAMPLES", "RERUN_STEPS")
# Every CPU-equivalent block: the embedded model (no GPU in CI) at CI's tiny sizes (tests/test_notebooks.py's TINY).
# These are parameters of the shared setup cell, so every notebook reads them.
CPU_SIZES = {"PRESET": "cpu", "EVAL_SIZE": 4, "NUM_GENERATIONS": 4, "BATCH_SIZE": 4, "MAX_COMPLETION_LENGTH": 32,
             "EVAL_MAX_NEW_TOKENS": 32}

# The parameters cell's names for the preset fields they override (helpers.notebook_setup.SETUP_CELL passes them).
PRESET_FIELDS = {"MAX_STEPS": "max_steps", "EVAL_SIZE": "eval_size", "NUM_GENERATIONS": "num_generations",
                 "BATCH_SIZE": "per_device_train_batch_size", "MAX_COMPLETION_LENGTH": "max_completion_length",
                 "EVAL_MAX_NEW_TOKENS": "eval_max_new_tokens"}


@dataclass(frozen=True)
class Block:
    """One block of a plan: `minutes` long (0: homework), one notebook on one runtime, what to type, what to do."""

    minutes: int
    notebook: str | None  # a key of helpers.colab.LESSONS; None for a break or a recap
    runtime: str | None   # T4 or CPU (the Colab runtime its badge opens); None without a notebook
    step: str             # one of STEPS
    does: str             # what the instructor does and says
    parameters: dict = field(default_factory=dict)  # typed into the parameters cell (before the setup cell): T4 class
    cpu: dict = field(default_factory=dict)         # this block's own CPU-equivalent sizes (e.g. MAX_STEPS)
    homework: bool = False
    reads_run: bool = False  # it shows 05's finished run (06, 05's results): it starts after 05's slowest estimate

    def cpu_parameters(self) -> dict:
        """The CPU equivalent's parameters: the plan's, with PRESET = "cpu" and the sizes changed."""
        return {**self.parameters, **CPU_SIZES, **self.cpu}


@dataclass(frozen=True)
class Plan:
    key: str
    title: str
    minutes: int  # the class blocks add up to this
    blocks: tuple[Block, ...]

    @property
    def in_class(self) -> tuple[Block, ...]:
        return tuple(b for b in self.blocks if not b.homework)

    @property
    def homework(self) -> tuple[Block, ...]:
        return tuple(b for b in self.blocks if b.homework)

    def executed(self) -> list[tuple[str, dict]]:
        """What the CPU equivalent executes, in order: (notebook, parameters)."""
        return [(b.notebook, b.cpu_parameters()) for b in self.blocks if b.step in EXECUTED]

    def starts(self) -> list[int]:
        """The minute each in-class block starts at."""
        return [sum(b.minutes for b in self.in_class[:i]) for i in range(len(self.in_class))]

    def t4_run_done_by(self) -> float:
        """The minute by which the class's T4 run (its last in-class 05 RUN block) ends at the slowest estimate:
        the block's end (Run all pressed at the latest) plus t4_minutes' high figure."""
        i = max(i for i, b in enumerate(self.in_class) if b.notebook == "05_train" and b.step == RUN)
        block = self.in_class[i]
        return self.starts()[i] + block.minutes + t4_minutes(block.parameters)[1]

    def too_early(self) -> list[str]:
        """The blocks that show 05's finished run before its slowest estimate has it finished (none, in a good plan)."""
        done_by = self.t4_run_done_by()
        return [f"{b.notebook} at minute {start} (05 may run until minute {done_by:.0f})"
                for start, b in zip(self.starts(), self.in_class) if b.reads_run and start < done_by]


# ------------------------------------------------------------------------------------------- T4 estimates


@dataclass(frozen=True)
class ReferenceRun:
    """A GRPO run on a Colab T4 whose time was logged: what the kit's T4 times are scaled from."""

    source: str
    model: str                 # a key of helpers.memory.architectures.MODELS
    steps: int
    train_seconds: float
    completions_per_step: int
    max_completion_length: int
    mean_completion_length: float
    lora_rank: int
    load_seconds: float        # from its first to its last vLLM log line while loading


# The output saved in Unsloth's GRPO notebook for Qwen2.5-3B (its vLLM log lines are dated 02-06, Unsloth 2025.2.4,
# vLLM 0.7.1, TRL 0.14 era): "GPU: Tesla T4", 1 prompt x 8 completions of at most 200 tokens per step (mean 183.4
# over the 250 logged steps), LoRA rank 64 ("Number of trainable parameters = 119,734,272", which
# MODELS["qwen2.5-3b"].lora_params(64) reproduces), and TrainOutput(global_step=250, train_runtime=6053.7959).
REFERENCE_RUN = ReferenceRun(
    source="unslothai/notebooks, nb/Qwen2.5_(3B)-GRPO.ipynb, the output of its trainer.train() cell",
    model="qwen2.5-3b", steps=250, train_seconds=6053.7959, completions_per_step=8, max_completion_length=200,
    mean_completion_length=183.4, lora_rank=64, load_seconds=137.0)


def completions_per_step(preset: Preset) -> int:
    return preset.per_device_train_batch_size * preset.gradient_accumulation_steps


def t4_seconds_per_step(preset: Preset | None = None, ref: ReferenceRun = REFERENCE_RUN) -> tuple[float, float]:
    """(low, high) seconds per GRPO step of `preset` (default: the t4 preset) on a T4, scaled from `ref`.

    high: the reference run's seconds per step x the completion tokens a step may sample, relative to the
    reference's (completions per step x max_completion_length): as if the smaller model were no faster per token.
    low: high x the parameter ratio of the two models (helpers.memory.architectures), as if every step's time
    scaled with the model's size. An estimate either way: another vLLM, TRL and LoRA rank than the reference's.
    """
    preset = preset or PRESETS["t4"]
    per_step = ref.train_seconds / ref.steps
    tokens = (completions_per_step(preset) * preset.max_completion_length) / (
        ref.completions_per_step * ref.max_completion_length)
    size = MODELS[model_key(preset.model_name)].total_params / MODELS[ref.model].total_params
    high = per_step * tokens
    return high * size, high


def t4_eval_seconds_at_most(questions: int, preset: Preset | None = None, ref: ReferenceRun = REFERENCE_RUN) -> float:
    """An upper bound for one greedy evaluation of `questions` held-out questions on a T4: it samples
    questions x eval_max_new_tokens tokens at most, costed as training steps (high estimate) sampling as many, although
    a step also trains and evaluation batches every question in one vLLM call."""
    preset = preset or PRESETS["t4"]
    step_tokens = completions_per_step(preset) * preset.max_completion_length
    return questions * preset.eval_max_new_tokens / step_tokens * t4_seconds_per_step(preset, ref)[1]


def t4_preset(parameters: dict) -> Preset:
    """The t4 preset with a block's parameters applied (the names the setup cell passes to setup.prepare)."""
    overrides = {PRESET_FIELDS[k]: v for k, v in parameters.items() if k in PRESET_FIELDS and v is not None}
    return PRESETS["t4"].with_overrides(**overrides)


def t4_training_estimate(parameters: dict, from_step: int = 0) -> dict:
    """The T4 estimate (minutes) of running 05 with these parameters: load, evaluation before (none when the run
    continues: its before.json is reused), the steps from `from_step` on, evaluation after."""
    preset = t4_preset(parameters)
    low, high = t4_seconds_per_step(preset)
    steps = preset.max_steps - from_step
    return {"load": REFERENCE_RUN.load_seconds / 60,
            "before_at_most": 0.0 if from_step else t4_eval_seconds_at_most(preset.eval_size, preset) / 60,
            "steps": steps, "train": (low * steps / 60, high * steps / 60),
            "after_at_most": t4_eval_seconds_at_most(preset.eval_size, preset) / 60}


def t4_minutes(parameters: dict, from_step: int = 0) -> tuple[float, float]:
    """(low, high) minutes of the whole 05 run on a T4 (estimate): low = load + the steps at the low rate (the
    evaluations cost little when generation is fast); high = load + both evaluations' upper bounds + the steps at the
    high rate. The guide prints both; a plan waits for high."""
    e = t4_training_estimate(parameters, from_step=from_step)
    return (e["load"] + e["train"][0],
            e["load"] + e["before_at_most"] + e["train"][1] + e["after_at_most"])


# ------------------------------------------------------------------------------------------------ the plans

_05_CLASS = {"MAX_STEPS": 60, "EVAL_SIZE": 50}
_06_CLASS = {"EVAL_SIZE": 50, "PASS_K_SAMPLES": 2}
_05_CPU = {"MAX_STEPS": 2, "RERUN_STEPS": 2}  # RERUN_STEPS: 08's loop in 05's rerun exercise (12 steps in class)
_05_HOMEWORK_CPU = {"MAX_STEPS": 4, "RERUN_STEPS": 2}

NINETY_MINUTES = Plan("90-minutes", "90 minutes", 90, (
    Block(5, "05_train", T4, SETUP, parameters=_05_CLASS, cpu=_05_CPU, does=(
        "Everyone opens **05** from its student badge (it asks Colab for a T4), types the two values into the "
        "parameters cell and runs **only the parameters and setup cells**. The setup cell installs the GPU stack and "
        "restarts the session: run the same two cells again; the second time it installs nothing and asks for Google "
        "Drive access (allow it: the run folder lives on Drive). 05 is the only notebook today that uses a GPU.")),
    Block(10, "01_setup", CPU, SHOW, does=(
        "From your screen while the installs run: the course map; RL with verifiable rewards and what GRPO changes "
        "from PPO (01's one page: the group's mean is the baseline, no value model); the runtime report and the "
        "guards.")),
    Block(20, "04_rewards", CPU, RUN, does=(
        "Students open **04** in a second tab (a CPU runtime, its own short install) and run it top to bottom: the "
        "five rewards, the playground, the hacking table, GRPO's advantages with the sliders (discussion question 1). "
        f"Exercises {ex('my_correctness_reward')} and {ex('my_strict_format_reward')}: they write the correctness and strict-format "
        f"rewards. Exercise {ex('brevity_reward')} saves their `brevity_reward` to `my_rewards.py` in the run folder on "
        f"Drive: 05 trains with it. Exercise {ex('my_advantages')} if time "
        "allows.")),
    Block(5, "05_train", T4, RUN, parameters=_05_CLASS, cpu=_05_CPU, does=(
        "Back to the 05 tab: check that the parameters cell still says `MAX_STEPS = 60` and `EVAL_SIZE = 50`, then "
        "**Runtime > Run all**. The setup cell installs nothing now; step 1 prints `your rewards from "
        ".../my_rewards.py: brevity_reward`. Loading, the evaluation before, the steps and the evaluation after then "
        f"run on their own. Exercises {ex('make_config')} and {ex('make_trainer')} (the `GRPOConfig` fields and the `GRPOTrainer` call) come before "
        "the training cell: left blank, their check cells show what is missing and 05 goes on with the kit's own config "
        "and trainer (the ones `helpers.train` builds; no other message says so); students fill them in at home and "
        "run the check cells.")),
    Block(15, "05_train", T4, CONTINUE, does=(
        "While it trains, read the live dashboard together: reward per function, spread, zero-spread groups, length "
        "(discussion questions 2, 4 and 5). Say in advance that the reward stays flat at first: Unsloth's 3B run "
        "averaged about 0 over its first 50 steps. 05's later cells, its exercises included, wait behind the "
        "training cell: they run when it ends.")),
    Block(17, "07_memory_lab", CPU, RUN, does=(
        "While 05 trains (its slowest estimate runs to the end of this block): a third tab, a CPU runtime (close 04's "
        "tab first: its reward is saved). 07: where the T4's memory goes, predicted from the architecture, next to "
        "the dashboard's memory panel; the sweep and the OOM doctor; exercise "
        f"{ex('largest_completion_length')}.")),
    Block(12, "06_evaluate_and_save", CPU, RUN, parameters=_06_CLASS, reads_run=True, does=(
        f"05 has finished by now, even at the slowest estimate. A CPU runtime (07's tab can go): students type the "
        f"two values, answer exercise {ex('my_pass_at_k')} (pass@k by hand) in its "
        "cell, then Runtime > Run all. 06 first shows the class run from its files on Drive (the T4 lab's own "
        "numbers and answers), then works on the embedded model in a folder of its own: "
        "`TRAIN_IF_MISSING` (on by default) trains a 1-step run there (mechanics, not learning), then greedy accuracy "
        "before and after on 50 questions, pass@k with 2 samples per question, save and reload. The exports at the "
        "end are opt-in and stay off. Discussion question 6 while it runs: its cells take about "
        f"{time_span('nb06_class', 'minutes')} on 2 cores ([measured](#time-per-notebook)).")),
    Block(4, "05_train", T4, CONTINUE, reads_run=True, does=(
        "Back to 05: its summary gives accuracy before and after on the same 50 GSM8K questions, `dashboard.png` the "
        "whole run, and the exercises after the training cell have run (answer them at home, then re-run "
        f"their check cells). Exercise {ex('learned_or_not')} diagnoses four of the kit's own measured CPU runs, not this run's "
        "dashboard. If the run has not finished (slower than the estimate), nothing is lost: its checkpoints are on "
        "Drive and the homework continues it.")),
    Block(2, None, None, TALK, does=(
        "Recap, and the homework: extend the class run to 250 steps, then 03; after the course, 08 (one GRPO "
        "step from scratch) and the capstone, 09.")),
    Block(0, "05_train", T4, RUN, homework=True, parameters={"MAX_STEPS": 250, "EVAL_SIZE": 50},
          cpu=_05_HOMEWORK_CPU, does=(
              "**Extend the class run.** Open 05 on a T4, type `MAX_STEPS = 250` and the class's `EVAL_SIZE = 50` "
              "(nothing else), Runtime > Run all. It finds the run on Drive, says `took 60 steps and max_steps is now "
              "250: continuing it` and what happens to the learning rate (`learning rate: the cosine schedule is "
              "re-planned for 250 steps, not restarted`: steps 61-250 get a 250-step run's rates, from 4.46e-06, "
              "without a new warm-up), resumes from `checkpoint-60`, keeps the class summary as "
              "`summary-step-60.json` and reuses the evaluation before training. (A run stopped before step 60 is "
              "resumed the same way.)")),
    Block(0, "03_data", CPU, RUN, homework=True, does="03 on a CPU runtime: the data, the answer format, prompt lengths."),
))

_05_HALF_DAY = {"MAX_STEPS": 150, "EVAL_SIZE": 100}

HALF_DAY = Plan("half-day", "Half-day workshop (3.5 hours with a break)", 210, (
    Block(10, "05_train", T4, SETUP, parameters=_05_HALF_DAY, cpu=_05_CPU, does=(
        "Everyone opens **05** on a T4, types the two values and runs only the parameters and setup cells (the GPU "
        "install, the restart, the same two cells again, Drive access), while you introduce the day.")),
    Block(20, "01_setup", CPU, RUN, does=(
        "01 on a CPU runtime: RL with verifiable rewards, GRPO against PPO, the runtime report, the guards "
        f"(what does each message tell them to do?); exercise {ex('right_wrong_advantages')}.")),
    Block(20, "02_load_model", CPU, RUN, does=(
        "02: the embedded model and its LoRA adapter, loaded with the calls 05 makes through Unsloth on the T4; "
        f"process memory; what the untrained model answers; exercise {ex('trainable_fraction')}.")),
    Block(20, "03_data", CPU, RUN, does=(
        "03: the columns, the answer format, why a worked example helps a small model, prompt lengths and "
        f"`filter_long_prompts`; exercise {ex('gsm8k_to_row')} (they write the GSM8K mapping) and {ex('questions_per_run')}.")),
    Block(30, "04_rewards", CPU, RUN, does=(
        "04: the rewards, the playground, reward hacking, the advantage sliders (discussion questions 1 and 3); "
        f"exercises {ex('my_correctness_reward')} and {ex('my_strict_format_reward')} (they write the correctness and strict-format "
        f"rewards); exercise {ex('brevity_reward')} saves `brevity_reward` to the run folder on Drive for 05; exercise "
        f"{ex('my_advantages')}.")),
    Block(5, "05_train", T4, RUN, parameters=_05_HALF_DAY, cpu=_05_CPU, does=(
        "Back to 05: check `MAX_STEPS = 150` and `EVAL_SIZE = 100`, then **Runtime > Run all** before the break. "
        "It trains with the students' own reward.")),
    Block(15, None, None, TALK, does="Break. 05 loads, evaluates and trains meanwhile."),
    Block(20, "05_train", T4, CONTINUE, does=(
        "05's live dashboard (discussion questions 2, 4 and 5). Disconnect drill once 05 has written its first "
        "checkpoint (it printed `a checkpoint every N steps`): Runtime > Restart session, then Run all: it resumes "
        "from that checkpoint on Drive, with a new model load and the evaluation before reused. 05's exercises wait "
        "behind the training cell.")),
    Block(20, "08_grpo_step", CPU, RUN, does=(
        "08 on a CPU runtime while 05 trains: one GRPO step from scratch on the embedded model (a group sampled with "
        f"`model.generate`, its rewards and advantages, one optimizer step); exercise {ex('policy_loss')}: they write the loss, "
        "checked against TRL's own, and watch the rewarded completion become likelier.")),
    Block(20, "07_memory_lab", CPU, RUN, does=(
        f"07 on a CPU runtime: what the T4's memory holds, the sweep, the OOM doctor; exercise "
        f"{ex('largest_completion_length')}.")),
    Block(20, "06_evaluate_and_save", CPU, RUN, parameters=_06_CLASS, reads_run=True, does=(
        f"05 has finished by now, even at the slowest estimate. 06 on a CPU runtime: exercise {ex('my_pass_at_k')} "
        "answered first, then Run all: the class run's numbers from Drive, a 1-step run of the embedded model in a folder of its own (mechanics only), greedy accuracy before and after, pass@k with 2 samples, save and "
        f"reload (about {time_span('nb06_class', 'minutes')} on 2 cores, [measured](#time-per-notebook)); the exports "
        "stay off unless you want "
        "to show one. Discussion questions 6 and 7.")),
    Block(10, "05_train", T4, CONTINUE, reads_run=True, does=(
        "05's results: accuracy before and after on 100 GSM8K questions, the dashboard of the whole run, exercises "
        f"after the training cell ({ex('learned_or_not')}: four of the kit's measured CPU runs); recap and homework.")),
    Block(0, "05_train", T4, RUN, homework=True, parameters={"MAX_STEPS": 250, "EVAL_SIZE": 100},
          cpu=_05_HOMEWORK_CPU, does=(
              "Extend the workshop's run: 05 on a T4 with `MAX_STEPS = 250` and `EVAL_SIZE = 100`, Run all: it "
              "continues from `checkpoint-150` on Drive.")),
    Block(0, "09_capstone", CPU, RUN, homework=True, does=(
        "The capstone, 09 on a CPU runtime: their own `train_grpo.py` from a blank file, checked in the notebook "
        f"(2 GRPO steps of the embedded model, then the adapter measured: {time_span('capstone_check')} on an idle "
        "2-core machine, 2026-11-29).")),
))

PLANS = {plan.key: plan for plan in (NINETY_MINUTES, HALF_DAY)}
