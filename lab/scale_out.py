"""`python -m helpers.train` on several processes: the lab's wrapper for `accelerate launch` (lab/docs/scale-out.md).

    accelerate launch --config_file configs/accelerate/multi_gpu_zero2.yaml -m lab.scale_out --preset 8xh100-qwen7b-lora

It plugs two extensions into helpers.run.extensions, then runs helpers.train's own main with the same flags:
ScaleOut (the launcher's processes, from lab.distributed: process 0 plans the run folder, writes the adapter once,
evaluates; rank markers with GRPO_KIT_RANK_MARKERS) and StepTiming (each step's phases, lab.step_timing). The course's
run is one process: a launcher's several are refused there, with this command as the fix. Without a launcher it is
one process, timed.
"""

from __future__ import annotations

import sys

from helpers import train
from helpers.run import extensions
from lab.step_timing import StepTiming


class ScaleOut:
    """The launcher's processes and, when asked, a rank marker per process. lab.distributed (torch, accelerate,
    transformers) is imported by the pipeline's steps, after helpers.train's checks imported Unsloth on the GPU path."""

    def processes(self):
        from lab import distributed

        return distributed.process_info()

    def callbacks(self, state) -> list:
        from lab import distributed

        return distributed.rank_marker_callbacks()


def main(argv=None) -> int:
    extensions.use(ScaleOut())
    extensions.use(StepTiming())
    return train.main(argv)


if __name__ == "__main__":
    sys.exit(main())
