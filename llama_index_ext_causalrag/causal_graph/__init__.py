"""CausalRAG2 offline half: entity graph, Leiden hierarchy, module summaries, causal gates."""

from llama_index_ext_causalrag.causal_graph.extract import (
    CausalGraphExtractor,
    LLMEntityExtractor,
    OfflineEntityExtractor,
)
from llama_index_ext_causalrag.causal_graph.gates import LLMGateJudge, OfflineGateJudge
from llama_index_ext_causalrag.causal_graph.graph import CausalGraph, Entity, Gate, Module, Relation
from llama_index_ext_causalrag.causal_graph.index import CausalGraphIndex
from llama_index_ext_causalrag.causal_graph.summaries import ExtractiveSummarizer, LLMSummarizer

__all__ = [
    "CausalGraph", "CausalGraphExtractor", "CausalGraphIndex", "Entity", "ExtractiveSummarizer", "Gate",
    "LLMEntityExtractor", "LLMGateJudge", "LLMSummarizer", "Module", "OfflineEntityExtractor",
    "OfflineGateJudge", "Relation",
]
