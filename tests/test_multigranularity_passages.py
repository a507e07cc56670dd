"""Short documents kept whole: ``MultiGranularityNodeParser(whole_document_tokens=N)``."""

from typing import List

import numpy as np
import pytest
from llama_index.core import Document
from llama_index.core.base.embeddings.base import BaseEmbedding

from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex, MultiGranularityNodeParser
from llama_index_ext_causalrag.text.tokens import count_tokens

GRANULARITIES = (2, 4, 8)
SHORT = "Aspirin inhibits platelets. It lowers stroke risk. Trials confirm this effect."
LONG = " ".join(f"Sentence {i} describes drought stress in tropical tree number {i}." for i in range(12))


class RecordingEmbedding(BaseEmbedding):
    """Counts of letters a-z (a text's own vector differs from the mean of its sentences');
    records every text embedded."""

    texts: List[str] = []

    def _vec(self, text: str) -> List[float]:
        v = np.zeros(26)
        for ch in text.lower():
            if "a" <= ch <= "z":
                v[ord(ch) - 97] += 1.0
        return v.tolist()

    def _get_text_embedding(self, text: str) -> List[float]:
        self.texts.append(text)
        return self._vec(text)

    def _get_query_embedding(self, query: str) -> List[float]:
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._vec(query)


def parser(limit):
    return MultiGranularityNodeParser(granularities=GRANULARITIES, parent_granularity=8, whole_document_tokens=limit)


def test_a_short_document_is_one_unit_at_every_granularity_a_long_one_is_windowed():
    limit = count_tokens(SHORT)
    assert count_tokens(LONG) > limit
    units = parser(limit).get_nodes_from_documents([Document(text=SHORT, id_="s"), Document(text=LONG, id_="l")])
    short = [u for u in units if u.ref_doc_id == "s"]
    assert len(short) == 1
    assert short[0].metadata["umg_sentence_span"] == [0, 3]
    assert short[0].metadata["umg_granularities"] == list(GRANULARITIES)
    assert short[0].text == SHORT
    long_units = [u for u in units if u.ref_doc_id == "l"]
    plain = parser(None).get_nodes_from_documents([Document(text=LONG, id_="l")])
    assert [u.metadata["umg_sentence_span"] for u in long_units] == [u.metadata["umg_sentence_span"] for u in plain]


def test_one_token_under_the_length_the_document_is_windowed_again():
    units = parser(count_tokens(SHORT) - 1).get_nodes_from_documents([Document(text=SHORT, id_="s")])
    assert sorted(tuple(u.metadata["umg_sentence_span"]) for u in units) == [(0, 2), (0, 3), (1, 3)]


def test_a_whole_document_unit_gets_the_documents_own_vector_and_its_sentences_are_not_embedded():
    model = RecordingEmbedding()
    model.texts = []
    docs = [Document(text=SHORT, id_="s"), Document(text=LONG, id_="l")]
    index = MultiGranularityIndex.from_documents(
        docs, embed_model=model, embedding_mode="sentences", parser=parser(count_tokens(SHORT))
    )
    assert SHORT in model.texts
    assert "It lowers stroke risk." not in model.texts  # the short document's sentences: not embedded
    assert "Sentence 3 describes drought stress in tropical tree number 3." in model.texts  # the long one's are
    row = [i for i, u in enumerate(index.units) if u.ref_doc_id == "s"]
    own = np.asarray(model._vec(SHORT))
    np.testing.assert_allclose(index.embeddings[row[0]], own / np.linalg.norm(own), rtol=1e-5)
    means = [
        np.asarray(model._vec(s))
        for s in ("Aspirin inhibits platelets.", "It lowers stroke risk.", "Trials confirm this effect.")
    ]
    mean = sum(m / np.linalg.norm(m) for m in means)
    assert not np.allclose(index.embeddings[row[0]], mean / np.linalg.norm(mean), atol=1e-3)
    hits = index.as_retriever(similarity_top_k=2).retrieve("aspirin stroke")
    assert hits and hits[0].node.ref_doc_id == "s"


@pytest.mark.parametrize("bad", [0, -5])
def test_a_length_below_one_token_is_refused(bad):
    with pytest.raises(ValueError, match="whole_document_tokens"):
        parser(bad)
