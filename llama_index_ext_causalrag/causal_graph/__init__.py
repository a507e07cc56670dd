"""CausalRAG2: entity graph, Leiden hierarchy, module summaries, causal gates (offline half);
gated best-first retrieval, causal filter and spurious-aware answer prompt (online half)."""

from llama_index_ext_causalrag.causal_graph.bridge import CausalBridgeRetriever
from llama_index_ext_causalrag.causal_graph.causal_filter import CausalFilterPostprocessor
from llama_index_ext_causalrag.causal_graph.extract import (
    CausalGraphExtractor,
    LLMEntityExtractor,
    OfflineEntityExtractor,
)
from llama_index_ext_causalrag.causal_graph.gates import LLMGateJudge, OfflineGateJudge
from llama_index_ext_causalrag.causal_graph.graph import CausalGraph, Entity, Gate, Module, Relation
from llama_index_ext_causalrag.causal_graph.index import CausalGraphIndex
from llama_index_ext_causalrag.causal_graph.presets import CausalGraphBuildConfig, GatedExpansionConfig
from llama_index_ext_causalrag.causal_graph.prompts import DEFAULT_CAUSAL_QA_PROMPT
from llama_index_ext_causalrag.causal_graph.retriever import GatedExpansionRetriever
from llama_index_ext_causalrag.causal_graph.summaries import ExtractiveSummarizer, LLMSummarizer

__all__ = [
    "CausalBridgeRetriever",
    "CausalFilterPostprocessor",
    "CausalGraph",
    "CausalGraphBuildConfig",
    "CausalGraphExtractor",
    "CausalGraphIndex",
    "DEFAULT_CAUSAL_QA_PROMPT",
    "Entity",
    "ExtractiveSummarizer",
    "Gate",
    "GatedExpansionConfig",
    "GatedExpansionRetriever",
    "LLMEntityExtractor",
    "LLMGateJudge",
    "LLMSummarizer",
    "Module",
    "OfflineEntityExtractor",
    "OfflineGateJudge",
    "Relation",
]
