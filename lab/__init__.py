"""The lab: the kit's measurement, emulation and scale-out tools, in a wing of their own beside the course.

The course (helpers/, lessons/, scripts/) is what a class runs: one process, on a T4 or a CPU. The lab measures it
and takes it further: the GPU memory benchmark and its T4 emulation (benchmark_memory.py, gpu_emulation.py), a
lesson run on a GPU under that emulation (run_lesson_on_gpu.py), the CPU benchmark (benchmark_cpu.py), each GRPO
step's time by phase (step_timing.py), several processes with accelerate and DeepSpeed (`accelerate launch -m
lab.scale_out`: scale_out.py, distributed.py; zero.py, memory per GPU under ZeRO).
Its record is lab/docs/performance.md; scale-out's commands are in lab/docs/scale-out.md; its tests in lab/tests/.

The rule: the lab may import the course (helpers/), the course never imports the lab. The lab plugs into a run
through the course's one extension point, helpers.run.extensions (tests/test_layout.py holds the rule).
"""
