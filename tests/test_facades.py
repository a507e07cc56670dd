"""One facade per method, same verbs; presets are the bench's configurations."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from llama_index.core import Document
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode

from fakes import HashEmbedding, ScriptedLLM
from llama_index_ext_causalrag import CausalGraphIndex, HypothesisRetriever, MultiGranularityIndex, StandardsIndex
from llama_index_ext_causalrag.causal_graph.presets import CAUSALRAG2_PRESETS
from llama_index_ext_causalrag.multigranularity.presets import UMG_PRESETS, UMGConfig
from llama_index_ext_causalrag.pipeline import PostprocessedRetriever
from llama_index_ext_causalrag.standards.presets import STANDARDS_PRESETS
from llama_index_ext_causalrag.text.tokens import count_tokens
from standards_fixtures import TOY_RECOVERY, TOY_TRANSPORT

TOPICS = ["drought", "insulin", "coral", "wheat"]


def _docs(n_sent: int = 40) -> list[Document]:
    docs = []
    for t, topic in enumerate(TOPICS):
        sents = [
            f"Sentence {i} of the {topic} study reports result r{t}x{i} about {topic} and cause c{i % 7}."
            for i in range(n_sent)
        ]
        docs.append(Document(text=" ".join(sents), id_=f"doc-{topic}"))
    return docs


def _ids(nodes):
    return [n.node.node_id for n in nodes]


@pytest.fixture(scope="module")
def umg() -> MultiGranularityIndex:
    return MultiGranularityIndex.from_documents(_docs(), embed_model=HashEmbedding())


@pytest.fixture(scope="module")
def standards() -> StandardsIndex:
    docs = [Document(text=TOY_TRANSPORT, id_="rfc9990"), Document(text=TOY_RECOVERY, id_="rfc9991")]
    return StandardsIndex.from_documents(docs, embed_model=HashEmbedding())


@pytest.fixture(scope="module")
def causal() -> CausalGraphIndex:
    return CausalGraphIndex.from_documents(_docs(12), embed_model=HashEmbedding(), show_progress=False)


def test_umgp_default_is_the_measured_preset_fitted_to_the_budget(umg):
    assert umg.preset == "umgp" and umg.config == UMG_PRESETS["umgp"]
    assert umg.parent_granularity == max(umg.granularities) == 32
    r = umg.as_retriever(budget_tokens=60)
    assert isinstance(r, PostprocessedRetriever) and isinstance(r, BaseRetriever)
    out = r.retrieve("drought study result cause c3")
    assert out and sum(count_tokens(n.node.get_content(metadata_mode=MetadataMode.NONE)) for n in out) <= 60
    promote = r.postprocessors[0]
    assert (promote.evidence_key, promote.fit_to_budget, promote.fit_mode) == ("P", True, "sentences")
    unbudgeted = umg.as_retriever().retrieve("drought study result cause c3")
    assert sum(count_tokens(n.node.get_content(metadata_mode=MetadataMode.NONE)) for n in unbudgeted) > 60


def test_umg_presets_and_overrides(umg):
    fusion_only = umg.as_retriever(similarity_top_k=5, preset="umg")
    assert fusion_only.postprocessors == [] and len(fusion_only.retrieve("insulin result")) == 5
    eq = umg.as_retriever(weighting="equal")
    assert eq.retriever.weighting == "equal"
    with pytest.raises(ValueError, match="8-sentence parents|parent_granularity=8"):
        umg.as_retriever(preset="paper")  # the paper promotes to 8-sentence windows: another build
    paper = MultiGranularityIndex.from_documents(_docs(), embed_model=HashEmbedding(), preset="paper")
    assert paper.parent_granularity == 8
    assert paper.as_retriever().postprocessors[0].fit_to_budget is False
    with pytest.raises(ValueError, match="unknown preset"):
        MultiGranularityIndex.from_documents(_docs(), embed_model=HashEmbedding(), preset="best")
    with pytest.raises(ValueError):
        UMGConfig(fit_mode="paragraphs")


def test_every_facade_has_the_same_verbs(umg, standards, causal, tmp_path: Path):
    q = {"umg": "drought study result", "standards": "Overview text about a transport", "causal": "coral cause c2"}
    for name, index in (("umg", umg), ("standards", standards), ("causal", causal)):
        r = index.as_retriever()
        out = r.retrieve(q[name])
        assert out, name
        assert _ids(asyncio.run(r.aretrieve(q[name]))) == _ids(out), name
        engine = index.as_query_engine()
        assert isinstance(engine, RetrieverQueryEngine)
        resp = engine.query(q[name])
        assert _ids(resp.source_nodes) == _ids(out), name  # offline: retrieval only, no answer text
        index.persist(tmp_path / name)
        loaded = type(index).from_persist_dir(tmp_path / name, embed_model=HashEmbedding())
        assert _ids(loaded.as_retriever().retrieve(q[name])) == _ids(out), name
        if name != "standards":  # the standards method has no postprocessor
            assert hasattr(index, "as_postprocessor")


def test_query_engine_uses_the_given_llm_and_the_method_prompt(causal):
    llm = ScriptedLLM(lambda prompt, i: "ANSWER: coral")
    engine = causal.as_query_engine(llm=llm)
    resp = engine.query("coral cause c2")
    assert "coral" in str(resp)
    prompts = engine.get_prompts()
    from llama_index_ext_causalrag.causal_graph.prompts import DEFAULT_CAUSAL_QA_PROMPT

    assert DEFAULT_CAUSAL_QA_PROMPT.get_template() in [p.get_template() for p in prompts.values()]


def test_standards_default_is_the_tuned_preset(standards):
    r = standards.as_retriever()
    assert r.config == STANDARDS_PRESETS["standards"]
    assert (r.rrf_weights, r.num_seeds, r.beta, r.identifier_weight, r.citation_norm) == ((1.0, 0.25), 1, 0.0, 2.0, 1.0)
    paper = standards.as_retriever(preset="paper")
    assert (paper.rrf_weights, paper.num_seeds) == ((1.0, 1.0), 3)
    assert standards.as_retriever(similarity_top_k=3).config.similarity_top_k == 3
    assert standards.embeddings is not None  # embedded in from_documents


def test_causal_graph_presets(causal):
    default = causal.as_retriever()  # the measured default: propagation, no causal filter
    assert type(default).__name__ == "PropagationRetriever" and default.config == CAUSALRAG2_PRESETS["passages"]
    assert causal.as_retriever(preset="causalrag2", use_filter=False).config == CAUSALRAG2_PRESETS["causalrag2"]
    assert type(causal.as_retriever(preset="causalrag2")).__name__ == "PostprocessedRetriever"  # with the filter
    assert causal.as_retriever(preset="nogates", use_filter=False).use_gates is False
    assert causal.as_retriever(preset="flat", use_filter=False).use_hierarchy is False
    assert len(causal.as_retriever(similarity_top_k=3).retrieve("coral cause c2")) <= 3


def test_hypothesis_retriever_from_defaults(umg):
    base = umg.as_retriever(preset="umg", similarity_top_k=10)
    r = HypothesisRetriever.from_defaults(base, budget_tokens=200)
    out = r.retrieve("Which study reports result r2x3? A. drought B. coral")
    assert out and sum(count_tokens(n.node.get_content(metadata_mode=MetadataMode.NONE)) for n in out) <= 200


def test_bench_entries_are_the_presets(umg, tmp_path):
    from causalrag_bench import standards as sb
    from causalrag_bench import umg as ub
    from causalrag_bench.registry import BenchContext
    from causalrag_bench.types import EvalDataset

    docs = _docs()
    ctx = BenchContext(dataset=EvalDataset("toy", "toy", docs, []), embed_model=HashEmbedding(), work_dir=tmp_path)
    bench_umgp = ub.build_umgp(ctx)
    user_umgp = MultiGranularityIndex.from_documents(docs, embed_model=HashEmbedding()).as_retriever(
        similarity_top_k=ctx.top_k
    )
    assert type(bench_umgp) is type(user_umgp)
    assert bench_umgp.postprocessors[0].model_dump(exclude={"docstore"}) == user_umgp.postprocessors[0].model_dump(
        exclude={"docstore"}
    )
    fb, fu = bench_umgp.retriever, user_umgp.retriever
    assert (fb.similarity_top_k, fb.weighting, fb.length_exponent, fb.candidates_per_list) == (
        fu.similarity_top_k,
        fu.weighting,
        fu.length_exponent,
        fu.candidates_per_list,
    )
    assert [(e, g) for e, g, _ in fb.experts] == [(e, g) for e, g, _ in fu.experts]
    q = "drought study result cause c3"
    assert _ids(bench_umgp.retrieve_for_budget(q, 128)) == _ids(user_umgp.retrieve_for_budget(q, 128))
    sdocs = [Document(text=TOY_TRANSPORT, id_="rfc9990"), Document(text=TOY_RECOVERY, id_="rfc9991")]
    sctx = BenchContext(dataset=EvalDataset("toy", "toy", sdocs, []), embed_model=HashEmbedding(), work_dir=tmp_path)
    bench_std = sb.build_standards(sctx)
    assert bench_std.config == STANDARDS_PRESETS["standards"].with_settings(similarity_top_k=sctx.top_k)
    assert sb.build_standards_paper(sctx).config == STANDARDS_PRESETS["paper"].with_settings(
        similarity_top_k=sctx.top_k
    )


def test_pipeline_fits_every_preset_to_the_budget_and_reuses_its_first_stage(umg):
    calls = []
    fusion_only = umg.as_retriever(similarity_top_k=20, preset="umg", budget_tokens=50)
    inner = fusion_only.retriever
    orig = inner._retrieve
    inner._retrieve = lambda qb: calls.append(qb.query_str) or orig(qb)
    out = fusion_only.retrieve("insulin result cause")
    assert out and sum(count_tokens(n.node.get_content(metadata_mode=MetadataMode.NONE)) for n in out) <= 50
    asyncio.run(fusion_only.aretrieve("coral result"))
    n_calls = len(calls)
    assert fusion_only.retrieve_for_budget("coral result", 30)
    assert len(calls) == n_calls  # the budget refit reuses the first stage of the last query


def test_postprocessor_and_preset_checks_follow_the_index(umg):
    assert umg.as_postprocessor().evidence_key == "P"
    assert umg.as_postprocessor(evidence_key=None).evidence_key is None
    paper = MultiGranularityIndex.from_documents(_docs(8), embed_model=HashEmbedding(), preset="paper")
    with pytest.raises(ValueError, match="8-sentence parents"):
        paper.as_retriever(preset="umgp")  # promotes to the coarsest windows: another build
    assert paper.as_retriever(preset="umgp", parent_granularity=8).postprocessors[0].evidence_key == "P"


def test_standards_index_keeps_its_preset_across_persist(tmp_path):
    docs = [Document(text=TOY_TRANSPORT, id_="rfc9990"), Document(text=TOY_RECOVERY, id_="rfc9991")]
    custom = STANDARDS_PRESETS["standards"].with_settings(num_seeds=2)
    for preset in ("paper", custom):
        index = StandardsIndex.from_documents(docs, embed_model=HashEmbedding(), preset=preset)
        index.persist(tmp_path / "p")
        loaded = StandardsIndex.from_persist_dir(tmp_path / "p", embed_model=HashEmbedding())
        want = STANDARDS_PRESETS["paper"] if preset == "paper" else custom
        assert loaded.as_retriever().config == want


def test_causal_graph_unit_embeddings_are_persisted_once_computed(causal, tmp_path):
    causal.as_retriever()  # computes the unit embeddings
    causal.persist(tmp_path / "cg")
    loaded = CausalGraphIndex.from_persist_dir(tmp_path / "cg", embed_model=HashEmbedding())
    assert loaded._unit_embeddings is not None
    import numpy as np

    np.testing.assert_array_equal(loaded._unit_embeddings, causal.unit_embeddings)
