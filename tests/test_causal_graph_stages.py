"""CausalRAG2's settings: one typed config per stage (retrieval and build), composed by the presets
and the build config, one default per setting."""

import inspect

import pytest

from _causal_graph_helpers import corpus
from _persisted_helpers import rewrite_json
from fakes import HashEmbedding
from llama_index_ext_causalrag.causal_graph import build_stages
from llama_index_ext_causalrag.causal_graph.bridge import CausalBridgeRetriever
from llama_index_ext_causalrag.causal_graph.causal_filter import CausalFilterPostprocessor
from llama_index_ext_causalrag.causal_graph.expansion import best_first_expand, mmr_select, seed_scores
from llama_index_ext_causalrag.causal_graph.gates import build_gates
from llama_index_ext_causalrag.causal_graph.hierarchy import leiden_hierarchy
from llama_index_ext_causalrag.causal_graph.index import CausalGraphIndex
from llama_index_ext_causalrag.causal_graph.presets import (
    CAUSALRAG2_PRESETS,
    SETTINGS,
    CausalGraphBuildConfig,
    GatedExpansionConfig,
)
from llama_index_ext_causalrag.causal_graph.propagation import personalized_pagerank
from llama_index_ext_causalrag.causal_graph.querying import CausalGraphQueryMixin
from llama_index_ext_causalrag.causal_graph.retriever import GatedExpansionRetriever
from llama_index_ext_causalrag.causal_graph.stages import (
    BRIDGE,
    CAUSAL_FILTER,
    ENTITIES,
    EXPANSION,
    FITTING,
    HIERARCHY,
    MODULES,
    PROPAGATION,
    RANKING,
    RUN,
    SEEDING,
    UNITS,
    BridgeConfig,
    ExpansionConfig,
    HierarchyConfig,
    SeedingConfig,
)

# the "ppr" preset as GatedExpansionConfig.model_dump() gave it before the stages: every setting flat
OLD_FLAT_PPR = {
    "alpha": 0.7,
    "budget_tokens": None,
    "damping": 0.5,
    "edge_weights": {"gate": 1.2, "hierarchy": 1.0, "membership": 1.0, "relation": 0.8},
    "entity_seeds": 5,
    "gamma": 0.7,
    "graph_aggregate": "sum",
    "include_statements": False,
    "include_summaries": False,
    "max_fanout": 5,
    "max_nodes": 200,
    "max_units_per_item": 10,
    "mention_weight": 1.0,
    "min_gain": 0.05,
    "mmr_lambda": 0.7,
    "mmr_pool": 50,
    "search": "propagation",
    "seeds_per_level": 3,
    "similarity_top_k": 10,
    "text_candidates": 30,
    "text_share": 0.8,
    "text_weight": 0.8,
    "unit_seeds": 5,
    "use_gates": True,
    "use_hierarchy": True,
}
# the build settings params.json has recorded since the first version, by name
OLD_BUILD_PARAMS = {
    "chunk_size": 24,
    "chunk_overlap": 0,
    "max_cluster_size": 3,
    "max_levels": 4,
    "resolution": 1.0,
    "seed": 42,
    "gate_candidates_per_module": 5,
    "min_entity_units": 1,
    "max_entities": 8000,
    "string_threshold": 0.92,
    "embed_threshold": 0.95,
    "module_embedding": "members",
}


def _defaults(fn) -> dict:
    return {
        k: p.default for k, p in inspect.signature(fn).parameters.items() if p.default is not inspect.Parameter.empty
    }


@pytest.fixture(scope="module")
def index() -> CausalGraphIndex:
    return CausalGraphIndex.from_documents(
        corpus(2),
        embed_model=HashEmbedding(),
        show_progress=False,
        chunk_size=24,
        max_cluster_size=3,
        min_entity_units=1,
    )


def test_the_presets_compose_stages_and_each_stage_has_its_defaults_once(index):
    default = GatedExpansionConfig(
        seeding=SEEDING,
        expansion=EXPANSION,
        propagation=PROPAGATION,
        ranking=RANKING,
        fitting=FITTING,
        causal_filter=CAUSAL_FILTER,
    )
    assert CAUSALRAG2_PRESETS["causalrag2"] == default
    assert CAUSALRAG2_PRESETS["nogates"] == default.with_settings(expansion=ExpansionConfig(use_gates=False))
    assert CAUSALRAG2_PRESETS["ppr"].expansion == ExpansionConfig(search="propagation")
    assert CAUSALRAG2_PRESETS["ppr"].seeding == SEEDING and CAUSALRAG2_PRESETS["flat"].expansion.use_hierarchy is False
    assert SETTINGS == set(GatedExpansionConfig.STAGE_OF) and set(default.settings()) == SETTINGS
    # the components take their defaults from the stages
    r = GatedExpansionRetriever(index, embed_model=HashEmbedding())
    assert (r.seeding, r.expansion, r.propagation, r.ranking, r.fitting) == (
        SEEDING,
        EXPANSION,
        PROPAGATION,
        RANKING,
        FITTING,
    )
    f = CausalFilterPostprocessor()
    assert (f.top_seeds, f.max_text_chars) == (CAUSAL_FILTER.top_seeds, CAUSAL_FILTER.max_text_chars)
    assert {
        k: v for k, v in _defaults(CausalBridgeRetriever.__init__).items() if k in BridgeConfig.model_fields
    } == BRIDGE.model_dump()
    assert _defaults(CausalBridgeRetriever.__init__)["similarity_top_k"] == FITTING.similarity_top_k
    assert _defaults(CausalGraphQueryMixin.as_retriever)["similarity_top_k"] == FITTING.similarity_top_k
    assert {k: _defaults(leiden_hierarchy)[k] for k in HierarchyConfig.model_fields} == HIERARCHY.model_dump()
    expand = _defaults(best_first_expand)
    assert (expand["gamma"], expand["max_fanout"], expand["max_nodes"]) == (
        EXPANSION.gamma,
        EXPANSION.max_fanout,
        EXPANSION.max_nodes,
    )
    assert expand["weights"] == EXPANSION.edge_weights
    assert _defaults(seed_scores)["alpha"] == SEEDING.alpha and _defaults(mmr_select)["lam"] == SEEDING.mmr_lambda
    assert _defaults(personalized_pagerank)["damping"] == PROPAGATION.damping
    assert _defaults(build_gates)["gate_candidates_per_module"] == MODULES.gate_candidates_per_module
    assert _defaults(build_stages.embed_modules)["mode"] == MODULES.module_embedding


def test_a_setting_by_name_goes_to_its_stage(index):
    c = GatedExpansionConfig(alpha=0.5, use_gates=False, damping=0.3, text_weight=0.6, budget_tokens=100, top_seeds=3)
    assert c.seeding == SeedingConfig(alpha=0.5) and c.expansion == ExpansionConfig(use_gates=False)
    assert (c.propagation.damping, c.ranking.text_weight, c.fitting.budget_tokens, c.causal_filter.top_seeds) == (
        0.3,
        0.6,
        100,
        3,
    )
    r = index.as_retriever(preset="causalrag2", use_filter=False, alpha=0.5, expansion=ExpansionConfig(max_nodes=20))
    assert r.seeding.alpha == 0.5 and r.expansion.max_nodes == 20 and (r.alpha, r.max_nodes) == (0.5, 20)
    filtered = index.as_retriever(preset="causalrag2", similarity_top_k=3, top_seeds=2, candidates_per_node=3)
    assert filtered.retriever.fitting.similarity_top_k == 9 and filtered.postprocessors[0].top_seeds == 2
    b = CausalGraphBuildConfig(chunk_size=24, max_cluster_size=3, seed=7, module_embedding="summary", num_workers=2)
    assert (b.units.chunk_size, b.hierarchy.max_cluster_size, b.hierarchy.seed) == (24, 3, 7)
    assert (b.modules.module_embedding, b.run.num_workers, b.entities) == ("summary", 2, ENTITIES)
    assert "num_workers" not in b.persisted() and b.persisted()["max_cluster_size"] == 3


def test_a_configuration_written_before_the_stages_loads(index, tmp_path):
    assert GatedExpansionConfig(**OLD_FLAT_PPR) == CAUSALRAG2_PRESETS["ppr"]
    settings = CAUSALRAG2_PRESETS["ppr"].settings()
    assert {k: v for k, v in settings.items() if k in OLD_FLAT_PPR} == OLD_FLAT_PPR
    old = CausalGraphBuildConfig.from_params({**OLD_BUILD_PARAMS, "extractor": "OfflineEntityExtractor"})
    assert old == CausalGraphBuildConfig(**OLD_BUILD_PARAMS) and old.persisted() == OLD_BUILD_PARAMS
    assert old.units == UNITS.model_copy(update={"chunk_size": 24}) and old.run == RUN
    # a persisted index: params.json keeps the build settings by name; an older one lacking some gets the defaults
    index.persist(tmp_path / "ix")
    rewrite_json(
        tmp_path / "ix",
        "params.json",
        lambda p: {k: v for k, v in p.items() if k not in ("gate_candidates_per_module", "string_threshold")},
    )
    loaded = CausalGraphIndex.from_persist_dir(tmp_path / "ix", embed_model=HashEmbedding())
    assert loaded.build_config == index.build_config  # both were the defaults
    q = "coral cause"
    assert [n.node.node_id for n in loaded.as_retriever().retrieve(q)] == [
        n.node.node_id for n in index.as_retriever().retrieve(q)
    ]


def test_an_unknown_or_bad_setting_is_refused_naming_it(index):
    with pytest.raises(ValueError, match=r"GatedExpansionConfig has no setting 'gama' \(did you mean 'gamma'\?\)"):
        GatedExpansionConfig(gama=0.5)
    with pytest.raises(ValueError, match=r"CausalGraphBuildConfig has no setting 'max_cluster'"):
        CausalGraphBuildConfig(max_cluster=3)
    with pytest.raises(
        TypeError, match=r"unexpected keyword argument 'max_cluster' \(did you mean 'max_cluster_size'\?\)"
    ):
        CausalGraphIndex.from_documents(corpus(1), embed_model=HashEmbedding(), max_cluster=3)
    with pytest.raises(TypeError, match="bridge_shar"):
        index.as_bridge_retriever(index.as_retriever(), bridge_shar=0.5)
    with pytest.raises(ValueError, match=r"bridge_share must be in \[0, 1\), got 1.0"):
        index.as_bridge_retriever(index.as_retriever(), bridge_share=1.0)
    with pytest.raises(ValueError, match="max_cluster_size must be an int >= 2, got 1; the paper uses 10"):
        CausalGraphBuildConfig(max_cluster_size=1)
    with pytest.raises(ValueError, match="search must be one of"):
        GatedExpansionConfig(search="bfs")
