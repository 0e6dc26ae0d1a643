"""The run's one extension point: what the lab (lab/, outside the course) plugs into helpers.run.pipeline's steps,
without the course importing it. A course run is one process and records TRL's own step_time; the lab adds each
step's phases (lab.step_timing) and several processes under accelerate launch (lab.scale_out):

    from helpers.run import extensions
    extensions.use(StepTiming())      # before pipeline.start: every run this process starts gets it

An extension is any object with some of these methods, each optional:

    processes()                      the run's processes (share, save_adapter, model_to_evaluate: see OneProcess)
    callbacks(state)                 TRL callbacks added to the kit's (helpers.run.pipeline.kit_callbacks)
    prepare_trainer(state, trainer)  after the kit's patches, before trainer.train() (helpers.run.pipeline.training)
    summary(state, rows)             keys added to summary.json; rows: the run's metrics.jsonl
"""

from __future__ import annotations

import os

from helpers.config import PresetError

_ACTIVE: list = []


class OneProcess:
    """The course's run: one process plans the run folder, trains, saves the adapter and evaluates."""

    rank, world_size, is_main, distributed = 0, 1, True, False

    def share(self, fn, cpu: bool | None = None):
        """fn()'s result (several processes: process 0 calls it and every process gets the result)."""
        return fn()

    def save_adapter(self, trainer, model, tokenizer, path, save):
        """save(model, tokenizer, path), once (several processes: gathered under ZeRO-3, written by process 0)."""
        return save(model, tokenizer, path)

    def model_to_evaluate(self, preset, model, adapter):
        """The model that evaluates after training: the trained one (ZeRO-3: a fresh copy with the saved adapter)."""
        return model


def use(extension):
    """Plug `extension` into every run this process starts from now on; one of the same type again replaces it."""
    _ACTIVE[:] = [e for e in _ACTIVE if type(e) is not type(extension)] + [extension]
    return extension


def clear() -> None:
    """No extension: the course's own run (tests put the registry back with this)."""
    _ACTIVE.clear()


def hooks(name: str) -> list:
    """The extensions' methods called `name`, in the order they were plugged in."""
    return [hook for e in _ACTIVE if callable(hook := getattr(e, name, None))]


def processes():
    """This run's processes: an extension's (lab.scale_out), else OneProcess. A launcher's several processes
    (WORLD_SIZE > 1) without one are refused: each would train and write the run folder as if alone."""
    for hook in reversed(hooks("processes")):
        if (found := hook()) is not None:
            return found
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if world_size > 1:
        raise PresetError(
            f"WORLD_SIZE={world_size}: this is one of {world_size} processes (accelerate launch), and helpers.train "
            f"runs one. Fix: accelerate launch --num_processes {world_size} -m lab.scale_out ... (the lab's "
            "wrapper around helpers.train: lab/docs/scale-out.md), or run one process")
    return OneProcess()


def world_size(preset) -> int:
    """How many processes run `preset`, known before TRL and torch are imported (helpers.train's checks): under an
    extension, the launcher's WORLD_SIZE (its processes() imports torch); else processes(), which refuses several.
    A recipe of several processes started as one is refused with the command that starts them."""
    count = int(os.environ.get("WORLD_SIZE", 1)) if hooks("processes") else processes().world_size
    if preset.num_processes > 1 and count == 1:
        raise PresetError(
            f"num_processes={preset.num_processes}, but this is one process: the recipe is launched by accelerate, "
            f"which starts the {preset.num_processes}. Fix: accelerate launch --num_processes "
            f"{preset.num_processes} -m lab.scale_out ... (lab/docs/scale-out.md), or --num-processes 1")
    return count
