"""Sharing on CPU with the embedded model: adapter and merged model round trips give identical greedy answers;
export folders are never overwritten silently; the Hugging Face token is never printed or logged."""

import copy
import logging
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from helpers import sharing
from helpers.model import generate, load_cpu
from helpers.config import get_preset

PRESET = replace(get_preset("cpu"), eval_max_new_tokens=8)
PROMPTS = ["What is 2 + 3?", "Sam has 4 apples and eats 1. How many are left?"]
ROOT = Path(__file__).resolve().parents[1]
FAKE_TOKEN = "hf_FAKEtoken1234567890abcdefSECRET"


@pytest.fixture(scope="module")
def trained():
    """The embedded model with a LoRA adapter whose B matrices are no longer zero (as after training)."""
    model, tokenizer = load_cpu(PRESET)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    return model, tokenizer


@pytest.fixture(scope="module")
def cpu_gguf(trained, tmp_path_factory):
    """export_gguf_cpu's file for `trained`, written once for the two tests that read it (an export takes seconds)."""
    [file] = sharing.export_gguf_cpu(trained[0], tmp_path_factory.mktemp("gguf") / "gguf", PRESET).glob("*.gguf")
    return file


def test_adapter_round_trip_gives_identical_greedy_answers(trained, tmp_path):
    model, tokenizer = trained
    path = sharing.save_adapter(model, tokenizer, tmp_path / "adapter")
    assert (path / "adapter_config.json").is_file() and (path / "adapter_model.safetensors").is_file()
    check = sharing.check_reload(model, tokenizer, path, PRESET, prompts=PROMPTS, max_new_tokens=8)
    assert check["match"], check
    with pytest.raises(sharing.SharingError, match="already exists"):
        sharing.save_adapter(model, tokenizer, tmp_path / "adapter")


def test_merged_model_round_trip(trained, tmp_path):
    model, tokenizer = trained
    with_adapter = generate(model, tokenizer, PROMPTS, PRESET, greedy=True)
    # Merging is exact in fp32: the merged model answers like the adapter model.
    p32 = sharing.export_merged(model, tokenizer, tmp_path / "merged32", PRESET, dtype="float32")
    m32, t32 = sharing.load_merged(p32, dtype="float32")
    assert not any("lora" in n for n, _ in m32.named_parameters())  # a plain model: no peft needed
    assert generate(m32, t32, PROMPTS, PRESET, greedy=True) == with_adapter
    assert any("lora_B" in n for n, _ in model.named_parameters())  # the model in memory keeps its adapter
    # The 16-bit export reloads to exactly what was saved.
    p16 = sharing.export_merged(model, tokenizer, tmp_path / "merged16", PRESET)
    m16, t16 = sharing.load_merged(p16)
    assert next(m16.parameters()).dtype == torch.float16
    in_memory = copy.deepcopy(model).merge_and_unload().to(torch.float16)
    assert generate(m16, t16, PROMPTS, PRESET, greedy=True) == generate(in_memory, tokenizer, PROMPTS, PRESET,
                                                                          greedy=True)
    with pytest.raises(sharing.SharingError, match="already exists"):
        sharing.export_merged(model, tokenizer, p16, PRESET)
    assert (p16 / "config.json").is_file()  # untouched


def test_gguf_on_cpu_says_where_it_works(trained, tmp_path):
    model, tokenizer = trained
    with pytest.raises(sharing.SharingError, match="GPU path only"):
        sharing.export_gguf(model, tokenizer, tmp_path / "gguf")
    assert not (tmp_path / "gguf").exists()


def test_gguf_on_cpu_holds_the_merged_weights_and_the_embedded_tokenizer(trained, cpu_gguf):
    """export_gguf_cpu writes the merge with the gguf package: transformers' GGUF loader gives back exactly the merged
    weights (matrices rounded to F16, norms F32), so the file computes the merged model's logits and answers; the
    tokenizer and chat template are the embedded model's own GGUF metadata, unchanged."""
    import gguf
    from transformers import AutoModelForCausalLM

    from helpers.model import embedded_gguf_path

    model, tokenizer = trained
    file, folder = cpu_gguf, cpu_gguf.parent
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file.name)  # plain transformers, dequantized
    merged = copy.deepcopy(model).merge_and_unload().float()
    expected = {n: (t.half().float() if t.ndim == 2 else t) for n, t in merged.state_dict().items()}
    got = loaded.state_dict()
    assert set(got) == set(expected)
    different = [n for n, t in expected.items() if not torch.equal(got[n].float(), t)]
    assert not different, f"{len(different)} weights differ after the GGUF round trip, e.g. {different[:3]}"
    rounded = copy.deepcopy(merged)
    rounded.load_state_dict(expected)
    ids = tokenizer(PROMPTS[1:], return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(loaded(**ids).logits, rounded(**ids).logits)
    assert generate(loaded, tokenizer, PROMPTS, PRESET, greedy=True) == generate(rounded, tokenizer, PROMPTS, PRESET,
                                                                                   greedy=True)
    written, template = gguf.GGUFReader(str(file)), gguf.GGUFReader(str(embedded_gguf_path()))
    kept = [k for k in template.fields if not k.startswith("GGUF.") and k not in ("general.file_type",
                                                                                  "general.quantization_version")]
    assert [k for k in kept if written.fields[k].contents() != template.fields[k].contents()] == []
    assert written.fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_F16
    assert any("lora_B" in n for n, _ in model.named_parameters())  # the model in memory keeps its adapter
    with pytest.raises(sharing.SharingError, match="already exists"):  # refused before the template is even read
        sharing.export_gguf_cpu(model, folder, PRESET, template=folder / "no-such-template.gguf")
    assert [p.name for p in folder.glob("*.gguf")] == [file.name]


def test_export_gguf_given_the_preset_writes_the_cpu_file_on_the_cpu(trained, cpu_gguf, tmp_path):
    """One call for both paths, as export_merged (05's export cell): a model without Unsloth, given the preset, gets
    export_gguf_cpu's F16 file byte for byte, merged from the adapter folder when one is given; never over an export."""
    model, tokenizer = trained
    direct = cpu_gguf  # export_gguf_cpu's own file, merged from the model in memory
    adapter = sharing.save_adapter(model, tokenizer, tmp_path / "adapter")
    [via] = sharing.export_gguf(model, tokenizer, tmp_path / "gguf", PRESET, adapter).glob("*.gguf")
    assert via.name == direct.name and via.read_bytes() == direct.read_bytes()
    with pytest.raises(sharing.SharingError, match="already exists"):
        sharing.export_gguf(model, tokenizer, tmp_path / "gguf", PRESET)


def test_a_folder_holding_files_is_replaced_only_when_asked(tmp_path, capsys):
    """06 saves its final adapter into sharing.fresh_folder: what a user put there is never deleted silently."""
    target = tmp_path / "final_adapter"
    target.mkdir()
    (target / "my_notes.txt").write_text("keep me")
    with pytest.raises(sharing.SharingError, match="already exists and is not empty"):
        sharing.fresh_folder(target, overwrite=False)
    assert (target / "my_notes.txt").read_text() == "keep me"
    assert sharing.fresh_folder(target, overwrite=True) == target
    assert "overwrite=True: replacing" in capsys.readouterr().out
    assert not target.exists() and target.parent.is_dir()


# ------------------------------------------------------------------------------------------ where exports go


@pytest.fixture
def content(tmp_path, monkeypatch):
    """Colab's /content as a temporary folder, with a mounted-looking Drive in it."""
    content = tmp_path / "content"
    (content / "drive" / "MyDrive").mkdir(parents=True)
    monkeypatch.setattr(sharing, "COLAB_CONTENT", content)
    return content


def test_exports_of_a_local_run_stay_in_the_run_folder(content, tmp_path):
    run = tmp_path / "runs" / "course-cpu"
    assert sharing.export_dir(run) == run / "exports"
    assert not sharing.on_drive(sharing.export_dir(run))


def test_exports_of_a_run_on_drive_go_to_the_runtimes_disk_unless_asked(content):
    """USE_DRIVE puts the run folder on Drive; its exports (a merged 1.5B model is 3 GB) stay off Drive by default."""
    run = content / "drive" / "MyDrive" / "grpo-kit" / "runs" / "course"
    assert sharing.on_drive(run)
    local = sharing.export_dir(run)
    assert local == content / "exports" / "course" and not sharing.on_drive(local)
    asked = sharing.export_dir(run, to_drive=True, environ={"COLAB_RELEASE_TAG": "x"})
    assert asked == run / "exports" and sharing.on_drive(asked)


def test_exports_to_drive_of_a_local_run_mount_drive_on_colab_only(content, tmp_path):
    run = tmp_path / "runs" / "course-cpu"
    mounts = []
    (content / "drive" / "MyDrive").rmdir()  # Drive not mounted yet: export_dir mounts it

    def mount(point):
        mounts.append(point)
        (Path(point) / "MyDrive").mkdir(parents=True)

    folder = sharing.export_dir(run, to_drive=True, environ={"COLAB_RELEASE_TAG": "x"}, mount=mount)
    assert mounts == [str(content / "drive")]
    assert folder == content / "drive" / "MyDrive" / "grpo-kit" / "exports" / "course-cpu" and sharing.on_drive(folder)
    with pytest.raises(sharing.SharingError, match="EXPORT_TO_DRIVE = True needs Google Colab"):
        sharing.export_dir(run, to_drive=True, environ={}, mount=mount)
    assert len(mounts) == 1 and not (run / "exports").exists(), "nothing mounted or created off Colab"


# ------------------------------------------------------------------------------------------ token


class FakeUserdata:
    def __init__(self, value=None, error=None):
        self.value, self.error = value, error

    def get(self, key):
        assert key == "HF_TOKEN"
        if self.error:
            raise self.error
        return self.value


def test_token_from_colab_secrets_then_environment():
    assert sharing.hf_token(environ={}, userdata=FakeUserdata(FAKE_TOKEN)) == FAKE_TOKEN
    no_access = FakeUserdata(error=RuntimeError("NotebookAccessError"))
    assert sharing.hf_token(environ={"HF_TOKEN": FAKE_TOKEN}, userdata=no_access) == FAKE_TOKEN


def test_missing_token_explains_how_to_add_it():
    with pytest.raises(sharing.MissingTokenError) as err:
        sharing.hf_token(environ={}, userdata=FakeUserdata(None))
    msg = str(err.value)
    assert "key icon" in msg and "Secrets" in msg and "HF_TOKEN" in msg and "Notebook access" in msg


class FakeApi:
    def __init__(self, fail=False):
        self.calls, self.fail = [], fail

    def create_repo(self, repo_id, token=None, private=None, exist_ok=None):
        self.calls.append(("create_repo", repo_id, token, private))
        logging.getLogger("huggingface_hub").info("creating %s", repo_id)

    def upload_folder(self, folder_path, repo_id, token=None, commit_message=None):
        self.calls.append(("upload_folder", folder_path, repo_id, token))
        if self.fail:
            raise PermissionError(f"401 Unauthorized for token {token}")


def test_push_uses_the_token_but_never_prints_or_logs_it(tmp_path, monkeypatch, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    folder = tmp_path / "merged"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)
    api = FakeApi()
    url = sharing.push_folder(folder, "someone/grpo-math", api=api)
    assert url == "https://huggingface.co/someone/grpo-math"
    assert api.calls[0] == ("create_repo", "someone/grpo-math", FAKE_TOKEN, True) and api.calls[1][3] == FAKE_TOKEN

    with pytest.raises(sharing.SharingError) as err:
        sharing.push_folder(folder, "someone/grpo-math", api=FakeApi(fail=True))
    assert FAKE_TOKEN not in str(err.value) and "<HF_TOKEN hidden>" in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__

    out = capsys.readouterr()
    assert FAKE_TOKEN not in out.out + out.err
    assert FAKE_TOKEN not in caplog.text
    assert not any(FAKE_TOKEN in p.read_text(errors="ignore") for p in tmp_path.rglob("*") if p.is_file())


def test_push_refuses_empty_folders_and_bad_repo_ids(tmp_path):
    with pytest.raises(sharing.SharingError, match="missing or empty"):
        sharing.push_folder(tmp_path / "nothing", "a/b", token=FAKE_TOKEN, api=FakeApi())
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "f").write_text("1")
    with pytest.raises(sharing.SharingError, match="your-username/model-name"):
        sharing.push_folder(tmp_path / "x", "no-slash", token=FAKE_TOKEN, api=FakeApi())


def _token_in_fresh_process(hf_home, environ_token=None):
    """hf_token() in a new interpreter: huggingface_hub reads HF_HOME when it is imported."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH")
           and not k.startswith("COLAB_")}
    env.update(HF_HOME=str(hf_home), **({"HF_TOKEN": environ_token} if environ_token else {}))
    code = ("import sys; from helpers import sharing\n"
            "try:\n    t = sharing.hf_token()\nexcept sharing.MissingTokenError as e:\n    print('MISSING', e); sys.exit(3)\n"
            "import hashlib; print('sha', hashlib.sha256(t.encode()).hexdigest())")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_token_saved_by_hf_auth_login_is_found_and_never_printed(tmp_path):
    """`hf auth login` writes $HF_HOME/token: hf_token() finds it through huggingface_hub.get_token()."""
    import hashlib

    (tmp_path / "token").write_text(FAKE_TOKEN + "\n")
    r = _token_in_fresh_process(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"sha {hashlib.sha256(FAKE_TOKEN.encode()).hexdigest()}" in r.stdout
    assert FAKE_TOKEN not in r.stdout + r.stderr

    empty = tmp_path / "empty"
    empty.mkdir()
    r = _token_in_fresh_process(empty)
    assert r.returncode == 3 and "hf auth login" in r.stdout and FAKE_TOKEN not in r.stdout + r.stderr


# ------------------------------------------------------------------ finding a trained adapter (06 and later)


def _adapter_folder(folder: Path, base: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(f'{{"base_model_name_or_path": "{base}"}}')
    (folder / "adapter_model.safetensors").write_bytes(b"weights")
    return folder


def test_locate_adapter_takes_the_run_folder_first_then_a_hub_repo(tmp_path, monkeypatch):
    """STAGED_ADAPTER = "owner/name" downloads that Hub repo's adapter files once, with the token when there is one
    (a private repo) and without when there is none (a public one); 05's own run folder comes first."""
    import huggingface_hub

    kit = type("Kit", (), {"run_dir": tmp_path / "run", "preset": PRESET})()
    hub = _adapter_folder(tmp_path / "hub-cache", "/cache/SmolLM2-135M-Instruct")
    calls = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda repo_id, token=None, allow_patterns=None: calls.append((repo_id, token)) or str(hub))
    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)
    assert sharing.locate_adapter(kit, staged="teacher/grpo-adapter") == hub
    monkeypatch.setattr(sharing, "hf_token", lambda: (_ for _ in ()).throw(sharing.MissingTokenError("none")))
    assert sharing.locate_adapter(kit, staged="teacher/grpo-adapter") == hub
    assert calls == [("teacher/grpo-adapter", FAKE_TOKEN), ("teacher/grpo-adapter", None)]
    own = _adapter_folder(kit.run_dir / "adapter", "/root/.cache/grpo-kit/SmolLM2-135M-Instruct")
    assert sharing.locate_adapter(kit, staged="teacher/grpo-adapter") == own
    with pytest.raises(sharing.AdapterMissing, match=r"No trained adapter found; looked in: .*Fix, one of"):
        sharing.locate_adapter(type("Kit", (), {"run_dir": tmp_path / "empty", "preset": PRESET})())
