"""The torch backend of the default embedder: ``HuggingFaceEmbedding`` that sorts a batch by length.

Imported only when the torch backend is chosen (it loads sentence-transformers and torch).
"""

from __future__ import annotations

from typing import Any, List

from llama_index.core.base.embeddings.base import Embedding
from llama_index.embeddings.huggingface import HuggingFaceEmbedding

from llama_index_ext_causalrag.embeddings.onnx import ain_length_order, in_length_order


class SortedHuggingFaceEmbedding(HuggingFaceEmbedding):
    """Embeds a batch call's texts longest first and returns them in input order.

    LlamaIndex cuts a batch call into ``embed_batch_size`` pieces in input order, and each piece
    is padded to its longest text; in length order the pieces hold texts of similar length, which
    on HolisQA sentences embeds 1.7x as many texts per second. Query embeddings are unchanged;
    :meth:`get_query_embedding_batch` embeds several queries in one call.
    """

    @classmethod
    def class_name(cls) -> str:
        return "SortedHuggingFaceEmbedding"

    def get_text_embedding_batch(self, texts: List[str], show_progress: bool = False, **kwargs: Any) -> List[Embedding]:
        def embed(batch: List[str]) -> List[Embedding]:
            return super(SortedHuggingFaceEmbedding, self).get_text_embedding_batch(
                batch, show_progress=show_progress, **kwargs
            )

        return in_length_order(texts, embed)

    async def aget_text_embedding_batch(
        self, texts: List[str], show_progress: bool = False, **kwargs: Any
    ) -> List[Embedding]:
        async def aembed(batch: List[str]) -> List[Embedding]:
            return await super(SortedHuggingFaceEmbedding, self).aget_text_embedding_batch(
                batch, show_progress=show_progress, **kwargs
            )

        return await ain_length_order(texts, aembed)

    def get_query_embedding_batch(self, queries: List[str]) -> List[Embedding]:
        """Query embeddings of several texts in one call, through the query prompt."""
        return list(self._embed(list(queries), prompt_name="query"))
