"""StandardsIndex's settings: one typed config per stage, composed by the presets, one default per setting."""

import inspect
import json

import pytest
from llama_index.core import Document

from _persisted_helpers import rewrite_json
from fakes import HashEmbedding
from llama_index_ext_causalrag.experts.sparse import SparseExpert
from llama_index_ext_causalrag.standards.graph import StandardsGraph
from llama_index_ext_causalrag.standards.index import StandardsIndex
from llama_index_ext_causalrag.standards.presets import (
    SETTINGS,
    STANDARDS_PRESETS,
    StructureAwareConfig,
    preset_from_json,
    preset_to_json,
)
from llama_index_ext_causalrag.standards.retriever import StructureAwareRetriever
from llama_index_ext_causalrag.standards.stages import (
    DENSE,
    EXPANSION,
    FITTING,
    FUSION,
    LEXICAL,
    RERANK,
    DenseConfig,
    ExpansionConfig,
    FittingConfig,
    FusionConfig,
    LexicalConfig,
    RerankConfig,
)
from standards_fixtures import TOY_RECOVERY, TOY_TRANSPORT

# the "paper" preset as params.json recorded a custom preset before the stages: every setting flat
OLD_FLAT_PAPER = {
    "beta": 0.05,
    "bm25_b": 0.75,
    "bm25_k1": 1.5,
    "citation_norm": 0.0,
    "edge_weights": {"child": 0.5, "cited_by": 0.6, "cites": 1.0, "parent": 0.5, "same_section": 0.7, "sibling": 0.0},
    "expand": True,
    "graph_rerank": True,
    "identifier_weight": 1.0,
    "max_per_section": None,
    "neighbour_pick": "cosine",
    "num_seeds": 3,
    "pool_k": 20,
    "prefilter_k": 100,
    "query_weight": 1.0,
    "rrf_k": 60.0,
    "rrf_weights": [1.0, 1.0],
    "similarity_top_k": 10,
    "smoothing_alpha": None,
    "use_bm25": True,
    "use_dense": True,
}
STAGE_CLASSES = (LexicalConfig, DenseConfig, FusionConfig, ExpansionConfig, RerankConfig, FittingConfig)


def _docs():
    return [Document(text=TOY_TRANSPORT, id_="rfc9990"), Document(text=TOY_RECOVERY, id_="rfc9991")]


def test_the_presets_compose_stages_and_each_stage_has_its_defaults_once():
    default = STANDARDS_PRESETS["standards"]
    assert default == StructureAwareConfig(
        lexical=LEXICAL, dense=DENSE, fusion=FUSION, expansion=EXPANSION, rerank=RERANK
    )
    paper = STANDARDS_PRESETS["paper"]
    assert paper.fusion == FusionConfig(rrf_weights=(1.0, 1.0)) and paper.rerank == RerankConfig(beta=0.05)
    assert paper.expansion == ExpansionConfig(num_seeds=3, citation_norm=0.0) and paper.dense == DENSE
    first = STANDARDS_PRESETS["first"]
    assert first.lexical == LexicalConfig(identifier_weight=1.0) and first.fusion == FUSION
    # every setting is in exactly one stage (or the config itself: similarity_top_k)
    assert SETTINGS == set(StructureAwareConfig.STAGE_OF) and set(default.settings()) == SETTINGS
    assert len(SETTINGS) == 1 + sum(len(c.model_fields) for c in STAGE_CLASSES)
    # the components take their defaults from the stages
    r = StructureAwareRetriever(
        StandardsGraph.from_documents(_docs()).embed(HashEmbedding()), embed_model=HashEmbedding()
    )
    assert r.config == default and (r.lexical, r.dense, r.fusion, r.expansion, r.rerank, r.fitting) == (
        LEXICAL,
        DENSE,
        FUSION,
        EXPANSION,
        RERANK,
        FITTING,
    )
    sparse = inspect.signature(SparseExpert.__init__).parameters
    assert (sparse["k1"].default, sparse["b"].default) == (LEXICAL.bm25_k1, LEXICAL.bm25_b)


def test_a_setting_by_name_goes_to_its_stage():
    c = StructureAwareConfig(rrf_k=30, num_seeds=2, beta=0.1, prefilter_k=None, smoothing_alpha=0.8, similarity_top_k=4)
    assert c.fusion == FusionConfig(rrf_k=30) and c.expansion == ExpansionConfig(num_seeds=2)
    assert c.rerank == RerankConfig(beta=0.1) and c.lexical == LexicalConfig(prefilter_k=None)
    assert c.dense == DenseConfig(smoothing_alpha=0.8) and c.similarity_top_k == 4
    assert c == StructureAwareConfig(
        fusion=FusionConfig(rrf_k=30),
        expansion={"num_seeds": 2},
        beta=0.1,
        prefilter_k=None,
        smoothing_alpha=0.8,
        similarity_top_k=4,
    )
    assert c.with_settings(rrf_k=60).fusion == FUSION and c.with_settings(rrf_k=60).expansion.num_seeds == 2
    index = StandardsIndex.from_documents(_docs(), embed_model=HashEmbedding())
    r = index.as_retriever(rrf_k=30, num_seeds=2, rerank=RerankConfig(beta=0.1))
    assert (r.fusion.rrf_k, r.expansion.num_seeds, r.rerank.beta) == (30, 2, 0.1)
    assert (r.rrf_k, r.num_seeds, r.beta) == (30, 2, 0.1)  # each setting readable by name


def test_an_old_flat_preset_loads_and_a_persisted_index_written_so_reopens(tmp_path):
    assert StructureAwareConfig(**OLD_FLAT_PAPER) == STANDARDS_PRESETS["paper"]
    assert preset_from_json(OLD_FLAT_PAPER) == STANDARDS_PRESETS["paper"]
    settings = STANDARDS_PRESETS["paper"].settings()
    old = {k: v for k, v in settings.items() if k not in FittingConfig.model_fields}  # the fitting stage came later
    assert {**old, "rrf_weights": list(settings["rrf_weights"])} == OLD_FLAT_PAPER  # the same settings, by name
    custom = STANDARDS_PRESETS["standards"].with_settings(num_seeds=2, rrf_k=30.0)
    assert preset_from_json(json.loads(json.dumps(preset_to_json(custom)))) == custom  # params.json now: by stage
    index = StandardsIndex.from_documents(_docs(), embed_model=HashEmbedding(), preset=custom)
    index.persist(tmp_path / "ix")
    old_custom = {
        **OLD_FLAT_PAPER,
        "num_seeds": 2,
        "rrf_k": 30.0,
        "rrf_weights": [1.0, 0.25],
        "identifier_weight": 2.0,
        "citation_norm": 1.0,
        "beta": 0.0,
    }  # custom, as versions before the stages wrote it
    rewrite_json(tmp_path / "ix", "params.json", lambda p: {**p, "preset": old_custom})
    loaded = StandardsIndex.from_persist_dir(tmp_path / "ix", embed_model=HashEmbedding())
    assert loaded.preset == custom
    q = "idle timeout"
    assert [n.node.node_id for n in loaded.as_retriever().retrieve(q)] == [
        n.node.node_id for n in index.as_retriever().retrieve(q)
    ]


def test_an_unknown_setting_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"StructureAwareConfig has no setting 'rrf_kk' \(did you mean 'rrf_k'\?\)"):
        StructureAwareConfig(rrf_kk=30)
    with pytest.raises(ValueError, match="rrf_kk"):
        FusionConfig(rrf_kk=30)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'num_seed' \(did you mean 'num_seeds'\?\)"):
        StandardsIndex.from_documents(_docs(), embed_model=HashEmbedding()).as_retriever(num_seed=2)
    with pytest.raises(ValueError, match="both False"):
        StructureAwareConfig(use_bm25=False, use_dense=False)
