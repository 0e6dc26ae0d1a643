"""helpers.messages: the kit's `[grpo-kit]` lines reach stdout as before, a user can silence or redirect them with
plain logging calls, and a line written while a tqdm bar is showing starts on its own line."""

import io
import logging
import re

import pytest
from tqdm import tqdm

from helpers import messages
from helpers.messages import say, warn


@pytest.fixture
def kit_logger():
    """The real logger, its handlers, level and propagate put back after the test changes them."""
    log = logging.getLogger("grpo_kit")
    saved = (list(log.handlers), log.level, log.propagate)
    yield log
    log.handlers[:], log.propagate = saved[0], saved[2]
    log.setLevel(saved[1])  # setLevel, not .level =: it also clears logging's cache of enabled levels


def test_messages_reach_stdout_with_the_prefix_and_warnings_look_the_same(capsys):
    say("resuming from step 10 (checkpoint-10)")
    warn("WARNING (step 12): no learning signal")
    say("100% literal, not a %s format")
    assert capsys.readouterr().out == ("[grpo-kit] resuming from step 10 (checkpoint-10)\n"
                                       "[grpo-kit] WARNING (step 12): no learning signal\n"
                                       "[grpo-kit] 100% literal, not a %s format\n")


def test_a_root_handler_does_not_print_each_line_twice(kit_logger, capsys):
    seen = []
    root_handler = logging.Handler()
    root_handler.emit = seen.append
    logging.getLogger().addHandler(root_handler)
    try:
        say("once")
    finally:
        logging.getLogger().removeHandler(root_handler)
    assert capsys.readouterr().out == "[grpo-kit] once\n" and seen == []


def test_silenced_with_a_level_warnings_still_show(kit_logger, capsys):
    kit_logger.setLevel(logging.WARNING)
    say("evaluating before training ...")
    warn("TRAINING STOPPED at step 2: loss is nan")
    assert capsys.readouterr().out == "[grpo-kit] TRAINING STOPPED at step 2: loss is nan\n"
    kit_logger.setLevel(logging.ERROR)
    warn("gone too")
    assert capsys.readouterr().out == ""


def test_redirected_by_replacing_the_handler(kit_logger, capsys):
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logging.Formatter("%(levelname)s " + messages.PREFIX + "%(message)s"))
    kit_logger.handlers = [handler]
    say("wrote runs/demo/eval.json")
    warn("WARNING (step 3): no learning signal")
    assert capsys.readouterr().out == ""
    assert buffer.getvalue() == ("INFO [grpo-kit] wrote runs/demo/eval.json\n"
                                 "WARNING [grpo-kit] WARNING (step 3): no learning signal\n")


def _line_starts(text: str, needle: str) -> list[str]:
    """The character before each occurrence of needle ('' at the very start)."""
    return [text[i - 1] if i else "" for i in (m.start() for m in re.finditer(re.escape(needle), text))]


def test_a_message_during_a_progress_bar_starts_on_its_own_line(monkeypatch):
    """A log that takes stdout and stderr together (`> log 2>&1`, a terminal) once read
    `... 6.80s/it][grpo-kit] step 40/40 ...`: the bar's line had no end when the step line came."""
    shared = io.StringIO()  # stdout and stderr into one stream, as in a terminal or a log file
    monkeypatch.setattr("sys.stdout", shared)
    monkeypatch.setattr("sys.stderr", shared)
    with tqdm(total=4, desc="[grpo-kit] training", mininterval=0, ascii=True) as bar:
        bar.update(1)
        print("[grpo-kit] plain print")  # what the kit did before: lands on the end of the bar
        bar.update(1)
        say("step 2/4 | reward 0.500")
        bar.update(2)
    text = shared.getvalue()
    assert _line_starts(text, "[grpo-kit] plain print") == ["]"], "the failure this guards against did not show"
    assert _line_starts(text, "[grpo-kit] step 2/4") in (["\r"], ["\n"]), repr(text)
    assert "[grpo-kit] step 2/4 | reward 0.500\n" in text
    assert "4/4" in text.split("[grpo-kit] step 2/4")[1], "the bar is drawn again below the message"


def test_without_an_active_bar_the_line_is_written_plainly(capsys):
    bar = tqdm(total=1, disable=True)  # a disabled bar is not showing: nothing to clear
    say("no bar")
    bar.close()
    assert capsys.readouterr() == ("[grpo-kit] no bar\n", "")
