"""Published retrieval methods as drop-in LlamaIndex components."""

from llama_index_ext_causalrag.defaults import default_embed_model
from llama_index_ext_causalrag.experts import DenseExpert, SparseExpert
from llama_index_ext_causalrag.provenance import PROVENANCE_KEY, annotate, get_provenance

__version__ = "0.1.0"

__all__ = [
    "DenseExpert",
    "SparseExpert",
    "default_embed_model",
    "PROVENANCE_KEY",
    "annotate",
    "get_provenance",
]
