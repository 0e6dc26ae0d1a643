"""The kit's one voice: every `[grpo-kit] ...` line it prints goes through the logger "grpo_kit".

    from helpers.messages import say, warn
    say("resuming from step 10 (checkpoint-10)")     # [grpo-kit] resuming from step 10 (checkpoint-10)
    warn("WARNING (step 12): no learning signal")    # the same line, at level WARNING

It is Python's `logging`, so a user controls it without touching the kit:

    import logging
    logging.getLogger("grpo_kit").setLevel(logging.WARNING)   # quieter: only the kit's warnings remain
    logging.getLogger("grpo_kit").setLevel(logging.ERROR)     # silent
    logging.getLogger("grpo_kit").handlers = [logging.FileHandler("kit.log")]   # redirected, without the prefix
                                                              # unless the handler gets a Formatter with it

Its handler writes to sys.stdout as it is when the line is emitted (so pytest's capsys, Jupyter and papermill see
it), and, while a tqdm progress bar is showing, through `tqdm.write`, so a line never lands on the end of a bar's
line. The logger does not propagate: a root handler (logging.basicConfig) does not print each line twice; set
`propagate = True` and empty `handlers` to send them there instead. Errors a command refuses with stay plain stderr text, not here.

Standard library only (tqdm is used only if something already imported it): the notebooks' setup cell imports
this before the Colab install replaces the third-party packages.
"""

from __future__ import annotations

import logging
import sys

LOGGER_NAME = "grpo_kit"
PREFIX = "[grpo-kit] "


def _active_bar_class():
    """tqdm's bar class when tqdm is already imported and a bar is showing, else None (tqdm is never imported)."""
    std = sys.modules.get("tqdm.std")
    bar = getattr(std, "tqdm", None)
    return bar if bar is not None and len(getattr(bar, "_instances", ())) else None


class KitLineHandler(logging.Handler):
    """One `[grpo-kit] ...` line on the current sys.stdout, flushed; above a tqdm bar when one is showing."""

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter(PREFIX + "%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line, stream = self.format(record), sys.stdout
            if (bar := _active_bar_class()) is not None:
                bar.write(line, file=stream)
            else:
                stream.write(line + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's contract: a broken stream is reported, never raised into training
            self.handleError(record)


log = logging.getLogger(LOGGER_NAME)
if not log.handlers:  # once (a reload adds no second handler), and not over a handler the user set up first
    log.addHandler(KitLineHandler())
    if log.level == logging.NOTSET:  # a level the user chose before importing the kit stays
        log.setLevel(logging.INFO)
    log.propagate = False


def say(message: str) -> None:
    """A kit message: `[grpo-kit] <message>` (level INFO)."""
    log.info(message)


def warn(message: str) -> None:
    """A kit warning, same look (level WARNING): it stays when a user silences the INFO lines."""
    log.warning(message)
