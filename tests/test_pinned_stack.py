"""What the kit's T4 path relies on in the pinned vLLM 0.19.1 and unsloth_zoo 2026.10.9, read from their own source.

Nothing is installed and neither unsloth nor vllm is imported: tests/pinned_source.py downloads the pinned artifacts
once (the vllm sdist, the unsloth / unsloth_zoo wheels) into ~/.cache/grpo-kit/pinned-source/, these tests read them
with `ast`, and a few of unsloth_zoo's own arithmetic functions are run from that source. Each test asserts one fact
the kit's code or docs rely on and names that place, so a new pin that behaves differently fails here before a T4
finds out. The first vLLM record (results/gpu/2026-11-27-h100-as-t4-vllm.json) ran another vLLM (its versions.vllm,
0.25.1); where the tests compare the two, docs/gpu-stack.md ("The first vLLM record's stack against the pinned
stack") says what the difference means. A failed download fails the test with the URL; nothing is skipped.
"""

from __future__ import annotations

import ast
import json
import re
import time

import pytest

import pinned_source as ps

RECORD = ps.REPO_ROOT / "results" / "gpu" / "2026-11-27-h100-as-t4-vllm.json"
ZOO_VLLM_UTILS = "unsloth_zoo/vllm_utils.py"


def _root(name, version=None):
    start = time.monotonic()
    try:
        root = ps.source_root(name, version)
    except ps.PinnedSourceError as err:
        pytest.fail(f"could not obtain the source of {name} {version or 'pinned'}: {err}", pytrace=False)
    if time.monotonic() - start > 1:
        print(f"[pinned-source] {name} {version or ps.pinned_version(name)} fetched+unpacked")
    return root


@pytest.fixture(scope="module")
def t4_settings():
    from helpers.config import get_preset

    return get_preset("t4")


def _record():
    return json.loads(RECORD.read_text())[0]


def record_vllm() -> str:
    """The vLLM the 2026-11-27 record ran (the GPU machine's), read from the record itself."""
    return _record()["versions"]["vllm"]


# "pinned" is requirements.txt's vllm; the other is the record's.
VERSIONS = ["pinned", "record"]


def _version(which: str) -> str | None:
    return None if which == "pinned" else record_vllm()


def _vllm(relpath: str, which: str) -> ast.Module:
    version = _version(which)
    _root("vllm", version)
    return ps.parse("vllm", relpath, version)


def _zoo(qualname: str):
    _root("unsloth_zoo")
    return ps.find_function(ps.parse("unsloth_zoo", ZOO_VLLM_UTILS), qualname)


def _lines(fn) -> list[str]:
    return [line.strip() for line in ast.unparse(fn).splitlines()]


def _in_order(fn, statements: list[str]) -> bool:
    """Each statement is a whole line of fn's unparsed body, in this order."""
    lines, at = _lines(fn), 0
    for stmt in statements:
        try:
            at = lines.index(stmt, at) + 1
        except ValueError:
            return False
    return True


def test_the_record_is_the_comparison_this_file_makes():
    """The comparisons below are between requirements.txt's vLLM and the record's: they must differ, or the
    'record' cases test the pin twice and docs/gpu-stack.md's comparison section is out of date."""
    assert record_vllm() != ps.pinned_version("vllm"), "the record ran the pinned vLLM: rewrite docs/gpu-stack.md"


# ------------------------------------------------------------------------- how the reservation is sized


@pytest.mark.parametrize("which", VERSIONS)
def test_vllm_takes_gpu_memory_utilization_of_the_whole_card(which):
    """vLLM's reservation is ceil(card total x gpu_memory_utilization) (v1/worker/utils.py request_memory), taken
    from a snapshot at worker start, and it refuses to start when less than that is free. So the fraction is of the
    card, not of the free memory: the 'free at load' base in helpers/memory/estimate.py (utilization_base_gb) comes
    from Unsloth's conversion (next test), never from vLLM."""
    fn = ps.find_function(_vllm("vllm/v1/worker/utils.py", which), "request_memory")
    assert _in_order(fn, [
        "requested_memory = math.ceil(init_snapshot.total_memory * cache_config.gpu_memory_utilization)",
        "if init_snapshot.free_memory < requested_memory:",
        "return requested_memory",
    ]), f"vLLM {which}: request_memory no longer takes the fraction of the card's total memory"
    worker = ast.unparse(ps.find_function(_vllm("vllm/v1/worker/gpu_worker.py", which), "Worker.init_device"))
    assert "self.requested_memory = request_memory(init_snapshot, self.cache_config)" in worker


def test_unsloth_turns_a_fraction_of_free_memory_into_a_fraction_of_the_card():
    """unsloth_zoo 2026.10.9 multiplies the gpu_memory_utilization it is given by the memory free at load and hands
    vLLM that over the card's total (approximate_vllm_memory_usage -> load_vllm's engine_args), so vLLM's
    total x fraction = utilization x free at load. helpers/memory/estimate.py (utilization_base_gb), lesson 05's
    sizing exercise and docs/memory.md's vllm_reservation row rely on this base."""
    approx = _zoo("approximate_vllm_memory_usage")
    assert _in_order(approx, [
        "free_memory, total_memory = get_mem_info()",
        "free_memory = gpu_memory_utilization * free_memory",
        "actual_gpu_memory_utilization = free_memory / total_memory",
    ]), "Unsloth no longer scales gpu_memory_utilization by the memory free at load"
    # the one exception: the activations it reserves for training cap the fraction below the card
    assert "if total_memory - free_memory < maximum_activation:" in _lines(approx)
    mem_info = ast.unparse(_zoo("get_mem_info"))
    assert "free_memory, total_memory = torch.cuda.mem_get_info()" in mem_info
    load = _zoo("load_vllm")
    call = next(n for n in ast.walk(load) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                and ast.unparse(n.targets[0]) == "engine_args" and ast.unparse(n.value.func) == "dict")
    passed = {k.arg: ast.unparse(k.value) for k in call.value.keywords}
    assert passed["gpu_memory_utilization"] == "actual_gpu_memory_utilization"


@pytest.mark.parametrize("which", VERSIONS)
def test_kv_cache_is_the_reservation_less_what_the_profile_run_used(which):
    """KV cache = reservation - (weights + the profile run's torch peak + its non-torch growth) - the CUDA graph
    estimate, and the estimate is subtracted only under VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
    (v1/worker/gpu_worker.py determine_available_memory). helpers/memory/estimate.py vllm_memory models
    KV = reservation - weights - workspace with the CUDA graphs beside it: true where that variable is 0, the pin's
    default (tests/test_gpu_contracts.py checks the defaults; the record set it to 0 as well)."""
    fn = ps.find_function(_vllm("vllm/v1/worker/gpu_worker.py", which), "Worker.determine_available_memory")
    assert _in_order(fn, [
        "cudagraph_memory_estimate = 0",
        "cudagraph_memory_estimate = self.model_runner.profile_cudagraph_memory()",
        "profile_result.non_kv_cache_memory = profile_result.non_torch_increase + "
        "profile_result.torch_peak_increase + profile_result.weights_memory",
        "cudagraph_memory_estimate_applied = cudagraph_memory_estimate if "
        "envs.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS else 0",
        "self.available_kv_cache_memory_bytes = self.requested_memory - profile_result.non_kv_cache_memory - "
        "cudagraph_memory_estimate_applied",
    ]), f"vLLM {which} sizes the KV cache another way: re-read determine_available_memory"
    assert _record()["environment"]["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"] == "0"


@pytest.mark.parametrize("which", VERSIONS)
def test_vllm_stops_without_kv_cache_for_one_full_sequence(which):
    """helpers/memory/estimate.py vllm_memory says vLLM does not start when the KV cache cannot hold one
    max_model_len sequence: kv_cache_utils._check_enough_kv_cache_memory raises for no memory at all ('No available
    memory for the cache blocks') and for less than one sequence ('To serve at least one request...')."""
    fn = ps.find_function(_vllm("vllm/v1/core/kv_cache_utils.py", which), "_check_enough_kv_cache_memory")
    text = " ".join(ps.string_literals(fn))
    assert "No available memory for the cache blocks. " in text
    assert re.search(r"To serve at least one request with the models?'s max seq len", ast.unparse(fn))
    assert _in_order(fn, ["if available_memory <= 0:", "if needed_memory > available_memory:"])


# ------------------------------------------------------------------------------ what Unsloth passes to vLLM


def _engine_arg_keys() -> tuple[set[str], set[str]]:
    """(the keys of load_vllm's engine_args = dict(...), the keys it sets later by engine_args["key"] = ...)."""
    load = _zoo("load_vllm")
    base = next(n for n in ast.walk(load) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                and ast.unparse(n.targets[0]) == "engine_args" and ast.unparse(n.value.func) == "dict")
    later = {n.targets[0].slice.value for n in ast.walk(load)
             if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Subscript)
             and ast.unparse(n.targets[0].value) == "engine_args" and isinstance(n.targets[0].slice, ast.Constant)}
    return {k.arg for k in base.value.keywords}, later


# Keys Unsloth hands vLLM on the T4 path that the kit's sizing depends on (gpu_memory_utilization, max_model_len,
# max_num_seqs, max_num_batched_tokens: helpers/memory; enforce_eager: helpers.model.unsloth_load_kwargs;
# enable_sleep_mode: standby off on a T4, docs/gpu-stack.md; compilation_config: the CUDA graphs the memory model
# counts; disable_cascade_attn: what load_vllm adds below compute capability 9).
T4_ENGINE_KEYS = {"gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
                  "enforce_eager", "enable_sleep_mode", "compilation_config", "quantization", "load_format", "dtype",
                  "enable_lora", "max_lora_rank", "enable_prefix_caching", "disable_cascade_attn", "max_logprobs",
                  "logprobs_mode"}


@pytest.mark.parametrize("which", VERSIONS)
def test_unsloth_engine_arguments_are_engine_args_fields(which):
    """load_vllm drops every key that is not a parameter of vLLM's EngineArgs, printing 'Not an error' (so a renamed
    argument is lost in silence, not refused). On the pin and on the record's vLLM the keys the T4 path relies on
    all survive; swap_space and device are dropped on both (EngineArgs lost them; the record logs 'Swap space is
    left to vLLM')."""
    load = _lines(_zoo("load_vllm"))
    assert "good_keys = inspect.signature(AsyncEngineArgs if use_async else EngineArgs).parameters.keys()" in load
    assert "llm = LLM(**engine_args)" in load
    base, later = _engine_arg_keys()
    assert T4_ENGINE_KEYS <= base | later, f"load_vllm no longer sets {sorted(T4_ENGINE_KEYS - base - later)}"
    fields = set(ps.class_fields(ps.find_class(_vllm("vllm/engine/arg_utils.py", which), "EngineArgs")))
    missing = sorted(T4_ENGINE_KEYS - fields)
    assert not missing, f"vLLM {which}'s EngineArgs has no {missing}: Unsloth would drop them in silence"
    assert sorted(base - fields) == ["device", "swap_space"], \
        f"vLLM {which} drops other engine_args than swap_space and device: update docs/gpu-stack.md"
    llm = ps.find_function(_vllm("vllm/entrypoints/llm.py", which), "LLM.__init__")
    assert ps.signature(llm).var_kwargs == "kwargs" and "**kwargs)" in ast.unparse(llm).split("EngineArgs(", 1)[1]


def test_kit_arguments_reach_load_vllm_and_max_num_seqs_is_unsloths_choice(t4_settings):
    """The kit passes no max_num_seqs (helpers.model.unsloth_load_kwargs), so load_vllm keeps its default 256, which
    it reads as 'not asked' and replaces by its own pick from the KV cache it estimates (next test)."""
    from helpers.model import unsloth_load_kwargs

    assert "max_num_seqs" not in unsloth_load_kwargs(t4_settings)
    load = _zoo("load_vllm")
    defaults = dict(zip(reversed([a.arg for a in load.args.args]), reversed(load.args.defaults)))
    assert ast.literal_eval(defaults["max_num_seqs"]) == 256
    assert "explicit_max_num_seqs = max_num_seqs not in (None, 256)" in _lines(load)


def _max_num_seqs_tiers() -> list[tuple[float, int, int]]:
    """[(KV estimate upper bound in GB, max_num_batched_tokens, max_num_seqs)] from load_vllm's if/elif chain."""
    load = _zoo("load_vllm")
    chain = next(n for n in ast.walk(load) if isinstance(n, ast.If)
                 and ast.unparse(n.test) == "memory_left_for_kv_cache_gb <= 2")
    tiers = []
    while chain is not None:
        bound = chain.test.comparators[0].value if isinstance(chain.test.ops[0], ast.LtE) else float("inf")
        tokens, seqs = ast.literal_eval(chain.body[0].value)
        tiers.append((bound, tokens, seqs))
        chain = chain.orelse[0] if len(chain.orelse) == 1 and isinstance(chain.orelse[0], ast.If) else None
    return tiers


def test_unsloth_picks_max_num_seqs_from_its_kv_cache_estimate():
    """load_vllm picks max_num_seqs from its own estimate of the memory left for the KV cache (<= 2 GB: 8, <= 4 GB:
    16, <= 8 GB: 32, ...), the same on every vLLM (no version check in the chain). The record's engine ran 16
    (vllm_engine.settings.max_num_seqs; Unsloth logged 'vLLM's KV Cache can use up to 2.77 GB'), which is what
    docs/memory.md and issue 44 compare with the sequences the t4 preset samples at once."""
    tiers = _max_num_seqs_tiers()
    assert tiers[:3] == [(2, 2048, 8), (4, 2048, 16), (8, 4096, 32)], tiers[:3]
    assert [t[2] for t in tiers] == sorted(t[2] for t in tiers), "more memory no longer means more sequences"
    record = _record()
    logged = next(float(m.group(1)) for line in record["log_lines"]
                  if (m := re.search(r"vLLM's KV Cache can use up to ([\d.]+) GB", line)))
    picked = next(seqs for bound, _, seqs in tiers if logged <= bound)
    assert record["vllm_engine"]["settings"]["max_num_seqs"] == picked, "the record's max_num_seqs is not this rule's"


GIB = 1024**3
ESTIMATE_FUNCTIONS = {"approximate_vllm_memory_usage", "vllm_weights_memory_usage", "_config_get",
                      "_kv_cache_elements_per_token", "_kv_cache_tokens", "_fit_max_seq_length_to_kv_cache"}


def _free_at_load_gib() -> tuple[float, float]:
    """(free, total) GiB when the record's model load began, as the kit logged it (an H100's CUDA context on the
    emulated 14.56 GiB card; a T4's own has not been measured)."""
    for line in _record()["log_lines"]:
        if m := re.search(r"([\d.]+) of ([\d.]+) GiB free", line):
            return float(m.group(1)), float(m.group(2))
    raise AssertionError("the record no longer logs the memory free at load")


def unsloth_estimate(settings, free_gib: float, total_gib: float) -> dict:
    """unsloth_zoo 2026.10.9's own estimate for load_vllm, run from its source: the fraction it passes vLLM, the KV
    cache it expects, the max_num_seqs tier that picks and the max_model_len it keeps (it shrinks max_seq_length to
    the tokens its estimate holds, and to 256 when that is nothing)."""
    import os

    import torch
    from transformers import Qwen2Config

    from helpers.memory.architectures import resolve_model

    arch = resolve_model(settings.model_name)
    config = Qwen2Config(hidden_size=arch.hidden_size, num_hidden_layers=arch.num_layers,
                         num_attention_heads=arch.num_heads, num_key_value_heads=arch.num_kv_heads,
                         intermediate_size=arch.intermediate_size, vocab_size=arch.vocab_size,
                         tie_word_embeddings=arch.tie_word_embeddings)
    _root("unsloth_zoo")
    ns = ps.pinned_functions("unsloth_zoo", ZOO_VLLM_UTILS, ESTIMATE_FUNCTIONS, {
        "os": os, "torch": torch, "get_mem_info": lambda: (int(free_gib * GIB), int(total_gib * GIB))})
    weights = ns["vllm_weights_memory_usage"](config, load_in_4bit=True)
    tokens, _, fraction, kv_gb = ns["approximate_vllm_memory_usage"](
        config, load_in_4bit=True, max_seq_length=settings.max_seq_length,
        gpu_memory_utilization=settings.gpu_memory_utilization, enable_lora=True,
        max_lora_rank=settings.lora_rank, account_for_gradients=True, weight_bytes=weights,
        max_num_batched_tokens=8192)  # the arguments load_vllm passes for a text model in 4 bits
    seqs = next(n for bound, _, n in _max_num_seqs_tiers() if kv_gb <= bound)
    return dict(fraction=fraction, kv_cache_gb=kv_gb, max_num_seqs=seqs,
                max_model_len=ns["_fit_max_seq_length_to_kv_cache"](settings.max_seq_length, tokens))


def test_unsloths_estimate_run_here_is_what_it_logged_on_the_gpu(t4_settings):
    """The harness above runs Unsloth's pinned arithmetic as it ran in the record: with the record's settings and its
    free memory at load it gives the fraction the record passed vLLM (emulation.gpu_memory_utilization_from_unsloth)
    and the KV cache Unsloth logged ('vLLM's KV Cache can use up to 2.77 GB'), max_num_seqs and max_model_len."""
    from dataclasses import replace

    record = _record()
    ran = record["predicted"]["settings"]
    settings = replace(t4_settings, gpu_memory_utilization=ran["gpu_memory_utilization"], lora_rank=ran["lora_rank"],
                       max_seq_length=record["vllm_engine"]["settings"]["max_model_len"])
    out = unsloth_estimate(settings, *_free_at_load_gib())
    assert out["fraction"] == pytest.approx(record["emulation"]["gpu_memory_utilization_from_unsloth"], abs=1e-4)
    logged = next(float(m.group(1)) for line in record["log_lines"]
                  if (m := re.search(r"vLLM's KV Cache can use up to ([\d.]+) GB", line)))
    assert round(out["kv_cache_gb"], 2) == logged
    assert out["max_num_seqs"] == record["vllm_engine"]["settings"]["max_num_seqs"]
    assert out["max_model_len"] == record["vllm_engine"]["settings"]["max_model_len"]


def test_unsloth_keeps_the_t4_presets_sequences_at_its_reservation(t4_settings):
    """Unsloth sizes vLLM from its own estimate, not vLLM's: it subtracts its weight, LoRA and CUDA graph figures
    from utilization x free memory, and where that leaves no KV cache it cuts max_model_len to 256
    (_fit_max_seq_length_to_kv_cache), so vLLM refuses every longer prompt. With the record's free memory at load
    that happens below a utilization of about 0.10 for this model (docs/gpu-stack.md). The t4 preset
    (helpers/config.py: gpu_memory_utilization, max_seq_length) must stay above it: Unsloth keeps room for one
    prompt + completion, and its max_num_seqs covers the completions TRL asks for in one call."""
    s = t4_settings
    out = unsloth_estimate(s, *_free_at_load_gib())
    need = s.max_prompt_length + s.max_completion_length
    assert out["max_model_len"] >= need, (
        f"at gpu_memory_utilization={s.gpu_memory_utilization} Unsloth's own estimate leaves "
        f"{out['kv_cache_gb']:.2f} GB of KV cache and cuts max_model_len to {out['max_model_len']} < prompt + "
        f"completion {need}: vLLM would refuse the prompts. Raise gpu_memory_utilization in the t4 preset.")
    per_call = s.per_device_train_batch_size * s.gradient_accumulation_steps
    assert out["max_num_seqs"] >= per_call, (
        f"Unsloth would run {out['max_num_seqs']} sequences at once, fewer than the {per_call} completions of one "
        "generation call: raise gpu_memory_utilization or lower the batch")


# ---------------------------------------------------------------------------- branches taken on each vLLM


@pytest.mark.parametrize("which", VERSIONS)
def test_unsloth_keeps_cuda_graphs_with_lora(which):
    """load_vllm's default compilation_config=3 captures CUDA graphs (FULL_AND_PIECEWISE) only where it can patch
    vLLM's _decompose_size_nodes pass; without that pass it keeps 3, with an unpatchable one it falls back to 2 (no
    CUDA graphs). Both vLLMs ship the pass, so the pin captures graphs as the record did
    (vllm_engine.settings.cudagraph_mode), which the memory model counts (helpers/memory VLLM_CUDA_GRAPHS_GB)."""
    load = _zoo("load_vllm")
    defaults = dict(zip(reversed([a.arg for a in load.args.args]), reversed(load.args.defaults)))
    assert ast.literal_eval(defaults["compilation_config"]) == 3
    fix = ast.unparse(_zoo("_install_vllm_decompose_size_nodes_fix"))
    assert "if not hasattr(_vllm_backends, '_decompose_size_nodes'):" in fix
    backends = _vllm("vllm/compilation/backends.py", which)
    assert any(isinstance(n, ast.FunctionDef) and n.name == "_decompose_size_nodes" for n in backends.body), \
        f"vLLM {which} has no _decompose_size_nodes: Unsloth runs compilation_config=3 without the LoRA fix"
    assert "compile_flags['cudagraph_mode'] = CUDAGraphMode.FULL_AND_PIECEWISE" in _lines(load)
    compilation = _vllm("vllm/config/compilation.py", which)
    assert "cudagraph_mode" in ps.class_fields(ps.find_class(compilation, "CompilationConfig"))
    assert "FULL_AND_PIECEWISE" in ast.unparse(ps.find_class(compilation, "CUDAGraphMode"))
    assert _record()["vllm_engine"]["settings"]["cudagraph_mode"] == "FULL_AND_PIECEWISE"


@pytest.mark.parametrize("which", VERSIONS)
def test_unsloth_keeps_double_quantized_scales_in_vllm(which):
    """vLLM's BitsAndBytesModelLoader._dequantize_dq expands double-quantized 4-bit scales at load ('at the cost of
    increased memory'); unsloth_zoo replaces it with a no-op where vLLM has it as that method (vllm_utils.py,
    module level), so a pre-quantized NF4 checkpoint with double quantization keeps its 8-bit scales inside vLLM.
    The record's weights were quantized at load without double quantization (bnb_4bit_use_double_quant False in
    its log); docs/memory.md's weight bytes for the pinned checkpoint rely on this."""
    loader = _vllm("vllm/model_executor/model_loader/bitsandbytes_loader.py", which)
    assert not any(isinstance(n, ast.FunctionDef) and n.name == "dequantize_dq" for n in loader.body)
    assert any(isinstance(n, ast.FunctionDef) and n.name == "_dequantize_dq"
               for n in ps.find_class(loader, "BitsAndBytesModelLoader").body)
    _root("unsloth_zoo")
    zoo = (ps.source_root("unsloth_zoo") / ZOO_VLLM_UTILS).read_text()
    assert "_bnb_loader.BitsAndBytesModelLoader._dequantize_dq = _dequantize_dq" in zoo
    assert re.search(r"def _dequantize_dq\(self, quant_states\):\s+return quant_states", zoo)
    assert any("'bnb_4bit_use_double_quant': False" in line and "'bnb_4bit_quant_type': 'fp4'" in line
               for line in _record()["log_lines"]), "the record's quantization is not what docs/gpu-stack.md says"


# Every comparison of vLLM's version in unsloth / unsloth_zoo 2026.10.9 that comes out differently for the pin and for
# the record's vLLM, and why it is off the T4 path (docs/gpu-stack.md lists them). Keyed by file::function: text.
DIFFERING_BRANCHES = {
    "rl_replacements.py::grpo_vllm_sampler_uses_triton: version < Version('0.24.0')":
        "a caveat about ties at the top_k cutoff, only with top_k > 0: the kit samples with top_k=0, top_p=1.0",
    "routing_replay.py::routing_replay_engine_args: _vllm_at_least(0, 21)":
        "MoE routing replay; the t4 model is dense",
    "routing_replay.py::routing_replay_engine_args: _vllm_at_least(0, 22)":
        "MoE routing replay; the t4 model is dense",
    "import_fixes.py::_get_vllm_wheel_variant_hint: TrueVersion(vllm_version) < "
    "TrueVersion(_VLLM_CUDA13_DEFAULT_SINCE)":
        "which wheel to install, in the message after a CUDA mismatch; not on a working load",
}
# Comparisons whose bounds are not constants (a table of wheel URLs, install hints only).
UNRESOLVED = {"import_fixes.py::_get_vllm_wheel_url: TrueVersion(low) <= wanted <= TrueVersion(high)"}


def _vllm_checks():
    checks = []
    for package in ("unsloth_zoo", "unsloth"):
        root = _root(package) / package
        checks += ps.version_checks(root, "vllm", helpers=("_vllm_at_least",))
    return checks


def test_unsloth_takes_the_same_vllm_branches_on_the_t4_path_for_the_pin_and_the_record(t4_settings):
    """Every version check on vLLM in unsloth and unsloth_zoo 2026.10.9, evaluated for the pinned vLLM and the
    record's: the ones that differ are exactly DIFFERING_BRANCHES, none on the T4 path. So the record's load, engine
    arguments and patches are Unsloth's pinned-path ones (docs/gpu-stack.md relies on this), and a new pin that
    crosses another threshold fails here."""
    pinned, record = ps.pinned_version("vllm"), record_vllm()
    checks = _vllm_checks()
    assert len(checks) > 20, f"found only {len(checks)} version checks on vLLM: is the reader broken?"
    for must in ("vllm_utils.py::load_vllm: Version(vllm_version) < Version('0.11.0')",
                 "vllm_utils.py::patch_vllm: Version('0.14.0') <= Version(vllm_version) < Version('0.15.0')"):
        assert must in {c.key for c in checks}, f"the reader misses {must}"
    assert {c.key for c in checks if not c.resolved} == UNRESOLVED
    differing = {c.key for c in checks if c.resolved and c.holds(pinned) != c.holds(record)}
    assert differing == set(DIFFERING_BRANCHES), (
        f"unsloth branches differently on vLLM {pinned} and {record}: new {sorted(differing - set(DIFFERING_BRANCHES))}"
        f", gone {sorted(set(DIFFERING_BRANCHES) - differing)}; say why in DIFFERING_BRANCHES and docs/gpu-stack.md")
    # the one of them inside a GRPO step: off because TRL's defaults sample without truncation
    import dataclasses

    import trl

    from helpers.config import grpo_config_kwargs
    from helpers.runtime import fake_runtime

    kwargs = grpo_config_kwargs(t4_settings, fake_runtime("t4"))
    defaults = {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}
    assert kwargs.get("top_k", defaults["top_k"]) == 0 and kwargs.get("top_p", defaults["top_p"]) == 1.0
    sampler = ast.unparse(ps.find_function(ps.parse("unsloth_zoo", "unsloth_zoo/rl_replacements.py"),
                                           "grpo_vllm_sampler_uses_triton"))
    assert "if top_k == 0 and top_p >= 1.0:\n        return False" in sampler


def test_reader_version_checks(tmp_path):
    """pinned_source.version_checks finds literal, named and chained bounds, local subjects and helper calls."""
    (tmp_path / "m.py").write_text(
        'LIMIT = "0.20.0"\n'
        "def f(vllm_version, x):\n"
        '    a = Version(vllm_version) < Version("0.11.0")\n'
        '    b = Version("0.10.0") <= Version(vllm_version) < Version(LIMIT)\n'
        '    v = Version(importlib_version("vllm"))\n'
        '    FIX = "0.15.0"\n'
        "    c = v >= Version(FIX)\n"
        '    d = Version(x) < Version("1.0")\n'
        "    e = _vllm_at_least(0, 21)\n"
        "    g = Version(low) <= v\n")
    checks = {c.text: c for c in ps.version_checks(tmp_path, "vllm", helpers=("_vllm_at_least",))}
    assert set(checks) == {"Version(vllm_version) < Version('0.11.0')",
                           "Version('0.10.0') <= Version(vllm_version) < Version(LIMIT)",
                           "v >= Version(FIX)", "_vllm_at_least(0, 21)", "Version(low) <= v"}
    assert checks["Version(vllm_version) < Version('0.11.0')"].holds("0.10.2") is True
    assert checks["Version('0.10.0') <= Version(vllm_version) < Version(LIMIT)"].holds("0.19.1") is True
    assert checks["Version('0.10.0') <= Version(vllm_version) < Version(LIMIT)"].holds("0.25.1") is False
    assert checks["v >= Version(FIX)"].holds("0.14.9") is False
    assert checks["_vllm_at_least(0, 21)"].holds("0.21.0") is True
    assert checks["Version(low) <= v"].holds("0.19.1") is None
    assert checks["_vllm_at_least(0, 21)"].key == "m.py::f: _vllm_at_least(0, 21)"
