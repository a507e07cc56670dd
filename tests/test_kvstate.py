"""kvstate: a persisted folder as JSON values of a BaseKVStore, checked on open like a folder."""

import json

import numpy as np
import pytest
from llama_index.core.storage.kvstore import SimpleKVStore
from llama_index.core.vector_stores import SimpleVectorStore

from llama_index_ext_causalrag.storage import kvstate as kvstate
from llama_index_ext_causalrag.storage.kvstate import HEAD_KEY, KVState, default_namespace
from llama_index_ext_causalrag.storage.persistence import CorruptIndexError, persist_to
from llama_index_ext_causalrag.validation import public_call

CLASS = "Toy@store"


def write_toy(folder, rows=5):
    with persist_to(folder, CLASS) as w:
        w.save_array("a.npy", np.arange(rows * 3, dtype=np.float32).reshape(rows, 3))
        w.write_json("ids.json", [f"n{i}" for i in range(rows)])
        w.params["note"] = "é and ✓"  # non-ASCII text survives byte for byte


def saved(tmp_path, kv=None, namespace="ix", rows=5):
    kv = kv or SimpleKVStore()
    write_toy(tmp_path / f"src{rows}", rows)
    state = KVState(kv, namespace)
    state.save(tmp_path / f"src{rows}", CLASS, SimpleVectorStore())
    return kv, state


def test_round_trip_is_byte_for_byte_and_values_are_json(tmp_path):
    kv, state = saved(tmp_path)
    values = kv.get_all(collection="ix/causalrag_index")
    json.dumps(values)  # JSON only
    assert {v.get("class") for k, v in values.items() if k == HEAD_KEY} == {CLASS}
    with state.open((CLASS,), "Toy.build", SimpleVectorStore()) as ix:
        np.testing.assert_array_equal(ix.array("a.npy"), np.arange(15, dtype=np.float32).reshape(5, 3))
        assert ix.json("ids.json") == [f"n{i}" for i in range(5)]
        assert ix.params["note"] == "é and ✓"
        for rel in ("a.npy", "ids.json", "params.json", "manifest.json"):
            assert ix.path(rel).read_bytes() == (tmp_path / "src5" / rel).read_bytes()
        np.load(ix.path("a.npy"), allow_pickle=False)


def test_large_files_are_chunked(tmp_path, monkeypatch):
    monkeypatch.setattr(kvstate, "CHUNK_CHARS", 64)
    kv, state = saved(tmp_path, rows=40)
    head = kv.get(HEAD_KEY, collection=state.collection)
    assert head["files"]["a.npy"]["chunks"] > 1 and head["files"]["a.npy"]["encoding"] == "base64"
    with state.open((CLASS,), "Toy.build", SimpleVectorStore()) as ix:
        assert ix.array("a.npy").shape == (40, 3)


def test_saving_again_replaces_the_generation_and_leaves_no_old_values(tmp_path):
    kv, state = saved(tmp_path)
    n_before = len(kv.get_all(collection=state.collection))
    write_toy(tmp_path / "src9", rows=9)
    state.save(tmp_path / "src9", CLASS, SimpleVectorStore())
    assert len(kv.get_all(collection=state.collection)) == n_before
    with state.open((CLASS,), "Toy.build", SimpleVectorStore()) as ix:
        assert ix.array("a.npy").shape == (9, 3)


def test_namespaces_do_not_mix(tmp_path):
    kv, a = saved(tmp_path, namespace="first")
    write_toy(tmp_path / "other", rows=7)
    b = KVState(kv, "second")
    b.check_free()
    b.save(tmp_path / "other", CLASS, SimpleVectorStore())
    with a.open((CLASS,), "x", SimpleVectorStore()) as ix:
        assert ix.array("a.npy").shape == (5, 3)
    with pytest.raises(ValueError, match="already holds a Toy@store"):
        a.check_free()


def test_changed_value_is_reported_naming_the_kvstore(tmp_path):
    kv, state = saved(tmp_path)
    head = kv.get(HEAD_KEY, collection=state.collection)
    key = f"{head['generation']}/ids.json/0"
    kv.put(key, {"text": json.dumps(["n0", "EDITED"])}, collection=state.collection)
    with pytest.raises(
        CorruptIndexError, match=r"the kvstore \(SimpleKVStore, namespace 'ix'\)/ids.json does not match"
    ):
        with state.open((CLASS,), "x", SimpleVectorStore()):
            pass


def test_missing_value_wrong_class_empty_namespace_and_foreign_store(tmp_path):
    kv, state = saved(tmp_path)
    with pytest.raises(ValueError, match="holds a Toy@store, not a Other@store"):
        with state.open(("Other@store",), "x", SimpleVectorStore()):
            pass
    with pytest.raises(FileNotFoundError, match="holds no index; build one with Toy.build"):
        with KVState(kv, "nothing-here").open((CLASS,), "Toy.build", SimpleVectorStore()):
            pass

    class TableStore(SimpleVectorStore):
        table_name: str = "units_b"

    with pytest.raises(ValueError, match="was built into SimpleVectorStore, got TableStore table 'units_b'"):
        with state.open((CLASS,), "x", TableStore()):
            pass
    assert default_namespace(TableStore()) == "units_b" and default_namespace(SimpleVectorStore()) == "causalrag"
    head = kv.get(HEAD_KEY, collection=state.collection)
    kv.delete(f"{head['generation']}/a.npy/0", collection=state.collection)
    with pytest.raises(CorruptIndexError, match="lacks values its head lists"):
        with state.open((CLASS,), "x", SimpleVectorStore()):
            pass


def test_failed_save_leaves_the_previous_index(tmp_path, monkeypatch):
    kv, state = saved(tmp_path)
    before = dict(kv.get_all(collection=state.collection))
    write_toy(tmp_path / "src9", rows=9)
    orig, calls = SimpleKVStore.put, []

    def flaky(self, key, val, collection="data"):
        calls.append(key)
        if len(calls) == 3:
            raise ConnectionRefusedError("kv went away")
        return orig(self, key, val, collection=collection)

    monkeypatch.setattr(SimpleKVStore, "put", flaky)
    with pytest.raises(
        ConnectionError, match=r"Toy.build: cannot write to the kvstore \(SimpleKVStore, namespace 'ix'\)"
    ):
        with public_call("Toy.build"):  # the call its errors name
            state.save(tmp_path / "src9", CLASS, SimpleVectorStore())
    monkeypatch.setattr(SimpleKVStore, "put", orig)
    assert kv.get_all(collection=state.collection) == before
    with state.open((CLASS,), "x", SimpleVectorStore()) as ix:
        assert ix.array("a.npy").shape == (5, 3)


def test_clear_and_bad_namespace(tmp_path):
    kv, state = saved(tmp_path)
    state.clear()
    assert kv.get_all(collection=state.collection) == {}
    with pytest.raises(ValueError, match="namespace must be a non-empty string"):
        KVState(kv, "")
