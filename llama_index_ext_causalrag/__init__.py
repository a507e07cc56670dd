"""Published retrieval methods as drop-in LlamaIndex components."""

from llama_index_ext_causalrag.causal_graph import (
    CausalFilterPostprocessor,
    CausalGraphIndex,
    GatedExpansionRetriever,
)
from llama_index_ext_causalrag.embeddings.defaults import default_embed_model
from llama_index_ext_causalrag.experts import DenseExpert, SparseExpert, VectorStoreExpert, VectorStoreTextExpert
from llama_index_ext_causalrag.hypothesis import (
    DecisionUsefulnessEvaluator,
    HypothesisQueryTransform,
    HypothesisRetriever,
)
from llama_index_ext_causalrag.multigranularity import (
    EntropyFusionRetriever,
    MultiGranularityIndex,
    MultiGranularityNodeParser,
    ParentPromotionPostprocessor,
)
from llama_index_ext_causalrag.pipeline import PostprocessedRetriever
from llama_index_ext_causalrag.standards import (
    StandardsGraph,
    StandardsIndex,
    StructureAwareRetriever,
    StructuredDocumentParser,
)
from llama_index_ext_causalrag.text.provenance import PROVENANCE_KEY, annotate, get_provenance
from llama_index_ext_causalrag.version import __version__

__all__ = [
    "CausalFilterPostprocessor",
    "CausalGraphIndex",
    "DecisionUsefulnessEvaluator",
    "DenseExpert",
    "EntropyFusionRetriever",
    "GatedExpansionRetriever",
    "HypothesisQueryTransform",
    "HypothesisRetriever",
    "MultiGranularityIndex",
    "MultiGranularityNodeParser",
    "PROVENANCE_KEY",
    "ParentPromotionPostprocessor",
    "PostprocessedRetriever",
    "SparseExpert",
    "StandardsGraph",
    "StandardsIndex",
    "StructureAwareRetriever",
    "StructuredDocumentParser",
    "VectorStoreExpert",
    "VectorStoreTextExpert",
    "__version__",
    "annotate",
    "default_embed_model",
    "get_provenance",
]
