"""Updates mean what they say, one rule for every index (llama_index_ext_causalrag/validation.py):
invisible text is not indexed at a build and refused by an update, one id once per call, no NUL."""

from __future__ import annotations

import logging

import pytest
from llama_index.core import Document

from fakes import HashEmbedding
from llama_index_ext_causalrag import CausalGraphIndex, MultiGranularityIndex, StandardsIndex
from standards_fixtures import TOY_RECOVERY, TOY_TRANSPORT

INVISIBLE = ["", "  \n\t ", "\u200b\u200d\ufeff"]


def _plain(n: int = 3) -> list[Document]:
    topics = ["drought", "insulin", "coral", "wheat"][:n]
    return [
        Document(id_=f"doc-{t}", text=" ".join(f"Sentence {i} says {t} causes e{i}." for i in range(8))) for t in topics
    ]


def _standards() -> list[Document]:
    return [Document(text=TOY_TRANSPORT, id_="rfc9990"), Document(text=TOY_RECOVERY, id_="rfc9991")]


FACADES = {
    "MultiGranularityIndex": (MultiGranularityIndex, _plain, "drought causes"),
    "StandardsIndex": (StandardsIndex, _standards, "PROTOCOL_VIOLATION frame"),
    "CausalGraphIndex": (CausalGraphIndex, _plain, "drought causes"),
}


def _build(cls, docs):
    return cls.from_documents(docs, embed_model=HashEmbedding(), show_progress=False)


def _answer(index, query):
    return [(n.node.node_id, round(n.score or 0.0, 6)) for n in index.as_retriever(similarity_top_k=20).retrieve(query)]


@pytest.fixture(params=sorted(FACADES))
def facade(request):
    return FACADES[request.param]


@pytest.mark.parametrize("text", INVISIBLE)
def test_a_build_leaves_out_documents_with_no_visible_character_and_names_them(facade, text, caplog):
    cls, docs, query = facade
    with caplog.at_level(logging.WARNING):
        index = _build(cls, [*docs(), Document(id_="blank", text=text)])
    assert "'blank'" in caplog.text and "no visible character" in caplog.text
    assert "blank" not in {n.node.ref_doc_id for n in index.as_retriever(similarity_top_k=50).retrieve(query)}
    assert _answer(index, query) == _answer(_build(cls, docs()), query)


def test_an_index_of_only_invisible_documents_does_not_build(facade):
    cls, _, _ = facade
    with pytest.raises(ValueError):
        _build(cls, [Document(id_=f"b{i}", text=t) for i, t in enumerate(INVISIBLE)])


@pytest.mark.parametrize("text", INVISIBLE)
def test_a_refresh_to_invisible_text_is_refused_with_delete_ref_doc_as_the_fix(facade, text):
    cls, docs, query = facade
    index = _build(cls, docs())
    before = _answer(index, query)
    first = docs()[0].id_
    with pytest.raises(ValueError, match=rf"'{first}'.*no visible character.*delete_ref_doc"):
        index.refresh_ref_docs([Document(id_=first, text=text)])
    with pytest.raises(ValueError, match="no visible character"):
        index.insert(Document(id_=first, text=text))
    assert _answer(index, query) == before


def test_one_id_twice_in_one_call_is_refused_by_name(facade):
    cls, docs, query = facade
    d = docs()
    with pytest.raises(ValueError, match=rf"'{d[0].id_}'.*more than once"):
        _build(cls, [*d, Document(id_=d[0].id_, text=d[-1].text)])
    index = _build(cls, d)
    before = _answer(index, query)
    with pytest.raises(ValueError, match="more than once"):
        index.refresh_ref_docs([Document(id_="x", text="one text here."), Document(id_="x", text="another text.")])
    assert _answer(index, query) == before


def test_nul_characters_are_refused_by_name_before_anything_is_written(facade):
    cls, docs, query = facade
    d = docs()
    with pytest.raises(ValueError, match=r"'nul'.*NUL"):
        _build(cls, [*d, Document(id_="nul", text="A frame\x00 with a NUL.")])
    index = _build(cls, d)
    before = _answer(index, query)
    with pytest.raises(ValueError, match=r"'nul'.*NUL"):
        index.insert(Document(id_="nul", text="A frame\x00 with a NUL."))
    assert _answer(index, query) == before
