"""helpers.reuse: a result is read back only under exactly the key it was saved with."""

import json

from helpers import reuse


def test_a_value_is_read_back_under_its_key_and_under_no_other(tmp_path):
    path = tmp_path / "sub" / f"{reuse.digest({'a': 1})}.json"
    assert reuse.read(path, {"a": 1}) is None  # nothing saved yet
    reuse.write(path, {"a": 1, "files": [("x", 2)]}, {"reward": 0.5})
    assert reuse.read(path, {"a": 1, "files": [("x", 2)]}) == {"reward": 0.5}  # tuples come back as the same key
    assert reuse.read(path, {"a": 2, "files": [("x", 2)]}) is None
    path.write_text("{not json")
    assert reuse.read(path, {"a": 1}) is None
    path.write_text(json.dumps({"value": 1}))
    assert reuse.read(path, {"a": 1}) is None
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # written beside and renamed: no temporary left


def test_the_kit_sources_digest_follows_the_code(tmp_path, monkeypatch):
    (tmp_path / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(reuse, "KIT", tmp_path)
    before = reuse.kit_sources()
    assert reuse.kit_sources() == before
    (tmp_path / "a.py").write_text("x = 2\n")
    assert reuse.kit_sources() != before
    assert reuse.digest({"b": 1, "a": 2}) == reuse.digest({"a": 2, "b": 1})  # the key's order does not matter


def test_a_model_folders_files_are_part_of_a_key(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"12")
    files = reuse.model_files(tmp_path)
    assert files[0][:2] == ["model.safetensors", 2]
    (tmp_path / "model.safetensors").write_bytes(b"123")
    assert reuse.model_files(tmp_path) != files
