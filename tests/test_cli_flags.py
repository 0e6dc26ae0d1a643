"""The inventory of `python -m helpers.train`'s command line: every flag and alias it accepts, each spelling, each
type, run through the parser and checked against the value the run then holds. A flag dropped or retyped by a change
of parser fails here."""

import os
import subprocess
import sys
import textwrap
import typing
from dataclasses import fields
from pathlib import Path

import pytest

from helpers import train
from helpers.backend import Backend
from helpers.config import Preset, get_preset
from helpers.run.options import RunOptions

ROOT = Path(__file__).resolve().parents[1]

# One text per annotated type of a Preset field, and the value the preset then holds.
TEXT_AND_VALUE = {int: ("7", 7), float: ("0.25", 0.25), float | None: ("0.25", 0.25), str: ("abc", "abc"),
                  str | None: ("0,1", "0,1"), tuple[str, ...]: ("q_proj,v_proj", ("q_proj", "v_proj")),
                  tuple[int, ...]: ("1,2", (1, 2)), Backend: ("unsloth", Backend.UNSLOTH)}
PRESET_HINTS = {name: hint for name, hint in typing.get_type_hints(Preset).items() if name != "name"}


def _resolved(*argv):
    """(the preset, the run options) a command line resolves to."""
    args = train.parse_args(list(argv))
    return get_preset(args.preset, **train.overrides_from(args)), train.options_from(args)


@pytest.mark.parametrize("name", [n for n, hint in PRESET_HINTS.items() if hint is not bool])
def test_every_preset_field_is_a_flag_in_both_spellings(name):
    text, value = TEXT_AND_VALUE[PRESET_HINTS[name]]
    dashed = "--" + name.replace("_", "-")
    for argv in ([dashed, text], [f"--{name}={text}"], [f"{dashed}={text}"]):
        assert getattr(_resolved(*argv)[0], name) == value, argv
    assert train.overrides_from(train.parse_args([])) == {}  # a flag not given keeps the preset's value


@pytest.mark.parametrize("name", [n for n, hint in PRESET_HINTS.items() if hint is bool])
def test_every_preset_switch_turns_on_and_off_in_both_spellings(name):
    dashed = name.replace("_", "-")
    for flag, value in ((f"--{dashed}", True), (f"--{name}", True), (f"--no-{dashed}", False), (f"--no_{name}", False)):
        assert getattr(_resolved(flag)[0], name) is value, flag
    assert getattr(_resolved("--preset", "t4")[0], name) == getattr(get_preset("t4"), name)


# (command line, run option, value): every RunOptions flag and alias, and TRL's names for them.
OPTION_FLAGS = [
    (["--run-dir", "runs/x"], "run_dir", Path("runs/x")),
    (["--run_dir", "runs/x"], "run_dir", Path("runs/x")),
    (["--output-dir", "runs/x"], "run_dir", Path("runs/x")),
    (["--output_dir=runs/x"], "run_dir", Path("runs/x")),
    (["--run-dir=~/x"], "run_dir", Path.home() / "x"),
    (["--overwrite"], "overwrite", True),
    (["--no-overwrite"], "overwrite", False),
    (["--save-steps", "5"], "save_steps", 5),
    (["--save_steps", "none"], "save_steps", None),
    (["--keep", "4"], "keep", 4),
    (["--save-total-limit", "4"], "keep", 4),
    (["--save_total_limit", "4"], "keep", 4),
    ([], "resume", None),
    (["--resume"], "resume", True),
    (["--no-resume"], "resume", False),
    (["--no_resume"], "resume", False),
    (["--resume-from-checkpoint"], "resume", True),
    (["--resume_from_checkpoint", "true"], "resume", True),
    (["--resume-from-checkpoint", "false"], "resume", False),
    (["--checkpoint-dir", "~/c"], "checkpoint_dir", Path.home() / "c"),
    (["--drive"], "drive", True),
    (["--dashboard", "headless"], "dashboard", "headless"),
    (["--no-evaluate"], "evaluate", False),
    (["--evaluate"], "evaluate", True),
    (["--pass-k-samples", "4"], "pass_k_samples", 4),
    (["--pass_k_samples=4"], "pass_k_samples", 4),
    (["--reward", "m:f", "--reward", "n:g"], "rewards", ("m:f", "n:g")),
    (["--reward-timeout", "30"], "reward_timeout", 30.0),
    (["--verbose"], "verbose", True),
    (["--no-verbose"], "verbose", False),
]


@pytest.mark.parametrize("argv, name, value", OPTION_FLAGS, ids=[" ".join(a) or "none" for a, _, _ in OPTION_FLAGS])
def test_every_run_option_flag_and_alias(argv, name, value):
    assert getattr(_resolved(*argv)[1], name) == value


def test_the_inventory_covers_every_run_option():
    assert {name for _, name, _ in OPTION_FLAGS} == {f.name for f in fields(RunOptions)}
    assert set(PRESET_HINTS) == {f.name for f in fields(Preset)} - {"name"}


@pytest.mark.parametrize("argv", [["--batch-size", "16"], ["--batch_size=16"], ["--per-device-train-batch-size", "16"],
                                  ["--per_device_train_batch_size", "16"]])
def test_the_batch_size_aliases(argv):
    assert _resolved(*argv)[0].per_device_train_batch_size == 16


def test_the_commands_own_flags(tmp_path, monkeypatch):
    assert train.parse_args([]).preset == "cpu" and _resolved("--preset", "t4")[0] == get_preset("t4")
    assert train.parse_args(["--print-config"]).print_config and train.parse_args(["--print_config"]).print_config
    (tmp_path / "c.yaml").write_text("preset: t4\nmax_steps: 3\nkeep: 5\n")
    for argv in (["--config", str(tmp_path / "c.yaml")], [f"--config={tmp_path / 'c.yaml'}"]):
        preset, options = _resolved(*argv)
        assert (preset.name, preset.max_steps, options.keep) == ("t4", 3, 5)
    monkeypatch.setenv("GRPO_KIT_TEST", "before")  # TRL's `env:` in a --config file sets environment variables
    (tmp_path / "e.yaml").write_text("env:\n  GRPO_KIT_TEST: from-the-file\n")
    assert _resolved("--config", str(tmp_path / "e.yaml"))[0] == get_preset("cpu")
    assert os.environ["GRPO_KIT_TEST"] == "from-the-file"


@pytest.mark.parametrize("argv, said", [
    (["--push-to-hub"], "--push-to-hub: uploading to the Hugging Face Hub is notebook 06's last cell"),
    (["--hub-model-id", "me/x"], "--hub-model-id: the Hub repository is named in notebook 06's upload cell"),
    (["--resume-from-checkpoint", "runs/x/trainer/checkpoint-2"], "Fix: pass --run-dir"),
    (["--dashboard", "loud"], "invalid choice: 'loud'"),
])
def test_what_the_parser_refuses_it_says_where(argv, said, capsys):
    with pytest.raises(SystemExit) as exit_:
        train.parse_args(argv)
    assert exit_.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.parametrize("argv, said", [
    (["--max-steps", "many"], "max_steps='many': is the text 'many', not a whole number. Fix: give a whole number"),
    (["--run-dir", " "], "run_dir=' ': is the text ' ', not a folder path. Fix: give a folder path, e.g. "
                         "run_dir='runs/demo'"),
    (["--keep", "all"], "keep='all': is the text 'all', not a whole number. Fix:"),
    (["--backend", "gpu"], "backend='gpu': must be 'cpu', 'unsloth' or 'trl-vllm'. Fix:"),
])
def test_a_value_of_the_wrong_type_is_refused_naming_the_field_and_the_fix(argv, said, capsys):
    """The flags' text is typed as the fields are, by helpers.config_types (as a notebook's parameters are)."""
    assert train.main([*argv, "--print-config"]) == 2 and said in capsys.readouterr().err


def test_none_unsets_an_optional_field():
    """`--gpu-memory-utilization none` was ignored before TRL's parser (the preset's 0.3 stayed)."""
    assert _resolved("--preset", "t4", "--gpu-memory-utilization", "none")[0].gpu_memory_utilization is None
    assert _resolved("--preset", "8xh100-qwen7b-lora", "--train-gpus=none")[0].train_gpus is None


def test_trls_parser_leaves_trl_out_of_sys_modules_when_it_brought_it_in():
    """On the GPU path Unsloth is imported after the parse, must come before TRL, and looks for 'trl' in sys.modules
    (it warns otherwise): parsing takes TRL out again when it brought it in, and leaves a TRL imported earlier be."""
    code = textwrap.dedent("""
        import sys
        from helpers import cli, train
        train.parse_args(["--max-steps", "3"])
        after_parse = sorted(m for m in sys.modules if m.split(".")[0] == "trl")
        import trl
        cli._trl_parser.cache_clear()
        train.parse_args([])
        print(after_parse, sys.modules["trl"] is trl, "trl.scripts.utils" in sys.modules)
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.stdout.split() == ["[]", "True", "True"], r.stderr[-2000:]


def test_a_switch_of_the_commands_own_takes_true_and_false_as_trls_do():
    """--print-config is a bool field of the command's dataclass: TRL's parser takes `--print-config false` too."""
    assert train.parse_args(["--print-config", "true"]).print_config is True
    assert train.parse_args(["--print_config", "false"]).print_config is False


class _LabProcesses:
    """A stand-in for lab.scale_out's extension: its processes() would import torch, so the checks never call it."""

    def processes(self):
        raise AssertionError("processes() called before TRL: on the GPU path it would import torch before Unsloth")


def test_num_processes_is_the_launchers_under_the_lab_and_refused_as_one_process(monkeypatch, capsys):
    """--num-processes 2 in one process is refused with the launch command; under the lab's wrapper the count is the
    launcher's WORLD_SIZE (helpers.run.extensions.world_size), read before TRL without calling its processes()."""
    from helpers.config import PresetError
    from helpers.run import extensions

    preset = _resolved("--num-processes", "2")[0]
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert train.main(["--num-processes", "2"]) == 2
    assert "Fix: accelerate launch --num_processes 2 -m lab.scale_out" in capsys.readouterr().err
    extensions.use(_LabProcesses())
    try:
        monkeypatch.setenv("WORLD_SIZE", "2")
        assert extensions.world_size(preset) == 2
        monkeypatch.setenv("WORLD_SIZE", "1")
        with pytest.raises(PresetError, match=r"num_processes=2, but this is one process"):
            extensions.world_size(preset)
    finally:
        extensions.clear()


def test_the_command_line_stays_the_size_of_trls_grpo_script():
    """Issue 47: train.py and the CLI module together at most 250 lines (TRL's scripts/grpo.py is 173), the flags and
    --config from TRL's parser; the rest of the kit's command line is what TRL's parser lacks."""
    lines = sum(len((ROOT / "helpers" / name).read_text().splitlines()) for name in ("train.py", "cli.py"))
    assert lines <= 250, f"helpers/train.py + helpers/cli.py: {lines} lines"
