"""A Document's metadata reaches the LLM prompt on every facade unless the Document excludes the key
(LlamaIndex's convention); our own bookkeeping keys and the provenance never do."""

from __future__ import annotations

import pytest
from llama_index.core import Document
from llama_index.core.schema import MetadataMode

from fakes import HashEmbedding, ScriptedLLM
from llama_index_ext_causalrag import CausalGraphIndex, MultiGranularityIndex, StandardsIndex
from llama_index_ext_causalrag.standards.parser import StructuredDocumentParser
from llama_index_ext_causalrag.text.provenance import PROVENANCE_KEY
from standards_fixtures import TOY_RECOVERY, TOY_TRANSPORT

TOPICS = ["drought", "insulin", "coral", "wheat"]
SHOWN, HIDDEN_FROM_LLM, HIDDEN_FROM_EMBED = "publisher", "reviewer_note", "internal_code"
# bookkeeping keys of ours that must stay out of the LLM's text
OURS = (PROVENANCE_KEY, "umg_", "section_key", "node_kind", "retrievable", "chunk_index")


def _meta() -> dict:
    return dict(
        metadata={SHOWN: "ACME Journal", HIDDEN_FROM_LLM: "do-not-prompt", HIDDEN_FROM_EMBED: "do-not-embed"},
        excluded_llm_metadata_keys=[HIDDEN_FROM_LLM],
        excluded_embed_metadata_keys=[HIDDEN_FROM_EMBED],
    )


def _plain() -> list[Document]:
    return [
        Document(
            id_=f"doc-{t}",
            text=" ".join(f"Sentence {i} of the {t} study reports that {t} causes effect e{i % 5}." for i in range(12)),
            **_meta(),
        )
        for t in TOPICS
    ]


def _standards() -> list[Document]:
    return [
        Document(text=TOY_TRANSPORT, id_="rfc9990", **_meta()),
        Document(text=TOY_RECOVERY, id_="rfc9991", **_meta()),
    ]


FACADES = {
    "MultiGranularityIndex": (MultiGranularityIndex, _plain, "drought study effect"),
    "StandardsIndex": (StandardsIndex, _standards, "When is a frame a PROTOCOL_VIOLATION?"),
    "CausalGraphIndex": (CausalGraphIndex, _plain, "what does drought cause"),
}


@pytest.fixture(scope="module", params=sorted(FACADES))
def built(request):
    cls, docs, query = FACADES[request.param]
    return cls.from_documents(docs(), embed_model=HashEmbedding()), query


def _check_llm_text(text: str) -> None:
    assert f"{SHOWN}: ACME Journal" in text
    assert "do-not-prompt" not in text
    for key in OURS:
        assert key not in text, key


def test_document_keys_reach_llm_and_embed_text_unless_excluded(built):
    index, query = built
    nodes = index.as_retriever().retrieve(query)
    assert nodes
    for n in nodes:
        _check_llm_text(n.node.get_content(MetadataMode.LLM))
        embed = n.node.get_content(MetadataMode.EMBED)
        assert f"{SHOWN}: ACME Journal" in embed and "do-not-embed" not in embed
        assert PROVENANCE_KEY not in embed


def test_document_keys_reach_the_answer_prompt(built):
    index, query = built
    llm = ScriptedLLM(lambda prompt, i: "an answer")
    response = index.as_query_engine(llm=llm).query(query)
    assert response.source_nodes and llm.prompts
    _check_llm_text(llm.prompts[-1])


def test_budget_fitted_pieces_keep_the_visibility():
    index = MultiGranularityIndex.from_documents(_plain(), embed_model=HashEmbedding())
    for n in index.as_retriever(budget_tokens=30).retrieve("drought causes effect e3"):
        _check_llm_text(n.node.get_content(MetadataMode.LLM))


def test_standards_section_path_follows_path_in_text():
    shown = StructuredDocumentParser().parse_document(_standards()[0]).nodes[0]
    hidden = StructuredDocumentParser(path_in_text=False).parse_document(_standards()[0]).nodes[0]
    assert "section_path: " in shown.get_content(MetadataMode.LLM)
    assert "section_path" not in hidden.get_content(MetadataMode.LLM)
    assert f"{SHOWN}: ACME Journal" in hidden.get_content(MetadataMode.LLM)


def test_the_standards_folder_reader_keeps_file_name_out_of_the_text(tmp_path):
    from llama_index_ext_causalrag.standards.pdf import StandardsFolderReader

    (tmp_path / "rfc9990.md").write_text(TOY_TRANSPORT, encoding="utf-8")
    (doc,) = StandardsFolderReader().load_data(tmp_path)
    node = StructuredDocumentParser().parse_document(doc).nodes[0]
    assert node.metadata["file_name"] == "rfc9990.md"
    assert "rfc9990.md" not in node.get_content(MetadataMode.LLM)
    assert "rfc9990.md" not in node.get_content(MetadataMode.EMBED)
