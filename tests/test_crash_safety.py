"""Folders and kvstore values: an interrupted persist leaves the old index or the new one, and
paths are never taken from data (manifest entries, kvstore heads)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.schema import TextNode
from llama_index.core.storage.kvstore import SimpleKVStore

from fakes import HashEmbedding
from llama_index_ext_causalrag import DenseExpert
from llama_index_ext_causalrag.storage import persistence
from llama_index_ext_causalrag.storage.kvstate import HEAD_KEY, KVState
from llama_index_ext_causalrag.storage.persistence import CorruptIndexError

WORDS = "cell protein gene kinase tumor signal receptor membrane".split()


def _expert(seed: int) -> DenseExpert:
    rng = np.random.default_rng(seed)
    nodes = [TextNode(id_=f"s{seed}n{i}", text=" ".join(rng.choice(WORDS, size=5))) for i in range(8)]
    return DenseExpert(nodes, embed_model=HashEmbedding())


def _ids(d: Path) -> set:
    return {n.node_id for n in DenseExpert.from_persist_dir(d, embed_model=HashEmbedding())._st.nodes}


OLD, NEW = {f"s0n{i}" for i in range(8)}, {f"s1n{i}" for i in range(8)}


class Interrupt(KeyboardInterrupt):
    pass


def _persist_interrupted(target: Path, monkeypatch, where: str) -> None:
    """Persist the new index over the old one, with a KeyboardInterrupt at ``where``."""
    real_rename, real_rmtree, real_exchange = os.rename, shutil.rmtree, persistence._exchange
    calls = {"rename": 0, "rmtree": 0}

    def rename(a, b):
        calls["rename"] += 1
        if where == "between the renames" and calls["rename"] == 2:
            raise Interrupt
        return real_rename(a, b)

    def rmtree(p, *a, **k):
        calls["rmtree"] += 1
        if where in ("before the old copy is deleted", "after the exchange") and calls["rmtree"] == 1:
            raise Interrupt
        return real_rmtree(p, *a, **k)

    def exchange(a, b):
        if where == "after the exchange":
            assert real_exchange(a, b)
            raise Interrupt
        return False  # the two-rename path of systems without an atomic exchange

    monkeypatch.setattr(persistence.os, "rename", rename)
    monkeypatch.setattr(persistence.shutil, "rmtree", rmtree)
    monkeypatch.setattr(persistence, "_exchange", exchange)
    if where == "while writing files":
        monkeypatch.setattr(persistence.IndexWriter, "_finish", lambda self: (_ for _ in ()).throw(Interrupt()))
    with pytest.raises(Interrupt):
        _expert(1).persist(target)
    monkeypatch.undo()


@pytest.mark.parametrize(
    "where", ["while writing files", "between the renames", "before the old copy is deleted", "after the exchange"]
)
def test_an_interrupt_at_any_step_of_persist_leaves_the_old_or_the_new_index(where, tmp_path, monkeypatch):
    target = tmp_path / "ix"
    _expert(0).persist(target)
    _persist_interrupted(target, monkeypatch, where)
    assert _ids(target) in (OLD, NEW)
    # the next open swept the previous copies, and the folder takes a new persist
    assert not list(tmp_path.glob(".ix.old-*"))
    _expert(1).persist(target)
    assert _ids(target) == NEW


def test_the_folder_is_swapped_in_one_atomic_exchange_where_the_system_has_one(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "f").write_text("a")
    if persistence._exchange(a, b):  # Linux renameat2(RENAME_EXCHANGE)
        assert (b / "f").read_text() == "a" and not (a / "f").exists()
    else:  # elsewhere the two-rename path and recovery on open hold the guarantee (test above)
        assert (a / "f").exists()


def test_persist_to_a_symlink_writes_through_it(tmp_path):
    real = tmp_path / "real"
    _expert(0).persist(real)
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    _expert(1).persist(link)
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert _ids(link) == NEW and _ids(real) == NEW
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]  # no hidden leftovers


@pytest.mark.parametrize("files", [["embeddings.npy"], None, {"nodes.json": {"size": 3}}, {"nodes.json": "x"}])
def test_a_manifest_of_the_wrong_shape_is_a_corrupt_index_error_naming_it(files, tmp_path):
    d = tmp_path / "ix"
    _expert(0).persist(d)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["files"] = files
    (d / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptIndexError, match="manifest.json"):
        DenseExpert.from_persist_dir(d, embed_model=HashEmbedding())


@pytest.mark.parametrize("rel", ["../outside.json", "/etc/hostname", "a/../../b", "", "a\\..\\b"])
def test_a_manifest_entry_outside_the_folder_is_refused(rel, tmp_path):
    d = tmp_path / "ix"
    _expert(0).persist(d)
    (tmp_path / "outside.json").write_text("{}")
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["files"][rel] = {"size": 2, "sha256": "0" * 64}
    (d / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptIndexError, match="not a plain relative path"):
        DenseExpert.from_persist_dir(d, embed_model=HashEmbedding())


@pytest.mark.parametrize("rel", ["../../escaped.txt", "/tmp/escaped-abs.txt"])
def test_a_hostile_kvstore_head_writes_nothing_outside_its_folder(rel, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    folder = tmp_path / "ix"
    _expert(0).persist(folder)
    kv = SimpleKVStore()
    state = KVState(kv, "ns")
    state.save(folder, "DenseExpert", vector_store=None)
    head = kv.get(HEAD_KEY, collection=state.collection)
    head["files"][rel] = {"encoding": "text", "chunks": 1}
    kv.put(f"{head['generation']}/{rel}/0", {"text": "planted"}, collection=state.collection)
    kv.put(HEAD_KEY, head, collection=state.collection)
    with pytest.raises(CorruptIndexError, match="not a plain relative path"):
        with state.open(("DenseExpert",), "hint", None):
            pass
    written = [p for p in tmp_path.rglob("*escaped*")] + [p for p in Path("/tmp").glob("escaped*")]
    assert written == []


@pytest.mark.parametrize(
    "bad", [{"generation": "../x"}, {"files": ["a"]}, {"files": {"a.json": {"encoding": "zip", "chunks": 1}}}]
)
def test_a_kvstore_head_of_the_wrong_shape_is_a_corrupt_index_error(bad, tmp_path):
    folder = tmp_path / "ix"
    _expert(0).persist(folder)
    kv = SimpleKVStore()
    state = KVState(kv, "ns")
    state.save(folder, "DenseExpert", vector_store=None)
    head = {**kv.get(HEAD_KEY, collection=state.collection), **bad}
    kv.put(HEAD_KEY, head, collection=state.collection)
    with pytest.raises(CorruptIndexError, match="kvstore"):
        with state.open(("DenseExpert",), "hint", None):
            pass


# ---- the LLM answer cache: keys are data, claims of dead processes are taken over ---------------
@pytest.mark.parametrize("key", ["../../../escaped", "/tmp/escaped-abs", "ab/../../escaped", "a" * 63 + "/"])
def test_an_imported_cache_key_never_becomes_a_path(key, tmp_path):
    from llama_index_ext_causalrag.llm.cache import LLMCache

    export = tmp_path / "export.jsonl"
    export.write_text(json.dumps({"key": key, "value": {"text": "planted"}}) + "\n")
    cache = LLMCache(tmp_path / "cache")
    with pytest.raises(ValueError, match="not an LLM cache entry"):
        cache.import_jsonl(export)
    with pytest.raises(ValueError, match="not a cache key"):
        cache.put(key, {"text": "planted"})
    assert [p for p in tmp_path.rglob("*escaped*")] + list(Path("/tmp").glob("escaped-abs*")) == []


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_claim_of_a_process_that_is_gone_is_taken_over_at_once_and_said(tmp_path, caplog):
    import socket

    from llama_index_ext_causalrag.llm.cache import LLMCache

    cache = LLMCache(tmp_path / "cache", claim_ttl=600.0)
    key = LLMCache.key("model", "prompt")
    claim = cache._path(key, ".claim")
    claim.parent.mkdir(parents=True)
    pid = _dead_pid()
    claim.write_text(json.dumps({"pid": pid, "host": socket.gethostname()}))  # fresh: well inside the TTL
    with caplog.at_level("WARNING"):
        assert cache.claim(key)
    assert f"process {pid}" in caplog.text and "gone" in caplog.text
    assert json.loads(claim.read_text())["pid"] == os.getpid()


def test_a_claim_of_a_live_process_or_another_host_waits_for_its_ttl(tmp_path):
    import socket
    import subprocess
    import sys

    from llama_index_ext_causalrag.llm.cache import LLMCache

    cache = LLMCache(tmp_path / "cache", claim_ttl=600.0)
    key = LLMCache.key("model", "prompt")
    claim = cache._path(key, ".claim")
    claim.parent.mkdir(parents=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        claim.write_text(json.dumps({"pid": live.pid, "host": socket.gethostname()}))
        assert not cache.claim(key)
    finally:
        live.kill()
        live.wait()
    claim.write_text(json.dumps({"pid": _dead_pid(), "host": "another-host"}))
    assert not cache.claim(key)  # another host's process cannot be checked from here
    old = claim.stat().st_mtime - 601
    os.utime(claim, (old, old))
    assert cache.claim(key)
