"""Document evidence with one vote per list (``parent_evidence="lists"``, issue 55): a document is
ranked by each list's best unit of it, weighted and summed over the lists, so a document cut into
many windows gets no more votes than a short document that is one unit."""

from typing import Dict

import numpy as np
import pytest
from llama_index.core import Document
from llama_index.core.schema import QueryBundle

from fakes import WordCountEmbedding as HashEmbedding
from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex
from llama_index_ext_causalrag.multigranularity.entropy import fuse, pool_by_document
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.source import CandidateSource, Ranked
from llama_index_ext_causalrag.multigranularity.windows import document_of_unit
from llama_index_ext_causalrag.text.provenance import get_provenance

DIM = 32


def _two_lists():
    # units 0, 1, 2: document "long"; unit 3: document "short"; unit 4: "other"
    dense = (np.array([0, 1, 2, 3, 4]), np.array([0.8, 0.8, 0.8, 1.0, 0.0]))
    sparse = (np.array([3, 0, 1, 4]), np.array([3.0, 2.5, 2.4, 0.0]))
    return [dense, sparse], {0: "long", 1: "long", 2: "long", 3: "short", 4: "other"}


def test_lists_give_each_list_one_vote_per_document():
    cand, doc_of = _two_lists()
    res = fuse(cand, 5)
    units = pool_by_document(doc_of, res, cand, "units")
    lists = pool_by_document(doc_of, res, cand, "lists")
    assert units["long"] == pytest.approx(res.P[:3].sum())
    assert units["short"] == pytest.approx(res.P[3])
    (w_dense, w_sparse), (p_dense, p_sparse) = res.weights, res.dists
    assert lists["long"] == pytest.approx(w_dense * p_dense[:3].max() + w_sparse * max(p_sparse[1], p_sparse[2]))
    assert lists["short"] == pytest.approx(w_dense * p_dense[3] + w_sparse * p_sparse[0])
    # summed, the three windows outvote the short document that tops both lists; one vote per list, it wins
    assert units["long"] > units["short"] and lists["short"] > lists["long"]


def test_a_document_in_no_list_pools_nothing_and_a_bad_mode_is_refused():
    cand, doc_of = _two_lists()
    res = fuse(cand, 6)
    pooled = pool_by_document({**doc_of, 5: "absent"}, res, cand, "lists")
    assert pooled["absent"] == 0.0
    with pytest.raises(ValueError, match="'votes'"):
        pool_by_document(doc_of, res, cand, "votes")


def test_document_of_unit_reads_the_parser_ids(index):
    assert all(document_of_unit(u.node_id) == u.ref_doc_id for u in index.units)
    assert document_of_unit("plain-node-id") is None
    assert document_of_unit("doc::sx-2") is None


NOTES = [  # six sentences near the query: many windows, each a little below the short document
    "Zebra stripes and herds graze.",
    "Zebra herds with stripes rest.",
    "Zebra stripes on herds shine.",
    "Herds of zebra stripes run.",
    "Zebra herds show stripes.",
    "Stripes of zebra herds fade.",
]


@pytest.fixture(scope="module")
def index():
    docs = [
        Document(id_="long", text=" ".join(NOTES)),
        Document(id_="short", text="Zebra stripes, zebra herds. Herds and stripes."),
        Document(id_="other", text="Lions hunt at night. The shade is cool at noon. Birds sing."),
    ]
    return MultiGranularityIndex.from_documents(docs, granularities=(2, 8), embed_model=HashEmbedding())


def test_as_retriever_ranks_whole_documents_by_their_list_votes(index):
    q = "zebra stripes herds"
    children = index.as_retriever(budget_tokens=None).retrieve(q)
    lists = index.as_retriever(budget_tokens=None, parent_evidence="lists").retrieve(q)
    assert [n.node.ref_doc_id for n in children][:2] == ["long", "short"]  # many windows, summed
    assert [n.node.ref_doc_id for n in lists][:2] == ["short", "long"]  # one vote per list
    assert get_provenance(lists[0])["evidence"] > get_provenance(lists[1])["evidence"]


class NodelessSource(CandidateSource):
    """An in-memory source that hands over ids only, as a store's does: nodes on request."""

    def __init__(self, inner: CandidateSource, units) -> None:
        self.inner, self.by_id = inner, {u.node_id: u for u in units}

    @property
    def keys(self):
        return self.inner.keys

    def lists(self, query_bundle, k, filters=None) -> Dict:
        return {key: Ranked(r.ids, r.scores, r.n_tokens) for key, r in self.inner.lists(query_bundle, k).items()}

    def nodes(self, ids):
        return {i: self.by_id[i] for i in ids}


def test_a_source_without_nodes_pools_documents_as_one_with_them(index):
    memory = index.as_fusion_retriever(similarity_top_k=5, pool_documents=True, document_pool="lists")
    stored = EntropyFusionRetriever(
        NodelessSource(memory.source, index.units), similarity_top_k=5, pool_documents=True, document_pool="lists"
    )
    q = QueryBundle("zebra stripes herds")
    a, b = memory.retrieve(q), stored.retrieve(q)
    assert [n.node.node_id for n in a] == [n.node.node_id for n in b]
    assert [get_provenance(n)["doc_P"] for n in a] == pytest.approx([get_provenance(n)["doc_P"] for n in b])
    assert all(get_provenance(n)["doc_P"] > 0 for n in b)


def _rows(index, doc):
    return {
        tuple(u.metadata["umg_sentence_span"]): index.embeddings[i]
        for i, u in enumerate(index.units)
        if u.ref_doc_id == doc
    }


def _unit_vector(text):
    v = np.asarray(HashEmbedding()._vec(text))
    return v / np.linalg.norm(v)


def test_documents_preset_gives_a_short_document_its_own_vector_and_keeps_the_windows():
    docs = [Document(id_="long", text=" ".join(NOTES)), Document(id_="other", text="Lions hunt. Birds sing.")]
    plain = MultiGranularityIndex.from_documents(docs, granularities=(2, 8), embed_model=HashEmbedding())
    own = MultiGranularityIndex.from_documents(
        docs, granularities=(2, 8), embed_model=HashEmbedding(), preset="documents"
    )
    assert own.preset == "documents" and own.config.promotion.parent_evidence == "lists"
    a, b = _rows(plain, "long"), _rows(own, "long")
    assert set(a) == set(b) and len(b) > 1  # the same windows
    whole = (0, len(NOTES))
    assert np.allclose(b[whole], _unit_vector(" ".join(NOTES)), atol=1e-6)
    assert not np.allclose(a[whole], b[whole], atol=1e-3)  # a mean of sentences without the preset
    assert all(np.allclose(a[s], b[s], atol=1e-6) for s in a if s != whole)


def test_documents_preset_embeds_documents_inserted_after_a_reopen_the_same_way(tmp_path):
    built = MultiGranularityIndex.from_documents(
        [Document(id_="other", text="Lions hunt. Birds sing.")], embed_model=HashEmbedding(), preset="documents"
    )
    built.persist(tmp_path / "idx")
    idx = MultiGranularityIndex.from_persist_dir(tmp_path / "idx", embed_model=HashEmbedding())
    assert idx.preset == "documents"
    idx.refresh_ref_docs([Document(id_="long", text=" ".join(NOTES))])
    assert np.allclose(_rows(idx, "long")[(0, len(NOTES))], _unit_vector(" ".join(NOTES)), atol=1e-6)


def test_a_document_over_the_limit_keeps_the_mean_of_its_sentences():
    from llama_index_ext_causalrag.multigranularity.windows import MultiGranularityNodeParser

    docs = [Document(id_="long", text=" ".join(NOTES))]
    parser = MultiGranularityNodeParser(granularities=(2, 8), parent_granularity=8, document_vector_tokens=5)
    small = MultiGranularityIndex.from_documents(docs, embed_model=HashEmbedding(), parser=parser)
    plain = MultiGranularityIndex.from_documents(docs, granularities=(2, 8), embed_model=HashEmbedding())
    assert np.allclose(small.embeddings, plain.embeddings, atol=1e-6)


@pytest.mark.postgres
def test_documents_preset_on_postgres_ranks_as_in_memory(pg_url, pg_table, tmp_path):
    from llama_index.core import StorageContext

    from store_helpers import RandomEmbedding, pg_docstore, pg_vector_store

    docs = [
        Document(id_=f"d{d}", text=" ".join(f"Study {d} sentence {i} reports topic t{(d + i) % 3}." for i in range(5)))
        for d in range(4)
    ]
    queries = [f"topic t{i % 3} in study {i % 4}" for i in range(8)]
    memory = MultiGranularityIndex.from_documents(docs, embed_model=RandomEmbedding(dim=DIM), preset="documents")
    ctx = StorageContext.from_defaults(
        vector_store=pg_vector_store(pg_url, pg_table, DIM), docstore=pg_docstore(pg_url, pg_table + "_docs")
    )
    MultiGranularityIndex.from_documents(
        docs, embed_model=RandomEmbedding(dim=DIM), preset="documents", storage_context=ctx
    ).persist(tmp_path / "bm25")
    stored = MultiGranularityIndex.from_vector_store(
        pg_vector_store(pg_url, pg_table, DIM),
        pg_docstore(pg_url, pg_table + "_docs"),
        tmp_path / "bm25",
        embed_model=RandomEmbedding(dim=DIM),
    )
    assert stored.preset == "documents"
    for q in queries:
        want = memory.as_retriever(similarity_top_k=4).retrieve(q)
        got = stored.as_retriever(similarity_top_k=4).retrieve(q)
        assert [n.node.node_id for n in got] == [n.node.node_id for n in want], q
        assert [get_provenance(n)["evidence"] for n in got] == pytest.approx(
            [get_provenance(n)["evidence"] for n in want], abs=1e-6
        )
