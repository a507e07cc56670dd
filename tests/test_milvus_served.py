"""A MultiGranularityIndex served by a real Milvus server (Milvus's C++ engine, milvus-lite 2.5's
binary, started by the session): every list, dense and BM25, answered by Milvus and equal to the
in-memory index's (ids; scores within a relative 1e-5),
through updates; filters pushed into Milvus; opened in another process without reading a unit;
a reader seeing another process's write at its next query; bad servers and collections refused
by name."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from llama_index.core import Document, StorageContext
from llama_index.core.schema import QueryBundle, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from llama_index_ext_causalrag.multigranularity import HNSW, IVF, MultiGranularityIndex
from llama_index_ext_causalrag.storage.milvus.driver import MilvusDriver
from llama_index_ext_causalrag.storage.milvus.filters import milvus_filter
from llama_index_ext_causalrag.storage.milvus.store import MilvusUnits
from store_helpers import RandomEmbedding, pg_docstore, pg_kvstore
from test_multigranularity_store import DIM, GS, QUERIES, assert_equal_to_memory, ids, make_docs

pytestmark = pytest.mark.milvus
TESTS = Path(__file__).parent


@pytest.fixture
def name():
    return f"t_{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def memory_index():
    return MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM))


def build(uri, name, docstore=None, docs=None, **kwargs):
    ctx = StorageContext.from_defaults(
        vector_store=MilvusUnits(uri=uri, collection_name=name),
        docstore=docstore if docstore is not None else SimpleDocumentStore(),
    )
    return MultiGranularityIndex.from_documents(
        docs or make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM), storage_context=ctx, **kwargs
    )


def rows_of(uri, name):
    """``{g: sorted pks}`` of each granularity's collection."""
    store = MilvusUnits(uri=uri, collection_name=name)
    return {
        g: sorted(r["pk"] for r in store.client.query(f"{name}__g{g}", filter="", output_fields=["pk"], limit=16384))
        for g in GS
    }


def units_of(index):
    return {g: sorted(index.units[i].node_id for i in index._state.by_g[g]) for g in GS}


def assert_lists_equal(index, memory_index, queries=QUERIES, k=5):
    """Every list (dense and BM25, each granularity) of each query is memory's: scores within a
    relative 1e-5 (Milvus sums float32; BM25 as bm25s's: Milvus's sign and (k1 + 1) removed),
    ids in memory's order, except that units tied with the k-th score at the cut may be others
    of memory's units with that score (Milvus's top-k heap keeps any of a tie)."""
    embed = RandomEmbedding(dim=DIM)
    for q in queries:
        bundle = QueryBundle(q, embedding=embed.get_query_embedding(q))
        got = index.as_fusion_retriever().source.lists(bundle, k)
        want = memory_index.as_fusion_retriever().source.lists(bundle, 1000)
        assert sorted(got) == sorted(want) and len(got) == 2 * len(GS)
        for key, g in got.items():
            scores, w_scores = list(map(float, g.scores)), list(map(float, want[key].scores))
            assert scores == pytest.approx(w_scores[:k], rel=1e-5), (q, key)
            if not scores:
                continue
            cut = pytest.approx(scores[-1], rel=1e-5)
            tied = {i for i, s in zip(want[key].ids, w_scores) if s == cut}
            head = [i for i, s in zip(g.ids, scores) if s != cut]
            w_ids = want[key].ids
            assert head == w_ids[: len(head)], (q, key)
            assert set(g.ids[len(head) :]) <= tied, (q, key)


def test_every_list_is_milvus_s_and_equals_in_memory_through_updates(milvus_uri, name, memory_index):
    """The C++ engine keeps BM25's document frequencies and mean length per collection over every
    live row (inserted or deleted a moment ago): after each write the lists are still memory's."""
    index = build(milvus_uri, name)
    assert index._backend.layout == "milvus"
    client = MilvusUnits(uri=milvus_uri, collection_name=name).client
    for g in GS:  # the sparse index's algorithm, and the analyzer that keeps our tokens whole
        sparse = client.describe_index(f"{name}__g{g}", "sparse")
        assert (sparse["index_type"], sparse["inverted_index_algo"]) == ("SPARSE_INVERTED_INDEX", "DAAT_MAXSCORE")
        terms = next(f for f in client.describe_collection(f"{name}__g{g}")["fields"] if f["name"] == "terms")
        assert "whitespace" in json.dumps(terms["params"].get("analyzer_params"))
    assert_lists_equal(index, memory_index)
    assert_equal_to_memory(index, memory_index)
    new = Document(text=" ".join(f"Sentence {i} on drought forest trees r9x{i}." for i in range(9)), id_="doc9")
    index.insert(new)
    memory = MultiGranularityIndex.from_documents(
        make_docs() + [new], granularities=GS, embed_model=RandomEmbedding(dim=DIM)
    )
    assert rows_of(milvus_uri, name) == units_of(memory)
    assert_lists_equal(index, memory, queries=QUERIES[:8])
    changed = Document(text="Sentence 0 on zeolite catalysis. Sentence 1 on zeolite cracking.", id_="doc9")
    index.refresh_ref_docs([changed])
    memory.refresh_ref_docs([changed])
    assert rows_of(milvus_uri, name) == units_of(memory)
    assert_lists_equal(index, memory, queries=QUERIES[:8] + ["zeolite catalysis"])
    assert index.as_retriever().retrieve("zeolite catalysis")[0].node.ref_doc_id == "doc9"
    index.delete_ref_doc("doc9")
    assert rows_of(milvus_uri, name) == units_of(memory_index)
    assert_lists_equal(index, memory_index, queries=QUERIES[:8])
    assert_equal_to_memory(index, memory_index, queries=QUERIES[:5])


def test_stored_embeddings_come_back_as_given_and_the_earlier_cosine_layout_still_serves(
    milvus_uri, name, memory_index, tmp_path, monkeypatch
):
    """Rows hold the unit vector (searched by IP) and its length: get_nodes gives the embedding
    back. Collections written before that layout (COSINE over the embeddings as given, no norm
    field) are read and written as they are: after a reopen and an insert the lists are memory's."""
    from llama_index_ext_causalrag.storage.milvus import rows

    first = [u.node_id for u in memory_index.units[:20]]

    def stored(store):
        got = {n.node_id: n.embedding for n in store.get_nodes(node_ids=first)}
        return np.asarray([got[i] for i in first])

    build(milvus_uri, name)
    store = MilvusUnits(uri=milvus_uri, collection_name=name)
    assert store.client.describe_index(f"{name}__g{GS[0]}", "embedding")["metric_type"] == "IP"
    want = np.asarray(memory_index._state.embeddings[:20])
    assert stored(store) == pytest.approx(want, rel=1e-5, abs=1e-6)
    vec = [3.0, -4.0] + [0.0] * (DIM - 2)  # a row of length 5: stored as its unit vector and 5
    store.add([TextNode(id_="len5", embedding=vec, metadata={"umg_granularity": GS[0]})])
    assert store.get_nodes(node_ids=["len5"])[0].embedding == pytest.approx(vec)
    assert store.client.query(f"{name}__g{GS[0]}", filter='pk == "len5"', output_fields=["norm"])[0]["norm"] == 5.0
    with monkeypatch.context() as m:
        m.setattr(rows, "DENSE_METRIC", rows.COSINE)
        old = build(milvus_uri, name + "_old")
    old.persist(tmp_path / "old")
    store = MilvusUnits(uri=milvus_uri, collection_name=name + "_old")
    assert store.client.describe_index(f"{name}_old__g{GS[0]}", "embedding")["metric_type"] == "COSINE"
    reopened = MultiGranularityIndex.from_vector_store(
        store, old.docstore, persist_dir=tmp_path / "old", embed_model=RandomEmbedding(dim=DIM)
    )
    assert_lists_equal(reopened, memory_index, queries=QUERIES[:8])
    new = Document(text=" ".join(f"Sentence {i} on drought forest trees r9x{i}." for i in range(9)), id_="doc9")
    reopened.insert(new)
    memory = MultiGranularityIndex.from_documents(
        make_docs() + [new], granularities=GS, embed_model=RandomEmbedding(dim=DIM)
    )
    assert_lists_equal(reopened, memory, queries=QUERIES[:8])
    assert stored(store) == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_tokens_milvus_s_standard_analyzer_would_split_score_as_in_memory(milvus_uri, name):
    """Our tokens reach BM25 unchanged (the whitespace tokenizer): ``foo_bar`` stays one term
    (the standard analyzer makes it two), non-ASCII and CJK words stay whole."""
    docs = [
        Document(text=" ".join(f"Sentence {i} names {w} in study {d}." for i in range(6)), id_=f"w{d}")
        for d, w in enumerate(["snake_case_gene", "snake case gene", "naïve cells", "蛋白质 folding", "foo_bar_2"])
    ]
    memory = MultiGranularityIndex.from_documents(docs, granularities=GS, embed_model=RandomEmbedding(dim=DIM))
    index = build(milvus_uri, name, docs=docs)
    queries = ["snake_case_gene", "snake case gene", "naïve", "蛋白质", "foo_bar_2"]
    assert_lists_equal(index, memory, queries=queries, k=3)
    top = index.as_retriever(similarity_top_k=3).retrieve("snake_case_gene")
    assert top[0].node.ref_doc_id == "w0"


def test_filters_are_pushed_into_milvus_before_each_list_s_top_k(milvus_uri, name, memory_index):
    index = build(milvus_uri, name)
    one = MetadataFilters(filters=[MetadataFilter(key="title", value="paper 1")])
    either = MetadataFilters(
        filters=[MetadataFilter(key="title", value="paper 1"), MetadataFilter(key="title", value="paper 3")],
        condition=FilterCondition.OR,
    )
    listed = MetadataFilters(
        filters=[MetadataFilter(key="title", value=["paper 0", "paper 2"], operator=FilterOperator.IN)]
    )
    for filters, docs in ((one, {"doc1"}), (either, {"doc1", "doc3"}), (listed, {"doc0", "doc2"})):
        for q in QUERIES[:6]:
            got = index.as_retriever(similarity_top_k=10, filters=filters).retrieve(q)
            assert ids(got) == ids(memory_index.as_retriever(similarity_top_k=10, filters=filters).retrieve(q)), q
            assert got and {n.node.ref_doc_id for n in got} <= docs
    bundle = QueryBundle(QUERIES[0], embedding=RandomEmbedding(dim=DIM).get_query_embedding(QUERIES[0]))
    lists = index.as_fusion_retriever().source.lists(bundle, 5, filters=one)
    want = memory_index.as_fusion_retriever().source.lists(bundle, 5, filters=one)
    assert {key: r.ids for key, r in lists.items()} == {key: r.ids for key, r in want.items()}
    assert all(len(r.ids) == 5 for (_, g), r in lists.items() if g < 8)  # full lists of doc1's units, not short
    nobody = MetadataFilters(filters=[MetadataFilter(key="no_such_key", value="x")])
    assert index.as_retriever(filters=nobody).retrieve(QUERIES[0]) == []


def test_filter_expressions_bind_their_values():
    f = MetadataFilters(
        filters=[
            MetadataFilter(key="year", value=2020, operator=FilterOperator.GTE),
            MetadataFilter(key="tag", value='a" or 1==1', operator=FilterOperator.NE),
        ]
    )
    assert milvus_filter(f) == '((metadata["year"] >= 2020) and (not (metadata["tag"] == "a\\" or 1==1")))'
    with pytest.raises(ValueError, match="key 'a\"b'"):
        milvus_filter(MetadataFilters(filters=[MetadataFilter(key='a"b', value=1)]))


def test_a_connection_closed_for_too_many_pings_is_opened_again_once_and_other_errors_are_not(monkeypatch):
    """pymilvus checks a shared connection idle for 30 s before handing it out; milvus-lite's C++
    server closes it for pymilvus's keepalive pings as the check goes out (GOAWAY too_many_pings):
    a clean-clone run failed here. One new client is asked for then; an unreachable server is not."""
    import pymilvus

    from llama_index_ext_causalrag.storage.milvus.store import connect

    class Refused(Exception):
        pass

    calls = []

    def client(errors):
        def make(**kw):
            calls.append(kw)
            if len(calls) <= errors:
                try:
                    raise Refused('details = "Too many pings"')
                except Refused as e:  # pymilvus raises its own error from the gRPC one
                    raise pymilvus.MilvusException(code=2, message="Fail connecting to server") from e
            return "client"

        return make

    monkeypatch.setattr(pymilvus, "MilvusClient", client(1))
    assert connect("http://127.0.0.1:1") == "client" and len(calls) == 2
    calls.clear()
    monkeypatch.setattr(pymilvus, "MilvusClient", client(2))  # refused twice: the server is named
    with pytest.raises(ConnectionError, match="cannot reach Milvus at 'http://127.0.0.1:1'"):
        connect("http://127.0.0.1:1")
    assert len(calls) == 2
    calls.clear()

    def unreachable(**kw):
        calls.append(kw)
        raise pymilvus.MilvusException(code=2, message="Fail connecting to server on 127.0.0.1:1")

    monkeypatch.setattr(pymilvus, "MilvusClient", unreachable)
    with pytest.raises(ConnectionError, match="cannot reach Milvus"):
        connect("http://127.0.0.1:1")
    assert len(calls) == 1


def test_hnsw_is_refused_by_milvus_lite_by_name_and_reopening_with_another_ann(milvus_uri, name, tmp_path):
    """Milvus Lite's C++ engine builds FLAT and IVF_FLAT only (HNSW needs Milvus Standalone or
    Distributed): ann=HNSW(...) is an error naming ann=None, with no collection left behind; an
    index built exact refuses a reopen with ann=HNSW(...)."""
    with pytest.raises(ValueError, match=r"builds no HNSW index.*ann=None \(exact search\) or ann=IVF"):
        build(milvus_uri, name, ann=HNSW(m=8, ef_construction=64, ef_search=500))
    assert MilvusUnits(uri=milvus_uri, collection_name=name).lists().existing() == []
    index = build(milvus_uri, name + "_exact")
    index.persist(tmp_path / "ix")
    store = MilvusUnits(uri=milvus_uri, collection_name=name + "_exact")
    with pytest.raises(ValueError, match="ann"):
        MultiGranularityIndex.from_vector_store(
            store, index.docstore, persist_dir=tmp_path / "ix", embed_model=RandomEmbedding(dim=DIM), ann=HNSW(m=16)
        )


def test_an_ivf_index_answers_as_memory_and_a_reopen_with_another_ann_is_refused(
    milvus_uri, name, memory_index, tmp_path
):
    """ann=IVF(...) builds IVF_FLAT on every collection (nlist as given) and sends its nprobe with
    each dense search. The lists are memory's: nprobe = nlist scans every cluster (Standalone), and
    Milvus Lite searches a collection of fewer than 100,000 rows exactly (docs/stores.md). A reopen
    may change nprobe only; another nlist, HNSW or exact search is an error naming the build's ann."""
    ann = IVF(nlist=8, nprobe=8)
    index = build(milvus_uri, name, ann=ann)
    client = MilvusUnits(uri=milvus_uri, collection_name=name).client
    for g in GS:
        dense = client.describe_index(f"{name}__g{g}", "embedding")
        assert (dense["index_type"], int(dense["nlist"])) == ("IVF_FLAT", 8)
    assert_lists_equal(index, memory_index, queries=QUERIES[:8])
    assert_equal_to_memory(index, memory_index, queries=QUERIES[:5])
    index.persist(tmp_path / "ix")

    def reopen(**kwargs):
        return MultiGranularityIndex.from_vector_store(
            MilvusUnits(uri=milvus_uri, collection_name=name),
            index.docstore,
            persist_dir=tmp_path / "ix",
            embed_model=RandomEmbedding(dim=DIM),
            **kwargs,
        )

    assert reopen()._backend.ann == ann
    narrow = reopen(ann=IVF(nlist=8, nprobe=1))
    lists = narrow.as_fusion_retriever().source.tables
    assert lists.ann == IVF(nlist=8, nprobe=1)
    sent = []
    search = lists.client.search
    lists.client.search = lambda *a, **kw: sent.append(kw["search_params"]) or search(*a, **kw)
    assert narrow.as_retriever(similarity_top_k=3).retrieve(QUERIES[0])
    dense = [p for p in sent if p["metric_type"] != "BM25"]
    assert len(dense) == len(GS) and all(p["params"] == {"nprobe": 1} for p in dense)
    for other in (IVF(nlist=16, nprobe=8), HNSW()):
        with pytest.raises(ValueError, match=r"built with IVF\(nlist=8\).*pass IVF\(nlist=8\) with the nprobe"):
            reopen(ann=other)
    # collections whose vector index is not the one the index recorded (built by hand, or another build)
    exact = MilvusUnits(uri=milvus_uri, collection_name=name).lists(GS, DIM, None)
    with pytest.raises(ValueError, match=rf"{name}__g2' has a IVF_FLAT vector index \(nlist=8\).*ann=IVF\(nlist=8"):
        exact.check_ann()
    wider = MilvusUnits(uri=milvus_uri, collection_name=name).lists(GS, DIM, IVF(nlist=16, nprobe=4))
    with pytest.raises(ValueError, match="nlist=8"):
        wider.check_ann()


def test_bad_ivf_settings_are_refused_naming_the_value_and_the_fix(milvus_uri, name):
    with pytest.raises(ValueError, match="IVF nlist must be an int in \\[1, 65536\\], got 0"):
        IVF(nlist=0)
    with pytest.raises(ValueError, match="IVF nlist must be an int.*got 'auto'"):
        IVF(nlist="auto")
    with pytest.raises(ValueError, match="nprobe=64 exceeds nlist=16.*pass nprobe <= 16"):
        IVF(nlist=16, nprobe=64)
    with pytest.raises(TypeError, match=r"ann must be None.*IVF\(nlist=..., nprobe=...\), got 'ivf'"):
        build(milvus_uri, name, ann="ivf")
    with pytest.raises(ValueError, match="builds approximate indexes in PostgreSQL or Milvus.*drop ann="):
        MultiGranularityIndex.from_documents(
            make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM), ann=IVF()
        )
    assert MilvusUnits(uri=milvus_uri, collection_name=name).lists().existing() == []


def test_bad_servers_and_collections_are_refused_by_name_before_any_embedding(milvus_uri, name, tmp_path):
    model = RandomEmbedding(dim=DIM)
    ctx = StorageContext.from_defaults(vector_store=MilvusUnits(uri="http://127.0.0.1:9", collection_name=name))
    with pytest.raises(ConnectionError, match="127.0.0.1:9"):
        MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=model, storage_context=ctx)
    assert model.text_calls == 0
    index = build(milvus_uri, name)
    index.persist(tmp_path / "ix")
    with pytest.raises(ValueError, match="already holds nodes"):
        build(milvus_uri, name)
    with pytest.raises(ValueError, match=f"{name}_other__g2"):
        MultiGranularityIndex.from_vector_store(
            MilvusUnits(uri=milvus_uri, collection_name=name + "_other"),
            index.docstore,
            persist_dir=tmp_path / "ix",
            embed_model=model,
        )
    other = RandomEmbedding(dim=16)
    with pytest.raises(ValueError, match="rejects 16-dimensional"):
        MultiGranularityIndex.from_documents(
            make_docs(),
            granularities=GS,
            embed_model=other,
            storage_context=StorageContext.from_defaults(
                vector_store=MilvusUnits(uri=milvus_uri, collection_name=name)
            ),
        )
    assert other.text_calls == 0


def test_llamaindex_s_milvus_vector_store_plugs_in(milvus_uri, name, memory_index):
    from llama_index.vector_stores.milvus import MilvusVectorStore

    store = MilvusVectorStore(uri=milvus_uri, dim=DIM, collection_name=name)
    index = MultiGranularityIndex.from_documents(
        make_docs(),
        granularities=GS,
        embed_model=RandomEmbedding(dim=DIM),
        storage_context=StorageContext.from_defaults(vector_store=store),
    )
    assert index._backend.layout == "milvus"
    assert_equal_to_memory(index, memory_index, queries=QUERIES[:5])


READER = """
import json, sys
sys.path.insert(0, {tests!r})
from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex
from llama_index_ext_causalrag.storage.pg import driver as pg_driver
from llama_index_ext_causalrag.storage.milvus.store import MilvusUnits
from store_helpers import RandomEmbedding, pg_docstore, pg_kvstore
reads = []
real = pg_driver.read_nodes
pg_driver.read_nodes = lambda *a, **k: reads.append(1) or real(*a, **k)
index = MultiGranularityIndex.from_vector_store(MilvusUnits(uri={uri!r}, collection_name={name!r}),
    pg_docstore({pg!r}, {name!r} + "_docs"), kvstore=pg_kvstore({pg!r}, {name!r} + "_kv"),
    embed_model=RandomEmbedding(dim={dim}))
opened_reads = len(reads)
got = [[n.node.node_id for n in index.as_retriever(similarity_top_k=10).retrieve(q)] for q in {queries!r}]
print(json.dumps({{"opened_reads": opened_reads, "ids": got}}))
"""


@pytest.mark.postgres
def test_another_process_opens_without_reading_a_unit_and_readers_see_writes(milvus_uri, name, memory_index, pg_url):
    docstore = pg_docstore(pg_url, name + "_docs")
    index = build(milvus_uri, name, docstore=docstore, kvstore=pg_kvstore(pg_url, name + "_kv"))
    script = READER.format(tests=str(TESTS), uri=milvus_uri, name=name, pg=pg_url, dim=DIM, queries=QUERIES[:6])
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["opened_reads"] == 0  # the open reads parameters only; the queries read their nodes
    assert got["ids"] == [ids(memory_index.as_retriever(similarity_top_k=10).retrieve(q)) for q in QUERIES[:6]]
    reader = MultiGranularityIndex.from_vector_store(
        MilvusUnits(uri=milvus_uri, collection_name=name),
        pg_docstore(pg_url, name + "_docs"),
        kvstore=pg_kvstore(pg_url, name + "_kv"),
        embed_model=RandomEmbedding(dim=DIM),
    )
    retriever = reader.as_retriever(similarity_top_k=10)  # made before the write, not remade
    text = " ".join(f"Sentence {i}: zeolite catalysis cracking in study 0." for i in range(9))
    assert not any(n.node.ref_doc_id == "doc7" for n in retriever.retrieve("zeolite catalysis cracking"))
    index.insert(Document(text=text, id_="doc7"))
    assert any(n.node.ref_doc_id == "doc7" for n in retriever.retrieve("zeolite catalysis cracking"))
    index.delete_ref_doc("doc7")
    assert not any(n.node.ref_doc_id == "doc7" for n in retriever.retrieve("zeolite catalysis cracking"))


def test_a_server_restarted_between_two_queries_of_one_index_object(name, memory_index, tmp_path):
    """Killed (SIGKILL) between two queries: a query while the server is down raises
    ConnectionError naming it; the query after the restart answers, the same as before."""
    from causalrag_bench.milvusserver import kill, start_server, stop

    proc, uri = start_server(str(tmp_path / "data"))
    try:
        index = build(uri, name)
        retriever = index.as_retriever(similarity_top_k=10)
        before = ids(retriever.retrieve(QUERIES[0]))
        kill(proc)
        with pytest.raises(ConnectionError, match="cannot reach Milvus"):  # down: an error naming it, not nothing
            retriever.retrieve(QUERIES[0])
        proc, _ = start_server(str(tmp_path / "data"), port=int(uri.rsplit(":", 1)[1]))
        assert (
            ids(retriever.retrieve(QUERIES[0]))
            == before
            == ids(memory_index.as_retriever(similarity_top_k=10).retrieve(QUERIES[0]))
        )
    finally:
        stop(proc)


@pytest.mark.postgres
def test_a_server_killed_mid_build_leaves_nothing_served_and_the_rebuild_succeeds(name, pg_url, tmp_path, monkeypatch):
    """The build names the lost server; the journal in the kvstore sweeps the rows it wrote once
    the server is back: the reopen finds no index (nothing half-written is served), a rebuild works."""
    from causalrag_bench.milvusserver import kill, start_server, stop
    from llama_index_ext_causalrag.storage.milvus import served as milvus_served

    proc, uri = start_server(str(tmp_path / "data"))
    port = int(uri.rsplit(":", 1)[1])
    real, calls = milvus_served.MilvusLists.insert, []

    def insert_then_die(self, units, embeddings=None):
        calls.append(len(units))
        real(self, units, embeddings)
        kill(proc)  # the server is killed after the build's first batch of rows is in

    monkeypatch.setattr(milvus_served.MilvusLists, "insert", insert_then_die)
    monkeypatch.setattr(MilvusDriver, "vector_batch_size", lambda self: 64)  # the build's rows in several batches
    docstore, kv = pg_docstore(pg_url, name + "_docs"), pg_kvstore(pg_url, name + "_kv")
    try:
        with pytest.raises(ConnectionError, match="Milvus|127.0.0.1"):
            build(uri, name, docstore=docstore, kvstore=kv, docs=make_docs(30))  # rows in several batches
        assert len(calls) >= 2  # the first batch was written, a later one met the dead server
        monkeypatch.setattr(milvus_served.MilvusLists, "insert", real)
        proc, _ = start_server(str(tmp_path / "data"), port=port)
        with pytest.raises((FileNotFoundError, ValueError)):
            MultiGranularityIndex.from_vector_store(
                MilvusUnits(uri=uri, collection_name=name), docstore, kvstore=kv, embed_model=RandomEmbedding(dim=DIM)
            )
        store = MilvusUnits(uri=uri, collection_name=name)
        assert store.lists().count() == 0  # the journal swept the rows the build wrote
        index = build(uri, name, docstore=docstore, kvstore=kv)
        assert ids(index.as_retriever(similarity_top_k=10).retrieve(QUERIES[0]))
    finally:
        stop(proc)


def test_query_fitting_on_a_served_index_says_it_fits_by_the_fused_evidence(milvus_uri, name, caplog):
    index = build(milvus_uri, name)
    with caplog.at_level("WARNING"):
        got = index.as_retriever(fit_evidence="query", budget_tokens=64).retrieve(QUERIES[0])
    assert got and "fitting by the fused evidence" in caplog.text


def test_a_milvus_lite_folder_of_the_3x_server_is_refused_naming_the_fix(milvus_uri, tmp_path):
    """milvus-lite 3.x (a pure-Python server) keeps a Lite "file" as a folder, the C++ engine as
    one SQLite file, and neither reads the other's: the error says which wrote it and the fix
    (checked by hand the other way round, 3.x opening the C++ engine's file)."""
    old = tmp_path / "umg.db"
    (old / "collections").mkdir(parents=True)  # the layout milvus-lite 3.x writes
    with pytest.raises(ConnectionError, match=r"written by milvus-lite 3\.x.*rebuild the index into a new file"):
        MilvusUnits(uri=str(old), collection_name="umg").lists().existing()


def test_a_milvus_lite_file_of_the_cpp_engine_opened_under_milvus_lite_3x_is_refused_naming_the_fix(
    tmp_path, monkeypatch
):
    """The reverse: under milvus-lite 3.x (faked: its version, and the open failing as its
    server's does), a Lite file the C++ engine wrote (one SQLite file) is an error naming
    milvus-lite 2.5.1 and the rebuild."""
    import importlib.metadata

    import pymilvus

    from llama_index_ext_causalrag.storage.milvus import store as milvus_store

    cpp = tmp_path / "umg.db"
    cpp.write_bytes(b"SQLite format 3\x00")  # the layout the C++ engine writes: one file

    def open_fails(**kwargs):
        raise RuntimeError("Open local milvus failed")

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "3.2.0")
    monkeypatch.setattr(pymilvus, "MilvusClient", open_fails)
    with pytest.raises(ConnectionError, match=r"written by milvus-lite 2\.x.*milvus-lite==2\.5\.1.*rebuild"):
        milvus_store.connect(str(cpp))
