"""Bad input is a clear ValueError at construction (argument, value, fix); empty queries too."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from llama_index.core.schema import Document, TextNode

from fakes import HashEmbedding
from llama_index_ext_causalrag import (
    CausalGraphIndex,
    DenseExpert,
    EntropyFusionRetriever,
    GatedExpansionRetriever,
    HypothesisRetriever,
    MultiGranularityIndex,
    SparseExpert,
    StandardsGraph,
    StructureAwareRetriever,
)
from llama_index_ext_causalrag.validation import caller, check_keywords, public_call, public_method
from standards_fixtures import TOY_RECOVERY, TOY_TRANSPORT


def _nodes(n=6):
    return [TextNode(id_=f"n{i}", text=f"kinase tumor gene signal item{i}") for i in range(n)]


def _std_graph():
    return StandardsGraph.from_documents([Document(text=TOY_TRANSPORT, id_="a"), Document(text=TOY_RECOVERY, id_="b")])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_embeddings_are_rejected(bad):
    emb = np.ones((6, 4), dtype=np.float32)
    emb[3, 1] = bad
    with pytest.raises(ValueError, match=r"DenseExpert embeddings holds 1 NaN or infinite values \(first in row 3\)"):
        DenseExpert(_nodes(), embed_model=HashEmbedding(), embeddings=emb)


@pytest.mark.parametrize("arg", ["query_weight", "beta", "rrf_k", "citation_norm", "smoothing_alpha"])
def test_non_finite_weights_are_rejected(arg):
    g = _std_graph().embed(HashEmbedding())
    with pytest.raises(ValueError, match=rf"{arg} must be a finite number, got nan"):
        StructureAwareRetriever(g, embed_model=HashEmbedding(), **{arg: math.nan})
    with pytest.raises(ValueError, match=r"edge_weights\['cites'\] must be a finite number, got inf"):
        StructureAwareRetriever(g, embed_model=HashEmbedding(), edge_weights={"cites": math.inf})
    with pytest.raises(ValueError, match=r"rrf_weights\[1\] must be a finite number"):
        StructureAwareRetriever(g, embed_model=HashEmbedding(), rrf_weights=(1.0, math.nan))


def test_fusion_rejects_non_finite_length_exponent_and_bad_counts():
    experts = {"dense": {2: DenseExpert(_nodes(), embed_model=HashEmbedding())}}
    with pytest.raises(ValueError, match="length_exponent must be a finite number, got nan"):
        EntropyFusionRetriever(experts, length_exponent=math.nan)
    with pytest.raises(ValueError, match="candidates_per_list must be an int, got float 2.5"):
        EntropyFusionRetriever(experts, candidates_per_list=2.5)


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"k1": -0.1}, r"k1 must be >= 0, got -0.1"),
        ({"b": 1.5}, r"b must be \[0, 1\], got 1.5"),
        ({"b": -0.2}, r"b must be \[0, 1\], got -0.2"),
        ({"k1": math.nan}, r"k1 must be a finite number, got nan"),
    ],
)
def test_bm25_parameters_out_of_range_are_rejected(kw, msg):
    with pytest.raises(ValueError, match=msg):
        SparseExpert(_nodes(), **kw)
    with pytest.raises(ValueError, match=msg.replace("k1", "bm25_k1").replace("b must be ", "bm25_b must be (in )?")):
        StructureAwareRetriever(
            _std_graph().embed(HashEmbedding()), embed_model=HashEmbedding(), **{"bm25_" + k: v for k, v in kw.items()}
        )


@pytest.mark.parametrize("k", [2.5, "5", True, 0])
def test_similarity_top_k_must_be_a_positive_int(k):
    for make in (
        lambda: DenseExpert(_nodes(), embed_model=HashEmbedding(), similarity_top_k=k),
        lambda: SparseExpert(_nodes(), similarity_top_k=k),
        lambda: EntropyFusionRetriever({"sparse": {2: SparseExpert(_nodes())}}, similarity_top_k=k),
        lambda: StructureAwareRetriever(
            _std_graph().embed(HashEmbedding()), embed_model=HashEmbedding(), similarity_top_k=k
        ),
    ):
        with pytest.raises(ValueError, match=rf"similarity_top_k must be .*got .*{k!r}"):
            make()


@pytest.mark.parametrize("nodes", [None, "some text", TextNode(text="one node"), ["a", "b"]])
def test_experts_reject_what_is_not_a_list_of_nodes(nodes):
    with pytest.raises(ValueError, match="DenseExpert nodes must"):
        DenseExpert(nodes, embed_model=HashEmbedding())
    with pytest.raises(ValueError, match="SparseExpert nodes must"):
        SparseExpert(nodes)


def test_sparse_expert_rejects_nodes_without_any_term():
    with pytest.raises(ValueError, match="none has an indexable term"):
        SparseExpert([TextNode(text=""), TextNode(text="   ")])
    with pytest.raises(ValueError, match="none has an indexable term"):
        SparseExpert([TextNode(text="the of and")])


def test_plain_nodes_to_multigranularity_from_nodes_point_to_from_documents():
    with pytest.raises(ValueError, match=r"must come from MultiGranularityNodeParser.*from_documents"):
        MultiGranularityIndex.from_nodes(_nodes(), embed_model=HashEmbedding())


@pytest.mark.parametrize(
    "build",
    [
        lambda docs: MultiGranularityIndex.from_documents(docs, embed_model=HashEmbedding()),
        lambda docs: StandardsGraph.from_documents(docs),
        lambda docs: StructureAwareRetriever.from_documents(docs, embed_model=HashEmbedding()),
        lambda docs: CausalGraphIndex.from_documents(docs, embed_model=HashEmbedding(), show_progress=False),
    ],
)
def test_strings_instead_of_documents_are_rejected(build):
    with pytest.raises(ValueError, match=r"documents must hold Document objects, got a str 'first text'"):
        build(["first text", "second text"])
    with pytest.raises(ValueError, match=r"documents must be a list of Document, got str"):
        build("just one string")


# ---- D: the empty query ------------------------------------------------------------------------
def _retrievers():
    from _causal_graph_helpers import HashEmbedding as CGHash
    from _causal_graph_helpers import corpus

    dense = DenseExpert(_nodes(), embed_model=HashEmbedding())
    sparse = SparseExpert(_nodes())
    cg = CausalGraphIndex.from_documents(corpus(1), embed_model=CGHash(), show_progress=False, max_cluster_size=3)
    return {
        "DenseExpert": dense,
        "SparseExpert": sparse,
        "EntropyFusionRetriever": EntropyFusionRetriever({"dense": {2: dense}, "sparse": {2: sparse}}),
        "StructureAwareRetriever": StructureAwareRetriever(
            _std_graph().embed(HashEmbedding()), embed_model=HashEmbedding()
        ),
        "GatedExpansionRetriever": GatedExpansionRetriever(cg, embed_model=CGHash()),
        "HypothesisRetriever": HypothesisRetriever(sparse),
    }


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_empty_query_is_one_clear_error_sync_and_async(query):
    for name, r in _retrievers().items():
        with pytest.raises(ValueError, match=rf"{name} got an empty query"):
            r.retrieve(query)
        with pytest.raises(ValueError, match=rf"{name} got an empty query"):
            asyncio.run(r.aretrieve(query))


def test_gated_expansion_rejects_non_finite_weights():
    from _causal_graph_helpers import HashEmbedding as CGHash
    from _causal_graph_helpers import corpus

    cg = CausalGraphIndex.from_documents(corpus(1), embed_model=CGHash(), show_progress=False, max_cluster_size=3)
    with pytest.raises(ValueError, match=r"edge_weights\['gate'\] must be a finite number, got nan"):
        GatedExpansionRetriever(cg, embed_model=CGHash(), edge_weights={"gate": math.nan})
    with pytest.raises(ValueError, match=r"min_gain must be a finite number, got inf"):
        GatedExpansionRetriever(cg, embed_model=CGHash(), min_gain=math.inf)


# ---- E: the public call names the error ------------------------------------------------------
class _Facade:
    @public_method
    def verb(self, **kwargs):
        return self._inner(kwargs)

    @public_method
    async def averb(self, **kwargs):
        await asyncio.sleep(0)
        return self._inner(kwargs)

    @classmethod
    @public_method
    def build(cls, **kwargs):
        return cls()._inner(kwargs)

    @public_method
    def outer(self, **kwargs):
        return self.verb(**kwargs)

    def _inner(self, kwargs):
        check_keywords(kwargs, ("ok",))
        return caller()


def test_a_public_method_names_the_errors_of_the_checks_below_it():
    f = _Facade()
    assert f.verb(ok=1) == "_Facade.verb" and _Facade.build() == "_Facade.build"
    assert asyncio.run(f.averb()) == "_Facade.averb"
    assert f.outer() == "_Facade.verb"  # the innermost public call names the error
    for call, name in ((f.verb, "_Facade.verb"), (_Facade.build, "_Facade.build"), (f.outer, "_Facade.verb")):
        with pytest.raises(
            TypeError, match=rf"^{name}\(\) got an unexpected keyword argument 'okk' \(did you mean 'ok'"
        ):
            call(okk=1)
    with pytest.raises(TypeError, match=r"^_Facade\.averb\(\) got an unexpected keyword argument 'no'"):
        asyncio.run(f.averb(no=1))
    with public_call("Outer.call"):
        assert caller() == "Outer.call"
    assert caller() == "this call" and caller("x") == "x"  # nothing outlives its call
