"""StandardsIndex updates equal a rebuild on the QUIC RFCs; citations re-link both ways."""

import logging

import numpy as np
import pytest

from _update_helpers import assert_same_results, quic_rfcs
from fakes import HashEmbedding
from llama_index_ext_causalrag import StandardsIndex


@pytest.fixture(scope="module")
def quic():
    docs, questions = quic_rfcs()
    assert docs[-1].doc_id == "rfc9002"
    emb = HashEmbedding()
    return (
        docs,
        questions,
        {
            "five": StandardsIndex.from_documents(docs[:5], embed_model=emb),
            "six": StandardsIndex.from_documents(docs, embed_model=emb),
        },
    )


def _cites_to(index, prefix):
    return [(u, v) for u, v in index.edges("cites") if v.startswith(prefix)]


def test_insert_resolves_placeholders_and_equals_rebuild(quic):
    docs, questions, ref = quic
    inc = StandardsIndex.from_documents(docs[:5], embed_model=HashEmbedding())
    assert _cites_to(inc, "ext::RFC9002"), "rfc9000 cites RFC 9002, outside the five-RFC corpus"
    inc.insert(docs[5])
    assert not _cites_to(inc, "ext::RFC9002")
    assert _cites_to(inc, "rfc9002::")
    assert inc.edges() == ref["six"].edges()
    assert inc.unit_ids == ref["six"].unit_ids
    np.testing.assert_array_equal(inc.embeddings, ref["six"].embeddings)
    assert len(questions) >= 50
    assert_same_results(inc.as_retriever(), ref["six"].as_retriever(), questions)


def test_delete_turns_citations_back_into_placeholders(quic):
    docs, questions, ref = quic
    inc = StandardsIndex.from_documents(docs, embed_model=HashEmbedding())
    inc.delete_ref_doc("rfc9002")
    assert inc.edges() == ref["five"].edges()
    assert _cites_to(inc, "ext::RFC9002")
    assert_same_results(inc.as_retriever(), ref["five"].as_retriever(), questions)


def test_insert_embeds_only_new_units_and_refresh_flags(quic):
    docs, _, ref = quic

    class Counting(HashEmbedding):
        n_texts: int = 0

        def _get_text_embeddings(self, texts):
            self.n_texts += len(texts)
            return [self._vec(t) for t in texts]

    emb = Counting()
    inc = StandardsIndex.from_documents(docs[:5], embed_model=emb)
    before = emb.n_texts
    assert inc.refresh_ref_docs(docs) == [False] * 5 + [True]
    n_new = len([u for u in ref["six"].unit_ids if u.startswith("rfc9002::")])
    assert emb.n_texts - before == n_new


def test_retriever_made_before_an_update_keeps_its_snapshot(quic):
    docs, questions, ref = quic
    inc = StandardsIndex.from_documents(docs[:5], embed_model=HashEmbedding())
    old = inc.as_retriever()
    inc.insert(docs[5])
    assert_same_results(old, ref["five"].as_retriever(), questions[:10])


def test_bad_input(quic, tmp_path, caplog):
    docs, _, ref = quic
    inc = StandardsIndex.from_documents(docs[:2], embed_model=HashEmbedding())
    with caplog.at_level(logging.WARNING):
        inc.delete_ref_doc("rfc0000")
    assert any("'rfc0000' not found, nothing deleted" in r.message for r in caplog.records)
    inc.delete_ref_doc(docs[0].doc_id)
    with pytest.raises(ValueError, match="without units"):
        inc.delete_ref_doc(docs[1].doc_id)
    ref["five"].persist(tmp_path / "std")
    loaded = StandardsIndex.from_persist_dir(tmp_path / "std", embed_model=HashEmbedding())
    with pytest.raises(ValueError, match="from_documents"):
        loaded.insert(docs[5])


def test_refresh_of_a_changed_document_equals_rebuild(quic):
    from llama_index.core.schema import Document

    docs, questions, _ = quic
    docs = docs[:3]
    changed = Document(
        id_=docs[1].doc_id,
        text=docs[1].text + "\n\n# 99. Appendix Zebra\n\nZebra stripes see RFC 9002.\n",
        metadata=docs[1].metadata,
    )
    inc = StandardsIndex.from_documents(docs, embed_model=HashEmbedding())
    assert inc.refresh_ref_docs([docs[0], changed]) == [False, True]
    ref = StandardsIndex.from_documents([docs[0], changed, docs[2]], embed_model=HashEmbedding())
    assert inc.edges() == ref.edges()
    np.testing.assert_array_equal(inc.embeddings, ref.embeddings)
    assert_same_results(inc.as_retriever(), ref.as_retriever(), questions[:30] + ["zebra stripes"])


def test_failed_insert_with_persist_dir_keeps_old_index(quic, tmp_path, monkeypatch):
    docs, questions, ref = quic
    d = tmp_path / "std"
    inc = StandardsIndex.from_documents(docs[:5], embed_model=HashEmbedding())
    inc.persist(d)

    def boom(*a, **k):
        raise RuntimeError("killed while embedding")

    monkeypatch.setattr(HashEmbedding, "_get_text_embeddings", boom)
    with pytest.raises(RuntimeError, match="killed"):
        inc.insert(docs[5], persist_dir=d)
    monkeypatch.undo()
    assert inc.edges() == ref["five"].edges()
    loaded = StandardsIndex.from_persist_dir(d, embed_model=HashEmbedding())
    assert loaded.unit_ids == ref["five"].unit_ids
    inc.insert(docs[5], persist_dir=d)
    loaded = StandardsIndex.from_persist_dir(d, embed_model=HashEmbedding())
    assert loaded.edges() == ref["six"].edges()
    assert_same_results(loaded.as_retriever(), ref["six"].as_retriever(), questions[:20])


def test_queries_during_updates_never_fail(quic):
    import threading

    docs, questions, ref = quic
    inc = StandardsIndex.from_documents(docs, embed_model=HashEmbedding())

    def answers(r, q):
        return tuple((n.node.node_id, round(n.score, 9)) for n in r.retrieve(q))

    qs = questions[:4]
    allowed = [{answers(ref[k].as_retriever(), q) for k in ("five", "six")} for q in qs]
    errors, seen, stop = [], [], threading.Event()

    def query():
        try:
            while not stop.is_set():
                for q, ok in zip(qs, allowed):
                    seen.append(answers(inc.as_retriever(), q) in ok)
        except Exception as e:  # pragma: no cover - the failure being tested for
            errors.append(e)

    t = threading.Thread(target=query)
    t.start()
    for _ in range(2):
        inc.delete_ref_doc("rfc9002")
        inc.insert(docs[5])
    stop.set()
    t.join()
    assert not errors and seen and all(seen)


def test_update_verbs_refuse_unknown_keywords_and_nodes(quic):
    docs, _, _ = quic
    inc = StandardsIndex.from_documents(docs[:5], embed_model=HashEmbedding())
    for call in (
        lambda: inc.insert(docs[5], persist_dirr="x"),
        lambda: inc.refresh_ref_docs(docs, bogus=1),
        lambda: inc.delete_ref_doc("rfc9002", bogus=1),
    ):
        with pytest.raises(TypeError, match="persist_dirr|bogus"):
            call()
    with pytest.raises(NotImplementedError, match="insert"):
        inc.insert_nodes(inc.units[:1])
    inc.delete_ref_doc("rfc9002", delete_from_docstore=True)
    assert "rfc9002" not in {inc.graph.nodes[u].get("doc_id") for u in inc.unit_ids}
