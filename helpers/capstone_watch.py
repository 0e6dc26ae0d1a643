"""The capstone checker's trip-wire, inside the student's interpreter (helpers.capstone runs the script under
`_bootstrap`): the steps the student's own trainer.train() runs, counted by a TrainerCallback only this module holds,
the LoRA B matrices before and after them, the reward functions' origin, each batch TRL scores, the training
questions, the rewards run on lesson 04's completions before train() (a run that breaks a rule then is stopped
there), and every use of the kit's pipeline however it is reached (an import by any mechanism, its source read or
exec'd, a Python subprocess), noted and stopped. The script could write this report: helpers.capstone judges the
saved adapter itself, after the script ended."""

from __future__ import annotations

import builtins
import contextlib
import functools
import importlib
import importlib.abc
import importlib.util
import io
import itertools
import json
import os
import re
import runpy
import sys
import sysconfig
import traceback
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
HELPERS = KIT / "helpers"
REPORT = "capstone_report.json"
KIT_USE = "capstone_kit_use.jsonl"  # the kit's pipeline used, one line each, as it happens
TRAINED = "capstone_trained_lora_b.safetensors"  # the LoRA B matrices when train() ended
CASES = "capstone_reward_cases.json"  # lesson 04's labelled completions, written by the checker for _probe
# What a capstone script may import from the kit: the data, the answer format, the embedded model's folder, the
# CPU stand-in for TRL's Triton kernel. The rest is the pipeline the student is asked to write.
ALLOWED = ("helpers", "helpers.data", "helpers.prompts", "helpers.model", "helpers.run.trl_patches",
           "helpers.cpu_compat")


def _is_module(name: str) -> bool:
    parts = name.split(".")
    return (KIT.joinpath(*parts).with_suffix(".py").is_file()
            or (KIT.joinpath(*parts) / "__init__.py").is_file())


def _named_modules(module: str, names) -> list[str]:
    """The kit modules `from module import names` reaches: `from helpers import train` names helpers.train, a
    submodule; `from helpers.data import gsm8k_rows` names helpers.data itself."""
    return [f"{module}.{name}" for name in names or () if _is_module(f"{module}.{name}")] or [module]


def _allowed(module: str) -> bool:
    """An allowed module, or a package above one (helpers.run imports none of its modules): `from helpers.run import
    pipeline` is judged by the module it names, helpers.run.pipeline."""
    return module in ALLOWED or any(allowed.startswith(module + ".") for allowed in ALLOWED)



_HELPERS_PREFIX = str(HELPERS) + os.sep
CHECKER = ("helpers.capstone", "helpers.capstone_watch")  # the checker's own frames: never the student's
_STDLIB = tuple({sysconfig.get_paths()["stdlib"] + os.sep, os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep})
_LIBRARY_DIRS = ("site-packages", "dist-packages")
# What starts a process, and which of the audit event's arguments is its command line.
_SPAWN_ARG = {"subprocess.Popen": 1, "os.system": 0, "os.exec": 1, "os.posix_spawn": 1, "os.spawn": 2}
_FORGING = ("compile", "code.__new__")  # their second argument: the file name the code will carry
_EVENTS = frozenset({"open", "exec", *_FORGING, *_SPAWN_ARG})
_PYTHON_RE = re.compile(r"python[\d.]*w?(\.exe)?")


@functools.lru_cache(maxsize=4096)
def _kit_module_of(filename: str) -> str | None:
    path = filename if filename.startswith(_HELPERS_PREFIX) else os.path.realpath(filename)
    if not path.startswith(_HELPERS_PREFIX) or not path.endswith((".py", ".pyc")):
        return None
    parts = [p for p in Path(path).relative_to(KIT).parts if p != "__pycache__"]
    stem = parts[-1].split(".")[0]  # train.py, train.cpython-311.pyc
    return ".".join(parts[:-1] + ([] if stem == "__init__" else [stem]))


def kit_module(filename) -> str | None:
    """The helpers module a source or compiled file is (helpers/run/pipeline.py -> helpers.run.pipeline), else None."""
    try:
        filename = os.fsdecode(filename)
    except TypeError:  # a file descriptor
        return None
    return _kit_module_of(filename) if "helpers" in filename else None


def _library_file(filename: str) -> bool:
    return filename.startswith(_STDLIB) or any(d in Path(filename).parts for d in _LIBRARY_DIRS)


def _python_command(argv) -> tuple[str, bool]:
    """A process's command line as text, and whether it starts a Python interpreter."""
    try:
        words = os.fsdecode(argv).split() if isinstance(argv, (str, bytes, os.PathLike)) else [
            os.fsdecode(a) for a in argv]
    except TypeError:
        return str(argv), False
    python = any(_PYTHON_RE.fullmatch(os.path.basename(w)) or w == sys.executable for w in words)
    return " ".join(words), python


class _Recorder:
    """Lives in the student's interpreter: what the script built and trained, counted by a callback only the
    checker holds, and every use of the kit's pipeline, however it was reached."""

    def __init__(self, folder: Path):
        self.folder, self.report = folder, folder / REPORT
        self.trainers, self.used = [], []
        # Kit modules whose code may run: the allowed ones, and those they import themselves (helpers.model imports
        # helpers.runtime). The rest of helpers/ is the pipeline: refused whoever imports, reads or execs it.
        self.trusted = {m for m in ALLOWED if not (KIT.joinpath(*m.split(".")) / "__init__.py").is_file()}
        self.watching, self._busy = True, False

    def note(self, text: str) -> None:
        """One line of what the script is doing, for the checker to show as it happens (progress)."""
        with open(self.report.with_suffix(".progress"), "a") as f:
            f.write(text + "\n")

    # -- the kit's pipeline, however it is reached
    @staticmethod
    def entry(frame) -> str | None:
        """The kit module the running code entered helpers/ through: the outermost kit frame (the checker's own
        frames aside). None: no kit code on the stack, so the script (or exec'd text) is asking."""
        names = []
        while frame is not None:
            names.append(frame.f_code.co_filename)
            frame = frame.f_back
        return next((m for m in map(kit_module, reversed(names)) if m and m not in CHECKER), None)

    @staticmethod
    def requester(frame) -> str:
        """The innermost file that is neither Python's own nor the checker's: whose code asked."""
        while frame is not None:
            name = frame.f_code.co_filename
            if not name.startswith("<frozen") and not name.startswith(_STDLIB) and kit_module(name) not in CHECKER:
                return name
            frame = frame.f_back
        return "the script"

    def refuse(self, kind: str, module: str, frame, detail: str = "") -> None:
        """Note a use of the kit's pipeline (in a file too: a forked child's note outlives it) and stop it."""
        use = {"kind": kind, "module": module, "requester": self.requester(frame), "detail": detail}
        self.used.append(use)
        with open(self.folder / KIT_USE, "a") as f:
            f.write(json.dumps(use) + "\n")
        error = ImportError if kind == "import" else PermissionError
        raise error(f"the capstone checker refuses {kind} of {module}: the kit's pipeline is not yours to run")

    def check_import(self, name: str, fromlist, frame) -> None:
        if name != "helpers" and not name.startswith("helpers."):
            return
        modules = [m for m in _named_modules(name, fromlist) if not _allowed(m)]
        if not modules or not self.watching:
            return
        if self.entry(frame) in self.trusted:  # the kit's allowed code importing what it needs
            self.trusted.update(modules)
            return
        self.refuse("import", modules[0], frame)

    def audit(self, event: str, args) -> None:
        """sys.addaudithook: a kit file opened (its source read) or its code exec'd, a process started."""
        if not self.watching or self._busy or event not in _EVENTS:
            return
        if event in _FORGING:  # code given a kit file's name (compile, code.replace): the import system's only
            module = kit_module(args[1])
            if module and not sys._getframe(1).f_code.co_filename.startswith("<frozen"):
                self.refuse("forging", module, sys._getframe(1))
            return
        if event in ("open", "exec"):  # every file opened, every module run: only a kit file's costs more
            module = kit_module(args[0] if event == "open" else getattr(args[0], "co_filename", ""))
            if not module or module in self.trusted or _allowed(module) or module in CHECKER:
                return
        self._busy = True  # sys._getframe is itself an audit event
        try:
            frame = sys._getframe(1)
            if event not in _SPAWN_ARG:
                if self.entry(frame) not in self.trusted:
                    self.refuse("reading" if event == "open" else "exec", module, frame)
                return
            command, python = _python_command(args[_SPAWN_ARG[event]])
            if "helpers" in command or (python and not _library_file(self.requester(frame))):
                self.refuse("a subprocess", "another Python", frame, detail=command[:300])
        finally:
            self._busy = False

    def install_import_watch(self) -> None:
        real_import, real_import_module, recorder = builtins.__import__, importlib.import_module, self

        def watched_import(name, globals=None, locals=None, fromlist=(), level=0):
            if level == 0:
                self.check_import(name, fromlist, sys._getframe(1))
            return real_import(name, globals, locals, fromlist, level)

        def watched_import_module(name, package=None):
            self.check_import(name, (), sys._getframe(1))
            return real_import_module(name, package)

        class Watch(importlib.abc.MetaPathFinder):  # importlib's own paths: runpy.run_module, util.find_spec, ...
            def find_spec(self, fullname, path, target=None):
                recorder.check_import(fullname, (), sys._getframe(1))

        builtins.__import__, importlib.import_module = watched_import, watched_import_module
        sys.meta_path.insert(0, Watch())
        sys.addaudithook(self.audit)

    # -- the training, counted by a callback the checker attaches in train()
    def attach(self, trainer, record: dict) -> None:
        """On each train(): a TrainerCallback that counts the steps and reward logs into `record` (state the
        script never sees) and snapshots the LoRA B matrices when training begins and ends."""
        try:
            from transformers import TrainerCallback
        except ImportError:
            return
        recorder = self

        class CapstoneWatch(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                record["lora_begin"] = _lora_b(trainer.model)

            def on_step_end(self, args, state, control, **kwargs):
                record["steps"] += 1
                recorder.note(f"GRPO step {state.global_step}/{state.max_steps} done")

            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and logs.get("reward") is not None:
                    record["reward_logs"].append(float(logs["reward"]))
                    record["reward_std"].append(float(logs.get("reward_std") or 0.0))

            def on_train_end(self, args, state, control, **kwargs):
                begin, end = record.pop("lora_begin", {}), _lora_b(trainer.model)
                record["lora_end"], record["lora_b"] = end, len(end)
                record["lora_b_changed"] = sum(k not in begin or not _same(v, begin[k]) for k, v in end.items())

        trainer.add_callback(CapstoneWatch())

    def _record(self, trainer) -> dict:
        found = next((t for t in self.trainers if t["trainer"] is trainer), None)
        if found is None:
            found = {"trainer": trainer, "train_called": False}
            self.trainers.append(found)
        return found

    def instrument(self, trainer_cls) -> None:
        init, train = trainer_cls.__init__, trainer_cls.train

        @functools.wraps(init)
        def recorded_init(trainer, *args, **kwargs):
            self._record(trainer)
            self.note(f"built {type(trainer).__name__}")
            return init(trainer, *args, **kwargs)

        @functools.wraps(train)
        def recorded_train(trainer, *args, **kwargs):
            record = self._record(trainer)
            record.update(train_called=True, steps=record.get("steps", 0), reward_logs=record.get("reward_logs", []),
                          reward_std=record.get("reward_std", []),
                          reward_funcs=[_origin(f) for f in getattr(trainer, "reward_funcs", None) or []],
                          config={k: getattr(trainer.args, k, None) for k in _CONFIG_FIELDS})
            self.attach(trainer, record)
            _record_batches(trainer, record)
            record["questions"] = _questions(getattr(trainer, "train_dataset", None))
            self.note("trainer.train() started")
            record["probe"] = _probe(trainer, self.folder)  # before the steps: 04's completions need no training
            try:
                if _is_grpo(trainer):  # another trainer is refused for what it is, after the script
                    judge_before_training(record, json.loads((self.folder / CASES).read_text()))
            except CapstoneError:
                self.note("a rule is broken before the first step: stopped, the checker says which")
                raise StoppedEarly() from None
            result = train(trainer, *args, **kwargs)
            self.note(f"trainer.train() returned at step {getattr(getattr(trainer, 'state', None), 'global_step', 0)}")
            return result

        trainer_cls.__init__, trainer_cls.train = recorded_init, recorded_train

    def install_trainer_watch(self) -> None:
        if "transformers.trainer" in sys.modules:
            self.instrument(sys.modules["transformers.trainer"].Trainer)
            return
        recorder = self

        class Finder(importlib.abc.MetaPathFinder):
            def find_spec(self, fullname, path, target=None):
                if fullname != "transformers.trainer":
                    return None
                sys.meta_path.remove(self)
                spec = importlib.util.find_spec(fullname)
                if spec is None or spec.loader is None:
                    return spec
                execute = spec.loader.exec_module

                def exec_module(module):
                    execute(module)
                    recorder.instrument(module.Trainer)

                spec.loader.exec_module = exec_module
                return spec

        sys.meta_path.insert(0, Finder())

    # -- the report
    def _trainer_report(self, t: dict) -> dict:
        trainer = t["trainer"]
        if "lora_end" in t:  # the trained weights, for the checker to compare with the saved adapter
            from safetensors.numpy import save_file

            save_file(t.pop("lora_end"), str(self.folder / TRAINED))
        return {
            "class": f"{type(trainer).__module__}.{type(trainer).__qualname__}",
            "is_grpo": _is_grpo(trainer),
            **{k: v for k, v in t.items() if k not in ("trainer", "lora_begin")},
            "global_step": getattr(getattr(trainer, "state", None), "global_step", 0),
        }

    def write(self, error: BaseException | None) -> None:
        self.watching = False
        trainers = [self._trainer_report(t) for t in self.trainers]
        if isinstance(error, SystemExit):
            code = error.code if isinstance(error.code, int) else (0 if error.code is None else 1)
            failure = None if code == 0 else {"type": "SystemExit", "message": str(error.code), "exit": code}
        elif error is not None:
            failure = {"type": type(error).__name__, "message": str(error), "exit": 1,
                       "traceback": "".join(traceback.format_exception(error))[-3000:]}
        else:
            failure = None
        self.report.write_text(json.dumps({"trainers": trainers, "kit_use": self.used, "failure": failure},
                                          default=str))


_CONFIG_FIELDS = ("max_steps", "gradient_accumulation_steps", "steps_per_generation", "num_iterations",
                  "logging_steps", "num_generations", "scale_rewards", "loss_type", "beta")
MAX_QUESTIONS = 50_000  # the training questions noted for the held-out check (a larger dataset: its first rows)


def _jsonable(value):
    return value if isinstance(value, (str, int, float, bool, type(None), list, dict)) else str(value)


def _record_batches(trainer, record: dict) -> None:
    """Note each batch TRL scores (GRPOTrainer._calculate_rewards: prompts, completions, their token ids, the other
    columns and each reward function's scores), for the checker to measure the saved adapter against."""
    calculate = getattr(trainer, "_calculate_rewards", None)
    record["batches"] = []
    weights = getattr(trainer, "reward_weights", None)
    record["reward_weights"] = [] if weights is None else [float(w) for w in weights]
    if calculate is None:
        return

    @functools.wraps(calculate)
    def recorded(inputs, prompts, completions, completion_ids_list, *args, **kwargs):
        scores = calculate(inputs, prompts, completions, completion_ids_list, *args, **kwargs)
        try:  # the student's run goes on whatever this note meets; the checker then says it saw no scored batch
            keys = [k for k in (inputs[0] if inputs else {}) if k not in ("prompt", "completion", "completion_ids")]
            record["batches"].append({
                "prompts": prompts, "completions": completions,
                "completion_ids": [[int(i) for i in ids] for ids in completion_ids_list],
                "columns": {k: [_jsonable(row[k]) for row in inputs] for k in keys},
                "rewards": scores.detach().float().cpu().tolist()})
        except Exception:  # noqa: BLE001 - see above
            pass
        return scores

    trainer._calculate_rewards = recorded


def question_of(row) -> str | None:
    """The question a dataset row asks: its `question` column, else its prompt's last user message (or the
    prompt itself when it is text)."""
    if isinstance(row.get("question"), str):
        return row["question"]
    prompt = row.get("prompt")
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content") for m in prompt or [] if isinstance(m, dict) and m.get("role") == "user"]
    return users[-1] if users and isinstance(users[-1], str) else None


def _questions(dataset) -> list[str]:
    try:
        rows = (dataset[i] for i in range(min(len(dataset), MAX_QUESTIONS)))
        return [q for q in map(question_of, rows) if q]
    except Exception:  # noqa: BLE001 - an iterable dataset or an odd row: the checker then has no questions to judge
        return []


def reward_cases() -> list[dict]:
    """Pairs of lesson 04's completions ({"label", "text", "gold", "right", "pair"}): each one the kit's correctness
    reward scores right (the truth in 04, helpers.teaching.exercises.nb04), and its twin, the same text with the
    numbers of its last <answer> block changed to a wrong one. Same layout, same length: only the answer differs, so
    only a reward that reads the answer tells a pair apart (every right completion has tags, so comparing 04's right
    ones with its wrong ones would also reward a format-only reward)."""
    from helpers.rewards import correctness_reward
    from helpers.teaching.exercises.nb04 import reward_cases as cases_04

    texts = {(c[0]["content"] if isinstance(c, list) else c, gold): label for label, c, gold, _ in cases_04()[::-1]}
    rows = [{"label": label, "text": text, "gold": gold} for (text, gold), label in texts.items()
            if isinstance(text, str) and "<answer>" in text]
    for r in rows:
        head, tail = r["text"].rsplit("<answer>", 1)
        wrong = str(int(float(r["gold"])) + 1)
        r["twin"] = head + "<answer>" + re.sub(r"\d[\d,.]*", wrong, tail.split("</answer>")[0]) + tail[
            len(tail.split("</answer>")[0]):]
    right = correctness_reward(completions=[r["text"] for r in rows], answer=[r["gold"] for r in rows])
    twins = correctness_reward(completions=[r["twin"] for r in rows], answer=[r["gold"] for r in rows])
    pairs = [r for r, a, b in zip(rows, right, twins) if a > 0 and b == 0]
    return [{"label": r["label"] if ok else f"{r['label']}, its answer changed", "text": r["text" if ok else "twin"],
             "gold": r["gold"], "right": ok, "pair": k} for k, r in enumerate(pairs) for ok in (True, False)]


def _probe(trainer, folder: Path) -> dict:
    """The student's reward functions on the completions helpers.capstone wrote into CASES (lesson 04's labelled
    ones), each called twice (the same completions must get the same scores), in the format TRL gave them (chat or
    text), with the dataset's other columns and each case's gold answer as `answer`."""
    try:
        cases = json.loads((folder / CASES).read_text())
        row = dict(trainer.train_dataset[0])
        chat = not isinstance(row.get("prompt"), str)
        completions = [[{"role": "assistant", "content": c["text"]}] if chat else c["text"] for c in cases]
        golds = [c["gold"] for c in cases]  # in `answer`, and in any column of the row that holds a number (its gold)
        columns = {k: golds if re.fullmatch(r"\s*-?\$?[\d,]+(\.\d+)?\s*", str(v)) else [v] * len(cases)
                   for k, v in row.items() if k not in ("prompt", "completion", "completion_ids")}
        columns["answer"] = golds
        prompts = [row.get("prompt")] * len(cases)
        scores = {}
        for func in getattr(trainer, "reward_funcs", None) or []:
            name = _origin(func)["name"]
            extra = {"completion_ids": [[] for _ in cases], "trainer_state": getattr(trainer, "state", None),
                     "log_extra": lambda *a, **k: None, "log_metric": lambda *a, **k: None}
            scores[name] = [[None if s is None else float(s) for s in func(
                prompts=prompts, completions=completions, **extra, **columns)] for _ in range(2)]
        return {"scores": scores}
    except Exception as err:  # noqa: BLE001 - the student's reward failed on 04's completions: the checker says so
        return {"error": f"{type(err).__name__}: {err}",
                "traceback": "".join(traceback.format_exception(err))[-2000:]}


class CapstoneError(Exception):
    """What is wrong with the script's run, and what to do (check() turns it into a "Not yet" result)."""


class StoppedEarly(BaseException):  # not an Exception: a script's `except Exception` around train() lets it through
    """Raised in place of train() when what is known before training (the questions, the rewards on 04's
    completions) already breaks a rule: the steps would only delay the refusal, which helpers.capstone gives by
    judging the noted record again (judge_before_training), not from this exception."""


def judge_before_training(t: dict, cases: list[dict]) -> None:
    """What refuses a run before its first step: a held-out question, a reward that scores the same completion twice
    differently. (A reward that fails or prefers wrong answers is judged after the run, beside TRL's own errors.)"""
    _judge_questions(t)
    _judge_stable_rewards(t, cases)


def _judge_stable_rewards(t: dict, cases: list[dict]) -> None:
    """Each reward gave 04's completions the same scores on its two calls: random numbers are refused."""
    for name, (first, second) in ((t.get("probe") or {}).get("scores") or {}).items():
        if changed := [(c["label"], a, b) for c, a, b in zip(cases, first, second) if a != b and a == a]:
            raise CapstoneError(
                f"your reward {name} gave the same completions different scores on two calls ({len(changed)} of "
                f"{len(cases)}; 04's '{changed[0][0]}': {changed[0][1]:g}, then {changed[0][2]:g}): it does not judge "
                "the completion (random numbers?), so its advantages are noise and the run learns nothing. Fix: score "
                "each completion from its text: the answer compared with `answer` as numbers (notebook 04).")


def _judge_reward_cases(t: dict, cases: list[dict]) -> None:
    """The student's rewards, run before train() on pairs of 04's completions (reward_cases): they ran, the same
    scores on a second call, and each right one above its twin with a wrong answer."""
    how = "The checker calls each reward as TRL does, before train(), with answer= (04's gold) and your other columns."
    probe, total = t.get("probe") or {}, [0.0] * len(cases)
    if "error" in probe:
        raise CapstoneError(f"your rewards failed on lesson 04's labelled completions ({probe['error']}). {how} Fix: "
                            "a reward that takes any completion text (read it with completion[0][\"content\"]) and "
                            f"the gold answer from `answer`.\n{probe.get('traceback', '')[-1500:]}")
    _judge_stable_rewards(t, cases)
    scores = probe.get("scores") or {}
    for first, weight in zip((f for f, _ in scores.values()), t.get("reward_weights") or [1.0] * len(scores)):
        total = [x + weight * (s or 0.0) for x, s in zip(total, first)]
    if sum(gaps := [r - w for r, w in zip(total[::2], total[1::2])]) <= 0:  # right minus its twin (pairs)
        k = min(range(len(gaps)), key=gaps.__getitem__)
        raise CapstoneError(
            f"your rewards ({', '.join(scores)}) do not score right answers above wrong ones: on {len(gaps)} of lesson "
            "04's completions, each beside its twin with the answer changed to a wrong number (same layout), the "
            f"right one scores {sum(gaps) / len(gaps):+.3g} more on average (04's '{cases[2 * k]['label']}': "
            f"{total[2 * k]:g} right, {total[2 * k + 1]:g} wrong). {how} Fix: a correctness reward: the last <answer> "
            "block compared with `answer` as numbers (1,000 is 1000), worth more than all format rewards (2.0 in 04).")


def _synthetic(questions: set[str]) -> set[str]:
    """Those of the questions helpers.data.make_problem writes (its every draw, level by level, cheap ones first)."""
    from helpers import data

    found = set()
    for level in (1, 3, 2) if questions else ():
        lo, hi = data._RANGES[1 if level == 3 else level]
        draws = [data._NAMES, data._ITEMS, range(lo, hi + 1), range(lo, hi + 1), *[range(2, 10)] * (level == 3)]
        found |= {q for op in data.OPERATIONS for combo in itertools.product(*draws)
                  if (q := data.make_problem(data._Scripted(combo), op, level)["question"]) in questions}
        if found == questions:
            break
    return found


def _synthetic_first_words() -> tuple[str, ...]:
    """How every synthetic question starts (helpers.data.make_problem: a name, then a space)."""
    from helpers import data

    return tuple(f"{n} " for n in data._NAMES)


def _judge_questions(t: dict) -> None:
    """No question the script trained on is one of the kit's held-out synthetic questions (helpers.data.split_of)."""
    from helpers import data

    questions, names = t.get("questions") or [], _synthetic_first_words()
    if heldout := _synthetic({q for q in questions if q.startswith(names) and data.split_of(q) == "heldout"}):
        raise CapstoneError(
            f"{sum(q in heldout for q in questions)} of the {len(questions)} questions your script trains on are from "
            f"the held-out split, the questions the kit evaluates on (e.g. \"{sorted(heldout)[0]}\"): a score on them "
            "measures memory, not learning. Fix: train on the train split: helpers.data.synthetic_problems(n, "
            "\"train\") (gsm8k_records(\"train\") on a GPU), and keep \"heldout\" for evaluation.")


def _judge_gsm8k_questions(t: dict) -> None:
    """No question the script trained on is from GSM8K's test split, the held-out questions of a GPU run
    (helpers.data.heldout_questions). Called by the checker after the run, never in the script's process, so the
    script never waits on the Hub: the whole split when datasets loads it (the Hub or its cache), else the 20 test
    rows shipped with the kit. The synthetic questions are _judge_questions' part."""
    from helpers import data

    synthetic = _synthetic_first_words()
    asked = {q.strip() for q in t.get("questions") or [] if not q.startswith(synthetic)}
    if not asked:
        return
    with contextlib.redirect_stdout(io.StringIO()):  # gsm8k_records says where its rows came from: not the verdict
        found = sorted(asked & {r["question"].strip() for r in data.gsm8k_records("test")})
    if found:
        raise CapstoneError(
            f"{len(found)} of the {len(asked)} questions your script trains on are from GSM8K's test split, the "
            f"questions the kit evaluates on (e.g. \"{found[0][:90]}\"): a score on them measures memory, not "
            "learning. Fix: train on the train split, helpers.data.load_gsm8k(\"train\") (synthetic_problems(n, "
            "\"train\") on a CPU), and keep \"test\" for evaluation.")


def _is_grpo(trainer) -> bool:
    return any(c.__name__.endswith("GRPOTrainer") and c.__module__.split(".")[0].startswith(("trl", "unsloth"))
               for c in type(trainer).__mro__)


def _lora_key(name: str) -> str:
    """peft's parameter name without the adapter's name, as save_pretrained writes it: ...lora_B.default.weight ->
    ...lora_B.weight."""
    return re.sub(r"\.lora_B\.(?!weight$)[^.]+\.weight$", ".lora_B.weight", name)


def _lora_b(model) -> dict:
    """Copies of a model's LoRA B matrices (float32 numpy), by their saved name."""
    import numpy as np

    found = {}
    for name, p in getattr(model, "named_parameters", lambda: [])():
        if ".lora_B." in name and getattr(p, "requires_grad", True):  # not TRL's frozen `ref` copy (beta != 0)
            value = p.detach().float().cpu().numpy() if hasattr(p, "detach") else p
            found[_lora_key(name)] = np.array(value, dtype=np.float32, copy=True)
    return found


def _same(a, b) -> bool:
    return a.shape == b.shape and bool((a == b).all())


def _origin(func) -> dict:
    """Where a reward function was written: its name, its module and the file its code came from."""
    target = func.func if isinstance(func, functools.partial) else func
    code = getattr(target, "__code__", None) or getattr(getattr(type(target), "__call__", None), "__code__", None)
    return {"name": getattr(target, "__name__", type(target).__name__),
            "module": getattr(target, "__module__", None) or type(target).__module__,
            "file": code.co_filename if code is not None else None}


def _bootstrap(script: str, folder: str, argv: list[str]) -> None:
    """Run the script as `python script.py ARGV` would, watched by a _Recorder; the report is written at the end."""
    script_path = Path(script).resolve()
    recorder = _Recorder(Path(folder))
    recorder.install_import_watch()
    recorder.install_trainer_watch()
    sys.argv = [str(script_path), *argv]
    sys.path.insert(0, str(script_path.parent))
    try:
        runpy.run_path(str(script_path), run_name="__main__")
    except BaseException as err:
        recorder.write(err)
        raise
    recorder.write(None)
