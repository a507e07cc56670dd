import asyncio
import json

import numpy as np
import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import MetadataMode, QueryBundle, TextNode

from fakes import HashEmbedding
from llama_index_ext_causalrag import PROVENANCE_KEY, DenseExpert, SparseExpert, get_provenance

WORDS = "cell protein gene kinase tumor signal receptor membrane enzyme pathway immune virus".split()


def make_nodes(n=60, seed=0):
    rng = np.random.default_rng(seed)
    return [TextNode(id_=f"n{i}", text=" ".join(rng.choice(WORDS, size=8)) + f" item{i}") for i in range(n)]


def test_both_are_retrievers():
    assert BaseRetriever in DenseExpert.__mro__
    assert BaseRetriever in SparseExpert.__mro__


def test_dense_matches_vector_store_index_top10():
    rng = np.random.default_rng(1)
    nodes = make_nodes(200)
    for n in nodes:  # continuous embeddings: no ties, so the order is fully determined
        n.embedding = rng.normal(size=32).tolist()
    embed = HashEmbedding()
    li = VectorStoreIndex(nodes, embed_model=embed).as_retriever(similarity_top_k=10)
    ours = DenseExpert(nodes, embed_model=embed, similarity_top_k=10)
    for _ in range(5):
        q = rng.normal(size=32).tolist()
        a = li.retrieve(QueryBundle(query_str="q", embedding=q))
        b = ours.retrieve(QueryBundle(query_str="q", embedding=q))
        assert [x.node.node_id for x in a] == [x.node.node_id for x in b]
        np.testing.assert_allclose([x.score for x in a], [x.score for x in b], atol=1e-5)


def test_dense_provenance_not_in_llm_text():
    ours = DenseExpert(make_nodes(), embed_model=HashEmbedding(), similarity_top_k=3)
    res = ours.retrieve("kinase")
    assert get_provenance(res[0])["expert"] == "dense"
    assert PROVENANCE_KEY not in res[0].node.get_content(metadata_mode=MetadataMode.LLM)
    assert PROVENANCE_KEY not in res[0].node.get_content(metadata_mode=MetadataMode.EMBED)
    # the caller's node objects are not mutated
    assert PROVENANCE_KEY not in ours.nodes[0].metadata


def test_dense_persist_roundtrip_without_reembedding(tmp_path):
    embed = HashEmbedding()
    nodes = make_nodes()
    ours = DenseExpert(nodes, embed_model=embed, similarity_top_k=5)
    ours.persist(tmp_path)
    assert not list(tmp_path.glob("*.pkl"))
    json.loads((tmp_path / "params.json").read_text())
    loaded = DenseExpert.from_persist_dir(tmp_path, embed_model=embed)
    np.testing.assert_allclose(loaded.embeddings, ours.embeddings, atol=1e-6)
    assert [x.node.node_id for x in loaded.retrieve("tumor gene")] == [
        x.node.node_id for x in ours.retrieve("tumor gene")
    ]


def test_dense_aretrieve_equals_retrieve():
    ours = DenseExpert(make_nodes(), embed_model=HashEmbedding(), similarity_top_k=5)
    a = ours.retrieve("enzyme pathway")
    b = asyncio.run(ours.aretrieve("enzyme pathway"))
    assert [x.node.node_id for x in a] == [x.node.node_id for x in b]


def test_dense_rejects_bad_input():
    with pytest.raises(ValueError, match="empty corpus"):
        DenseExpert([], embed_model=HashEmbedding())
    with pytest.raises(ValueError, match="similarity_top_k"):
        DenseExpert(make_nodes(3), embed_model=HashEmbedding(), similarity_top_k=0)
    with pytest.raises(ValueError, match="shape"):
        DenseExpert(make_nodes(3), embed_model=HashEmbedding(), embeddings=np.zeros((2, 4)))
    with pytest.raises(FileNotFoundError, match="persist"):
        DenseExpert.from_persist_dir("/nonexistent/dir")


def test_sparse_ranks_by_bm25_and_stems():
    nodes = [
        TextNode(id_="a", text="The kinases phosphorylate receptors in signalling."),
        TextNode(id_="b", text="Viruses infect immune cells."),
        TextNode(id_="c", text="A kinase inhibitor blocked the tumour."),
    ]
    sp = SparseExpert(nodes, similarity_top_k=3)
    ids = [x.node.node_id for x in sp.retrieve("kinase")]
    assert set(ids) == {"a", "c"}  # "kinases" stems to "kinas" like "kinase"
    assert get_provenance(sp.retrieve("virus")[0])["expert"] == "sparse"


def test_sparse_stopword_only_query_returns_nothing():
    sp = SparseExpert(make_nodes(), similarity_top_k=3)
    assert sp.retrieve("the of and") == []


def test_sparse_persist_keeps_tokenizer(tmp_path):
    nodes = [
        TextNode(id_="a", text="Die Katzen schlafen im Garten."),
        TextNode(id_="b", text="Der Hund läuft schnell."),
    ]
    sp = SparseExpert(nodes, language="german", similarity_top_k=2)
    sp.persist(tmp_path)
    loaded = SparseExpert.from_persist_dir(tmp_path)
    assert loaded.tokenizer.params() == sp.tokenizer.params()
    assert loaded.tokenizer.language == "german"
    # German stemming survives the reload: "Katze" matches "Katzen"
    assert [x.node.node_id for x in loaded.retrieve("Katze")] == ["a"]
    np.testing.assert_allclose(loaded.score_all("Katze Garten"), sp.score_all("Katze Garten"))


def test_sparse_rejects_unknown_language():
    with pytest.raises(ValueError, match="unknown language 'klingon'"):
        SparseExpert(make_nodes(3), language="klingon")


def test_custom_token_pattern_for_cjk():
    nodes = [TextNode(id_="a", text="量子 计算 研究"), TextNode(id_="b", text="生物 细胞 研究")]
    sp = SparseExpert(nodes, language=None, stemmer=None, stopwords=None, token_pattern=r"(?u)\w+")
    assert sp.retrieve("细胞")[0].node.node_id == "b"


@pytest.mark.parametrize(
    "settings",
    [{}, {"language": "german"}, {"stopwords": ["cell"], "stemmer": None}, {"token_pattern": r"(?u)\b\w+\b"}],
)
def test_sparse_tokens_are_bm25s_tokens(settings):
    # a query's tokens (tokenizer(text)) equal bm25s.tokenization.tokenize's, which tokenizes the nodes
    import bm25s.tokenization

    from _update_helpers import holisqa_biology
    from llama_index_ext_causalrag.experts.sparse import BM25Tokenizer

    docs, questions = holisqa_biology(n_articles=12, n_questions=12)
    texts = [d.text for d in docs] + questions + ["", "the of and", "Zellkulturen wachsen 3.5 mg"]
    tok = BM25Tokenizer(**settings)
    expected = bm25s.tokenization.tokenize(
        texts,
        token_pattern=tok.token_pattern,
        stopwords=tok.stopwords,
        stemmer=tok._stemmer,
        return_ids=False,
        show_progress=False,
    )
    assert tok.tokenize(texts) == expected
    assert [tok(t) for t in texts] == expected
    assert sum(map(len, expected)) > 100
