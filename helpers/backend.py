"""The backend a preset trains with (Preset.backend): which libraries load the model and generate, so what the
machine needs. Callers ask its properties (`backend.needs_gpu`, `backend.uses_unsloth`) rather than compare names.

A str-valued enum: config.json and summary.json hold the plain name ("cpu"), text given on the command line, in a
YAML --config, a notebook parameter or an older config.json becomes a member (helpers.config_types), and code that
still compares it with a name (`backend == "cpu"`, a student's older notebook) keeps working. Standard library only:
helpers.runtime imports it.
"""

from __future__ import annotations

import enum


class Backend(str, enum.Enum):
    CPU = "cpu"  # transformers + peft in fp32, the embedded SmolLM2-135M, TRL's own generate (helpers.model.load_cpu)
    UNSLOTH = "unsloth"  # one GPU: Unsloth (4-bit), vLLM sharing the weights with fast_inference (load_unsloth)
    TRL_VLLM = "trl-vllm"  # several GPUs: transformers + peft in bf16, TRL's own vLLM engine (load_trl_vllm)

    def __str__(self) -> str:  # the plain name in messages and --help, on every Python (3.11 would say Backend.CPU)
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def is_cpu(self) -> bool:
        """The CPU path: fp32 weights, no vLLM, no bitsandbytes; also runs on a GPU machine's CPU."""
        return self is Backend.CPU

    @property
    def needs_gpu(self) -> bool:
        """Refused on a machine without a GPU (helpers.runtime.no_gpu)."""
        return self is not Backend.CPU

    @property
    def uses_unsloth(self) -> bool:
        """The one-GPU path: Unsloth imported first, its model's own vLLM engine (an adapter passed per request)."""
        return self is Backend.UNSLOTH

    @property
    def uses_trl_vllm(self) -> bool:
        """TRL's own vLLM engine (GRPOConfig's vllm_* settings, Preset's VLLM_FIELDS): colocated or a server."""
        return self is Backend.TRL_VLLM
