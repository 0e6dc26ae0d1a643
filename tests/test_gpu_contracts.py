"""Contract tests: every keyword the kit passes to unsloth, vLLM and TRL exists in the versions pinned in
requirements.txt (the Colab T4 stack), checked on a CPU machine without importing unsloth or vllm.

How: tests/pinned_source.py downloads the pinned unsloth / unsloth_zoo wheels and the vllm sdist (no binary
wheel, nothing built) into ~/.cache/grpo-kit/pinned-source/ and reads them with `ast`. TRL is installed at the
same pin in the CPU stack, so GRPOConfig is checked with dataclasses.fields.

The **kwargs rule (see pinned_source.unknown_kwargs): a key is accepted by a named parameter, or by a
function whose body reads it from **kwargs by name (kwargs.get("k") / kwargs.pop("k") / kwargs["k"] /
"k" in kwargs). A key that merely falls into **kwargs unread does NOT pass; where a function forwards its
**kwargs to another one (FastLanguageModel.get_peft_model -> FastLlamaModel.get_peft_model), the test names
that delegation and the key is checked against the next function.

These tests need the package index (CI has it). A failed download FAILS the test with the URL; nothing is
skipped.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import time
from pathlib import Path

import pytest

import pinned_source as ps

# ------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def t4_settings():
    from helpers.config import get_preset

    return get_preset("t4")


@pytest.fixture(scope="module")
def t4_runtime():
    from helpers.runtime import fake_runtime

    return fake_runtime("t4")


def _root(name):
    start = time.monotonic()
    try:
        root = ps.source_root(name)
    except ps.PinnedSourceError as err:
        pytest.fail(f"could not obtain the pinned source of {name}: {err}", pytrace=False)
    took = time.monotonic() - start
    if took > 1:
        print(f"[pinned-source] {name}=={ps.pinned_version(name)} fetched+unpacked in {took:.1f}s")
    return root


@pytest.fixture(scope="module")
def unsloth_root():
    return _root("unsloth")


@pytest.fixture(scope="module")
def zoo_root():
    return _root("unsloth_zoo")


@pytest.fixture(scope="module")
def vllm_root():
    return _root("vllm")


FROM_PRETRAINED = [ps.Target("unsloth", "unsloth/models/loader.py", "FastLanguageModel.from_pretrained")]
# FastLanguageModel.get_peft_model(model, *args, **kwargs) forwards to FastLlamaModel.get_peft_model.
GET_PEFT_MODEL = [
    ps.Target("unsloth", "unsloth/models/loader.py", "FastLanguageModel.get_peft_model"),
    ps.Target("unsloth", "unsloth/models/llama.py", "FastLlamaModel.get_peft_model"),
]


def _assert_known(keys, chain):
    problems = ps.unknown_kwargs(sorted(keys), chain)
    assert not problems, "keywords the pinned version does not accept:\n" + "\n".join(
        f"  {k}: {why}" for k, why in problems.items()
    )


# ------------------------------------------------------------------------------------ requirements.txt


def test_requirements_are_exact_pins():
    pins = ps.pinned_versions()
    for name in ("unsloth", "unsloth-zoo", "vllm", "torch", "trl", "transformers", "peft", "datasets",
                 "accelerate", "bitsandbytes", "triton", "math-verify"):
        assert name in pins, f"{name} is not pinned in requirements.txt"


def test_shared_pins_match_the_installed_cpu_stack():
    """The CPU tests only mean something if they run the TRL/transformers/... the Colab stack installs."""
    import importlib.metadata as md

    pins = ps.pinned_versions()
    for name in ("trl", "transformers", "peft", "datasets", "accelerate"):
        assert md.version(name) == pins[name], f"installed {name} {md.version(name)} != requirements.txt {pins[name]}"
    cpu = ps.pinned_versions(ps.REPO_ROOT / "requirements-cpu.txt")
    for name in ("trl", "transformers", "peft", "datasets", "accelerate", "math-verify"):
        assert cpu[name] == pins[name], f"{name}: requirements-cpu.txt {cpu[name]} != requirements.txt {pins[name]}"


def test_trl_version_is_the_pin():
    import trl

    assert trl.__version__ == ps.pinned_version("trl")


def test_vllm_torch_pin_matches(vllm_root):
    """vLLM pins torch exactly; requirements.txt must carry the same torch/torchvision/torchaudio."""
    pins = ps.pinned_versions()
    from packaging.requirements import Requirement

    reqs = {Requirement(r).name.lower(): Requirement(r) for r in ps.metadata_requires("vllm")}
    for name in ("torch", "torchvision", "torchaudio"):
        assert name in reqs, f"vllm metadata has no {name} requirement"
        assert reqs[name].specifier.contains(pins[name]), f"vllm needs {reqs[name]}, requirements.txt has {pins[name]}"
    assert reqs["transformers"].specifier.contains(pins["transformers"], prereleases=True)


# ------------------------------------------------------------------------------- keyword contracts


def test_from_pretrained_accepts_kit_kwargs(t4_settings, unsloth_root):
    from helpers.model import unsloth_load_kwargs

    _assert_known(unsloth_load_kwargs(t4_settings), FROM_PRETRAINED)
    # lab/benchmark_memory.py --emulate-gpu t4 also passes dtype (fp16 on a card that would pick bf16)
    _assert_known({"dtype": None}, FROM_PRETRAINED)


def _forwards_all_kwargs(fn, callee: str) -> bool:
    """Whether fn calls `callee(..., **<fn's own **kwargs>)`: every key it did not name goes on to callee."""
    kw = ps.signature(fn).var_kwargs
    return kw is not None and any(
        isinstance(node, ast.Call) and ast.unparse(node.func) == callee
        and any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kw for k in node.keywords)
        for node in ast.walk(fn))


def test_enforce_eager_reaches_the_vllm_engine(t4_settings, unsloth_root, zoo_root, vllm_root):
    """vllm_enforce_eager=True: FastLanguageModel.from_pretrained(enforce_eager=True) reaches vLLM's engine.

    The path in the pinned sources, for the t4 preset's Qwen2 model: FastLanguageModel.from_pretrained has no such
    parameter and passes its **kwargs whole to dispatch_model.from_pretrained (FastQwen2Model for model_type
    "qwen2"), which passes them to FastLlamaModel.from_pretrained; that copies every argument of unsloth_zoo's
    load_vllm found in its kwargs into the load_vllm call; load_vllm hands enforce_eager to vLLM's EngineArgs."""
    from dataclasses import replace

    from helpers.model import unsloth_load_kwargs

    kwargs = unsloth_load_kwargs(replace(t4_settings, vllm_enforce_eager=True))
    assert kwargs["enforce_eager"] is True and kwargs["fast_inference"] is True
    assert "enforce_eager" not in unsloth_load_kwargs(t4_settings), "the default passes nothing new"

    loader_tree = ps.parse("unsloth", "unsloth/models/loader.py")
    fast_lm = FROM_PRETRAINED[0].node()
    assert "enforce_eager" not in ps.signature(fast_lm).names
    assert "dispatch_model = FastQwen2Model" in ast.unparse(fast_lm), "qwen2 no longer dispatches to FastQwen2Model"
    assert _forwards_all_kwargs(fast_lm, "dispatch_model.from_pretrained")
    engine_kwargs = next(n for n in loader_tree.body if isinstance(n, ast.Assign)
                         and any(getattr(t, "id", None) == "_VLLM_ENGINE_KWARGS" for t in n.targets))
    assert "enforce_eager" in ast.literal_eval(engine_kwargs.value), "Unsloth no longer lists it as a vLLM argument"

    qwen2 = ps.find_function(ps.parse("unsloth", "unsloth/models/qwen2.py"), "FastQwen2Model.from_pretrained")
    assert _forwards_all_kwargs(qwen2, "FastLlamaModel.from_pretrained")
    llama = ast.unparse(ps.find_function(ps.parse("unsloth", "unsloth/models/llama.py"),
                                         "FastLlamaModel.from_pretrained"))
    for line in ("allowed_args = inspect.getfullargspec(load_vllm).args",
                 "if allowed_arg not in load_vllm_kwargs and allowed_arg in kwargs:",
                 "load_vllm_kwargs[allowed_arg] = kwargs[allowed_arg]", "llm = load_vllm(**load_vllm_kwargs)"):
        assert line in llama, f"FastLlamaModel.from_pretrained no longer forwards load_vllm's arguments ({line})"

    load_vllm = ps.find_function(ps.parse("unsloth_zoo", "unsloth_zoo/vllm_utils.py"), "load_vllm")
    assert "enforce_eager" in ps.signature(load_vllm).names
    assert any(isinstance(n, ast.keyword) and n.arg == "enforce_eager" and getattr(n.value, "id", None) == "enforce_eager"
               for n in ast.walk(load_vllm)), "load_vllm no longer passes enforce_eager to vLLM's engine arguments"
    engine_args = ps.find_class(ps.parse("vllm", "vllm/engine/arg_utils.py"), "EngineArgs")
    assert "enforce_eager" in ps.class_fields(engine_args)


def test_trl_has_no_enforce_eager_for_its_own_vllm():
    """The trl-vllm backend refuses vllm_enforce_eager (helpers.config) because TRL 1.15 cannot pass it on."""
    import inspect

    import trl
    from trl.generation.vllm_generation import VLLMGeneration

    assert not [f.name for f in dataclasses.fields(trl.GRPOConfig) if "eager" in f.name]
    assert "enforce_eager" not in inspect.signature(VLLMGeneration.__init__).parameters


def test_get_peft_model_accepts_kit_kwargs(t4_settings, unsloth_root):
    from helpers.model import unsloth_peft_kwargs

    _assert_known(unsloth_peft_kwargs(t4_settings), GET_PEFT_MODEL)


@pytest.mark.parametrize("greedy", [True, False])
def test_sampling_params_accepts_kit_kwargs(t4_settings, vllm_root, greedy):
    from helpers.model import vllm_sampling_kwargs

    cls = ps.find_class(ps.parse("vllm", "vllm/sampling_params.py"), "SamplingParams")
    fields = {f for f in ps.class_fields(cls) if not f.startswith("_")}
    unknown = set(vllm_sampling_kwargs(t4_settings, greedy)) - fields
    assert not unknown, f"vllm=={ps.pinned_version('vllm')} SamplingParams has no field(s) {sorted(unknown)}"


def test_grpo_config_accepts_kit_kwargs(t4_settings, t4_runtime):
    import trl
    from helpers.config import grpo_config_kwargs

    fields = {f.name for f in dataclasses.fields(trl.GRPOConfig) if f.init}
    unknown = set(grpo_config_kwargs(t4_settings, t4_runtime)) - fields
    assert not unknown, f"trl=={trl.__version__} GRPOConfig has no field(s) {sorted(unknown)}"


def test_grpo_config_t4_precision(t4_settings, t4_runtime):
    from helpers.config import grpo_config_kwargs

    kw = grpo_config_kwargs(t4_settings, t4_runtime)
    assert kw.get("bf16") is False and kw.get("fp16") is True, "a T4 (sm_75) has no bf16: GRPOConfig needs fp16"


# ------------------------------------------------------------------------------ attribute contracts


@pytest.mark.parametrize("attr", ["fast_generate", "load_lora", "save_lora"])
def test_unsloth_attaches_model_attributes(unsloth_root, attr):
    hits = ps.attribute_assignments(unsloth_root / "unsloth", attr)
    assert hits, f"unsloth=={ps.pinned_version('unsloth')} never assigns model.{attr}"


def test_fast_language_model_get_peft_model_exists(unsloth_root):
    for target in GET_PEFT_MODEL:
        target.node()  # raises PinnedSourceError when missing


def test_is_bfloat16_supported_exported(unsloth_root):
    ps.find_function(ps.parse("unsloth", "unsloth/models/_utils.py"), "is_bfloat16_supported")
    models_init = ps.parse("unsloth", "unsloth/models/__init__.py")
    imported = {a.asname or a.name for n in models_init.body if isinstance(n, ps.ast.ImportFrom) for a in n.names}
    assert "is_bfloat16_supported" in imported, "unsloth.models does not export is_bfloat16_supported"
    gpu_init = (unsloth_root / "unsloth" / "_gpu_init.py").read_text()
    assert "from .models import *" in gpu_init, "unsloth no longer re-exports unsloth.models on GPU"


def test_vllm_exports_sampling_params(vllm_root):
    init = (vllm_root / "vllm" / "__init__.py").read_text()
    assert '"SamplingParams"' in init, "vllm/__init__.py does not export SamplingParams"
    ps.find_class(ps.parse("vllm", "vllm/sampling_params.py"), "SamplingParams")


def test_unsloth_zoo_reads_kit_env_vars(zoo_root):
    """The env vars the kit sets before import are still read by the pinned unsloth_zoo."""
    src = (zoo_root / "unsloth_zoo" / "vllm_utils.py").read_text()
    for var in ("UNSLOTH_VLLM_STANDBY", "UNSLOTH_VLLM_NO_FLASHINFER"):
        assert var in src, f"unsloth_zoo=={ps.pinned_version('unsloth_zoo')} no longer reads {var}"


# -------------------------------------------------------- the source reader itself (known signatures)


def _tree(src):
    return ps.ast.parse(src)


def test_reader_signature_and_kwargs_rule():
    tree = _tree(
        "class A:\n"
        "    def f(model, r=16, *args, lora_alpha=16, **kw):\n"
        "        x = kw.get('fast_inference'); y = kw['other']; z = 'in_lit' in kw; kw.pop('popped', 0)\n"
        "        return 'just_a_literal'\n"
        "def g(a, /, b, **kwargs):\n"
        "    return h(**kwargs)\n"
        "def h(c=1):\n"
        "    pass\n"
    )
    f = ps.find_function(tree, "A.f")
    sig = ps.signature(f)
    assert sig.names == ("model", "r", "lora_alpha") and sig.var_kwargs == "kw" and sig.var_args == "args"
    assert ps.kwargs_consumed(f) == {"fast_inference", "other", "in_lit", "popped"}
    g = ps.signature(ps.find_function(tree, "g"))
    assert g.names == ("b",)  # positional-only parameters cannot be passed by keyword


def test_reader_class_fields_and_attribute_assignments(tmp_path):
    tree = _tree(
        "class S(msgspec.Struct):\n"
        "    n: int = 1\n"
        "    temperature: float = 1.0\n"
        "    K: ClassVar[int] = 3\n"
        "    _private: int = 0\n"
    )
    assert ps.class_fields(ps.find_class(tree, "S")) == ["n", "temperature", "_private"]
    (tmp_path / "m.py").write_text("def f(model):\n    model.fast_generate = 1\n    setattr(model, 'load_lora', 2)\n")
    assert ps.attribute_assignments(tmp_path, "fast_generate") == ["m.py:2"]
    assert ps.attribute_assignments(tmp_path, "load_lora") == ["m.py:3"]
    assert ps.attribute_assignments(tmp_path, "save_lora") == []


def test_reader_choose_artifact_prefers_pure_wheel_then_sdist():
    links = [
        ps.Link("vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl", "u1", None),
        ps.Link("vllm-0.19.1.tar.gz", "u2", None),
        ps.Link("vllm-0.19.10.tar.gz", "u3", None),
    ]
    assert ps.choose_artifact("vllm", "0.19.1", links).url == "u2"
    links.append(ps.Link("unsloth_zoo-2026.10.9-py3-none-any.whl", "u4", None))
    assert ps.choose_artifact("unsloth-zoo", "2026.10.9", links).url == "u4"
    with pytest.raises(ps.PinnedSourceError):
        ps.choose_artifact("vllm", "9.9.9", links)


def test_reader_requirements_parser(tmp_path):
    req = tmp_path / "r.txt"
    req.write_text("# c\nfoo_bar==1.2.3  # why\nbaz[x]==2.0 ; python_version>'3'\n\n")
    assert ps.pinned_versions(req) == {"foo-bar": "1.2.3", "baz": "2.0"}
    req.write_text("foo>=1\n")
    with pytest.raises(ps.PinnedSourceError):
        ps.pinned_versions(req)


def test_reader_unknown_kwargs_follows_delegation(monkeypatch):
    tree = _tree(
        "class Outer:\n"
        "    def get(model, *args, **kwargs):\n"
        "        return Inner.get(model, *args, **kwargs)\n"
        "class Inner:\n"
        "    def get(model, r=16, **kwargs):\n"
        "        kwargs.get('read_me')\n"
    )
    monkeypatch.setattr(ps, "parse", lambda package, relpath, version=None: tree)
    monkeypatch.setattr(ps, "pinned_version", lambda name, path=None: "0")
    chain = [ps.Target("p", "x.py", "Outer.get"), ps.Target("p", "x.py", "Inner.get")]
    assert ps.unknown_kwargs(["r", "read_me"], chain) == {}
    assert set(ps.unknown_kwargs(["nope"], chain)) == {"nope"}
    assert set(ps.unknown_kwargs(["r"], chain[:1])) == {"r"}  # without the delegation it is unknown


# ------------------------------------------------------------------- sharing (helpers.sharing, GPU only)

SAVE_PY = "unsloth/save.py"
# patch_saving_functions binds these functions to these model attributes (non-vision models).
EXPORTS = {
    "save_pretrained_merged": ps.Target("unsloth", SAVE_PY, "unsloth_generic_save_pretrained_merged"),
    "save_pretrained_gguf": ps.Target("unsloth", SAVE_PY, "unsloth_save_pretrained_gguf"),
}


@pytest.mark.parametrize("attr", sorted(EXPORTS))
def test_patch_saving_functions_binds_export_method(unsloth_root, attr):
    fn = ps.find_function(ps.parse("unsloth", SAVE_PY), "patch_saving_functions")
    bound = set()
    for node in ps.ast.walk(fn):
        if (isinstance(node, ps.ast.Call) and isinstance(node.func, ps.ast.Name)
                and node.func.id == "_bind_saving_method" and len(node.args) == 3
                and isinstance(node.args[0], ps.ast.Name) and isinstance(node.args[2], ps.ast.Constant)):
            bound.add((node.args[2].value, node.args[0].id))
    assert (attr, EXPORTS[attr].qualname) in bound, (
        f"unsloth=={ps.pinned_version('unsloth')} no longer binds model.{attr} to {EXPORTS[attr].qualname}")


def test_save_pretrained_merged_accepts_kit_kwargs(unsloth_root):
    from helpers.sharing import merged_16bit_kwargs

    # called as model.save_pretrained_merged(path, tokenizer, **kwargs)
    _assert_known(["save_directory", "tokenizer", *merged_16bit_kwargs()], [EXPORTS["save_pretrained_merged"]])


def test_save_pretrained_gguf_accepts_kit_kwargs(unsloth_root):
    from helpers.sharing import gguf_kwargs

    _assert_known(["save_directory", "tokenizer", *gguf_kwargs()], [EXPORTS["save_pretrained_gguf"]])


def test_kit_export_methods_are_known_values(unsloth_root):
    """merged_16bit is a save_method the pinned Unsloth handles; q4_k_m is one of its GGUF quantizations."""
    from helpers.sharing import gguf_kwargs, merged_16bit_kwargs

    tree = ps.parse("unsloth", SAVE_PY)
    assert merged_16bit_kwargs()["save_method"] in ps.string_literals(EXPORTS["save_pretrained_merged"].node())
    allowed = next(n for n in tree.body if isinstance(n, ps.ast.Assign)
                   and any(isinstance(t, ps.ast.Name) and t.id == "ALLOWED_QUANTS" for t in n.targets))
    keys = {k.value for k in allowed.value.keys if isinstance(k, ps.ast.Constant)}
    assert gguf_kwargs()["quantization_method"] in keys, f"ALLOWED_QUANTS has no {gguf_kwargs()['quantization_method']}"


def test_grpo_config_with_checkpoints_accepts_kit_kwargs(t4_settings, t4_runtime):
    import trl
    from helpers.config import grpo_config_kwargs

    fields = {f.name for f in dataclasses.fields(trl.GRPOConfig) if f.init}
    kw = grpo_config_kwargs(t4_settings, t4_runtime, save_steps=25)
    assert not set(kw) - fields and kw["save_strategy"] == "steps"


# ------------------------------------------------------------------ TRL's own vLLM imports vs the pinned vLLM
# TRL 1.15 imports vLLM names at module level whenever vllm is installed (trl/generation/*.py), and
# GRPOTrainer imports that module. If one of those names is missing from the pinned vLLM, importing
# GRPOTrainer fails on the GPU stack before Unsloth can patch anything. TRL supports vLLM 0.21-0.31 and only
# warns outside that range, so this test checks the names themselves against vllm==<pin>.


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")[:3] if x.isdigit())


def _guard_holds(test: ast.AST, flags: dict[str, bool], pinned: str) -> bool | None:
    """Evaluate `is_vllm_available(...)` / a flag bound to it; None when the guard is about something else."""
    if isinstance(test, ast.Name):
        return flags.get(test.id)
    if isinstance(test, ast.Call) and getattr(test.func, "id", None) == "is_vllm_available":
        minimum = next((k.value.value for k in test.keywords if k.arg == "min_version"), None)
        return minimum is None or _version_tuple(pinned) >= _version_tuple(minimum)
    return None


def _trl_vllm_imports(pinned: str) -> list[tuple[str, str, str]]:
    import trl

    found = []
    for path in sorted((Path(trl.__file__).parent / "generation").glob("*.py")):
        flags: dict[str, bool] = {}
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.targets) == 1:
                holds = _guard_holds(node.value, flags, pinned)
                if holds is not None and isinstance(node.targets[0], ast.Name):
                    flags[node.targets[0].id] = holds
            branch = node
            while isinstance(branch, ast.If):
                holds = _guard_holds(branch.test, flags, pinned)
                if holds is None:
                    break
                if holds:
                    found += [(path.name, imp.module, alias.name) for imp in branch.body
                              if isinstance(imp, ast.ImportFrom) and imp.level == 0
                              and (imp.module == "vllm" or (imp.module or "").startswith("vllm."))
                              for alias in imp.names]
                    break
                branch = branch.orelse[0] if len(branch.orelse) == 1 else None
    return found


def test_trl_module_level_vllm_imports_exist_in_pinned_vllm(vllm_root):
    pinned = ps.pinned_version("vllm")
    imports = _trl_vllm_imports(pinned)
    assert any(name == "SamplingParams" for _, _, name in imports), "found none of TRL's vLLM imports: reader broken?"
    missing = []
    for trl_file, module, name in imports:
        base = vllm_root.joinpath(*module.split("."))
        source = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if not source.is_file():
            missing.append(f"trl/generation/{trl_file}: module {module} does not exist in vllm=={pinned}")
            continue
        text = source.read_text()
        defined = re.search(rf"^(class|def)\s+{name}\b|^{name}\s*[:=]|\bimport\b.*\b{name}\b|[\"']{name}[\"']",
                            text, re.M)
        if not defined:
            missing.append(f"trl/generation/{trl_file}: {module}.{name} is not defined in vllm=={pinned}")
    assert not missing, "\n".join(missing)


# --------------------------------------------------- facts the GPU-fault fixes rely on (tests/test_gpu_faults.py)


def test_unsloth_sets_vllm_engine_only_with_a_started_engine(unsloth_root):
    """helpers.model.has_vllm_engine tests model.vllm_engine: fast_generate is also set when vLLM was disabled."""
    assert ps.attribute_assignments(unsloth_root / "unsloth", "vllm_engine"), "unsloth never assigns model.vllm_engine"
    llama = (unsloth_root / "unsloth" / "models" / "llama.py").read_text()
    assert "model.fast_generate = make_fast_generate_wrapper(model.generate)" in llama, \
        "the no-vLLM branch no longer sets fast_generate: has_vllm_engine's reason changed, re-read llama.py"
    fixes = (unsloth_root / "unsloth" / "import_fixes.py").read_text()
    assert "VLLM_DISABLED_REASON" in fixes, "helpers.runtime.vllm_disabled_reason reads unsloth.import_fixes.VLLM_DISABLED_REASON"


def test_unsloth_zoo_load_lora_can_send_the_live_adapter(zoo_root):
    fn = ps.find_function(ps.parse("unsloth_zoo", "unsloth_zoo/vllm_utils.py"), "load_lora")
    assert "load_tensors" in ps.signature(fn).names, "check_reload's LIVE_ADAPTER uses load_lora(load_tensors=True)"


def test_unsloth_gguf_goes_to_the_sibling_folder(unsloth_root):
    fn = ps.find_function(ps.parse("unsloth", "unsloth/save.py"), "_gguf_output_directory")
    assert "{save_directory}_gguf" in ps.ast.unparse(fn), "helpers.sharing.gguf_folder mirrors <path>_gguf"


def test_unsloth_zoo_sets_expandable_segments_only_without_standby(zoo_root):
    init = (zoo_root / "unsloth_zoo" / "__init__.py").read_text()
    assert 'os.environ["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"' in init, \
        "helpers.runtime.configure_cuda_allocator copies unsloth_zoo's allocator choice"


def test_unsloth_patches_trl_vllm_generation_as_the_trainer_check_expects(unsloth_root):
    """helpers.model.check_trainer_uses_model_engine reads what Unsloth's patch of trl's VLLMGeneration leaves:
    self.llm = model.vllm_engine, self._unsloth_load_lora = model.load_lora, and a marked generate wrapper."""
    import trl.generation.vllm_generation as vg

    from helpers.model import UNSLOTH_LORA_GENERATE_MARK, UNSLOTH_LORA_LOADER

    src = (unsloth_root / "unsloth" / "models" / "rl_replacements.py").read_text()
    patch = ast.unparse(ps.find_function(ast.parse(src), "vllm_generation_init_patch"))
    assert "self.llm = model.vllm_engine" in patch
    assert f"self.{UNSLOTH_LORA_LOADER} = model.load_lora" in patch
    assert f"_UNSLOTH_GENERATE_WRAPPED = '{UNSLOTH_LORA_GENERATE_MARK}'" in patch
    assert "setattr(generate, _UNSLOTH_GENERATE_WRAPPED, True)" in patch
    assert "vllm_generation.VLLMGeneration.generate = generate" in patch
    # the pinned TRL: the trainer keeps its VLLMGeneration as vllm_generation, which holds the engine as llm
    trainer_src = (Path(vg.__file__).parents[1] / "trainer" / "grpo_trainer.py").read_text()
    assert "self.vllm_generation = VLLMGeneration(" in trainer_src
    assert "self.llm = LLM(" in Path(vg.__file__).read_text()


# ------------------------------------------------------------------------ lab/benchmark_memory.py on a GPU

# The vLLM the offline GPU machine runs (../shared/gpu/vllm.lock: the newest that pins its torch 2.11.0); the
# Colab stack pins another (requirements.txt). The benchmark reads both engines' logs, so both are checked.
GPU_MACHINE_VLLM = "0.25.1"
ENGINE_LOG_FILES = ("vllm/platforms/cuda.py", "vllm/v1/worker/gpu_model_runner.py", "vllm/v1/worker/gpu_worker.py",
                    "vllm/v1/core/kv_cache_utils.py", "vllm/compilation/monitor.py", "vllm/v1/engine/core.py")
# What a %s stands for in each message (the default is a GiB or seconds figure).
ENGINE_LOG_SAMPLES = {"attention_backend": "TRITON_ATTN", "kv_cache_tokens": "87,040", "max_concurrency": "1,024"}


def _as_logged(fmt: str, field: str) -> str:
    """A printf-style message of vLLM's with sample values in place of its %s, %d and %.2f."""
    def sample(m):
        return ENGINE_LOG_SAMPLES.get(field, "1.25") if m.group(2) == "s" else f"%{m.group(1) or ''}{m.group(2)}" % 12.5
    return re.sub(r"%(\.\d+)?([sdf])", sample, fmt)


@pytest.mark.parametrize("version", ["pinned", GPU_MACHINE_VLLM])
def test_the_benchmark_reads_what_vllm_logs_at_engine_start(version):
    """Each of lab/benchmark_memory.ENGINE_LOG's patterns reads a message vLLM really logs (weights, KV cache,
    CUDA graphs, start times, the attention backend), in the Colab pin and in the GPU machine's vLLM."""
    from lab.benchmark_memory import ENGINE_LOG

    version = None if version == "pinned" else version
    messages = set()
    for rel in ENGINE_LOG_FILES:
        messages |= ps.string_literals(ps.parse("vllm", rel, version))
    for field, pattern in ENGINE_LOG.items():
        found = [m for m in messages if re.search(pattern, _as_logged(m, field))]
        assert found, f"vLLM {version or 'pinned'} logs nothing that ENGINE_LOG[{field!r}] reads: re-read its engine start"


@pytest.mark.parametrize("version", ["pinned", GPU_MACHINE_VLLM])
def test_the_benchmark_reads_the_engine_settings_vllm_keeps(version):
    """engine_accounting reads model.vllm_engine.llm_engine.vllm_config.<ENGINE_SETTINGS>: each is a field there."""
    from lab.benchmark_memory import ENGINE_SETTINGS

    version = None if version == "pinned" else version
    llm = ast.unparse(ps.find_class(ps.parse("vllm", "vllm/entrypoints/llm.py", version), "LLM"))
    assert "self.llm_engine = " in llm
    engine = ast.unparse(ps.parse("vllm", "vllm/v1/engine/llm_engine.py", version))
    assert "self.vllm_config = vllm_config" in engine
    classes = {"cache_config": ("vllm/config/cache.py", "CacheConfig"),
               "scheduler_config": ("vllm/config/scheduler.py", "SchedulerConfig"),
               "model_config": ("vllm/config/model.py", "ModelConfig"),
               "compilation_config": ("vllm/config/compilation.py", "CompilationConfig")}
    vllm_config = ps.class_fields(ps.find_class(ps.parse("vllm", "vllm/config/vllm.py", version), "VllmConfig"))
    for path in ENGINE_SETTINGS.values():
        holder, field = path.split(".")
        assert holder in vllm_config
        rel, cls = classes[holder]
        assert field in ps.class_fields(ps.find_class(ps.parse("vllm", rel, version), cls)), f"{cls}.{field}"


def test_t4_emulation_reaches_unsloth_and_vllm_where_it_patches_them(zoo_root):
    """lab.gpu_emulation.emulated_card patches unsloth_zoo.vllm_utils.get_mem_info (Unsloth sizes vLLM from it) and vllm.LLM.__init__
    (load_vllm builds LLM(**engine_args) with its gpu_memory_utilization); TRITON_ATTN is an attention_backend
    EngineArgs takes, and the candidate vLLM has for a card without FlashAttention (sm_75)."""
    from lab.gpu_emulation import T4_ATTENTION_BACKEND

    zoo = ps.parse("unsloth_zoo", "unsloth_zoo/vllm_utils.py")
    assert any(isinstance(n, ast.FunctionDef) and n.name == "get_mem_info" for n in zoo.body)
    for name in ("load_vllm", "approximate_vllm_memory_usage"):
        assert "get_mem_info()" in ast.unparse(ps.find_function(zoo, name)), f"{name} no longer reads get_mem_info"
    load_vllm = ast.unparse(ps.find_function(zoo, "load_vllm"))
    assert "from vllm import LLM" in load_vllm and "llm = LLM(**engine_args)" in load_vllm
    assert "gpu_memory_utilization=actual_gpu_memory_utilization" in load_vllm
    for version in (None, GPU_MACHINE_VLLM):
        engine_args = ps.find_class(ps.parse("vllm", "vllm/engine/arg_utils.py", version), "EngineArgs")
        assert "attention_backend" in ps.class_fields(engine_args)
        cuda = ast.unparse(ps.find_function(ps.parse("vllm", "vllm/platforms/cuda.py", version),
                                            "_get_backend_priorities"))
        assert f"AttentionBackendEnum.{T4_ATTENTION_BACKEND}" in cuda


def test_the_emulations_vllm_rules_are_variables_both_vllms_read_with_the_pins_defaults():
    """lab.gpu_emulation.COLAB_VLLM_RULES makes the GPU machine's vLLM 0.25.1 size and run the engine as the Colab
    pin does: each name is read by 0.25.1's vllm/envs.py (a misspelt one would be ignored in silence), and the value
    set is the pin's own default there."""
    from lab.gpu_emulation import COLAB_VLLM_RULES

    for version in (GPU_MACHINE_VLLM, None):
        envs = ast.unparse(ps.parse("vllm", "vllm/envs.py", version))
        for name, value in COLAB_VLLM_RULES.items():
            assert f"'{name}': lambda" in envs, f"vLLM {version or 'pinned'} reads no {name}"
            default = re.search(rf"os\.getenv\('{name}', (None|'[^']*')\)", envs)
            assert default, f"vLLM {version or 'pinned'}: {name} is read another way: re-read vllm/envs.py"
            if version is None:
                assert default.group(1) == f"'{value}'", f"the pin's default of {name} is {default.group(1)}"
            else:
                assert default.group(1) != f"'{value}'", f"0.25.1 already defaults {name} to {value}: drop it"
