"""``insert`` / ``insert_nodes`` / ``delete_ref_doc`` / ``refresh_ref_docs`` for the experts.

An expert keeps its state (nodes and arrays) in one object, ``self._st``, replaced by one
assignment: a query running while an update is applied sees the old or the new state,
never a mix. Semantics: :mod:`llama_index_ext_causalrag.storage.update_plan`.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

from llama_index.core.ingestion import run_transformations
from llama_index.core.schema import BaseNode, Document, TransformComponent
from llama_index.core.settings import Settings

from llama_index_ext_causalrag.storage import update_plan
from llama_index_ext_causalrag.validation import check_documents, check_nodes, public_method


class ExpertUpdates:
    """Mixin: subclasses implement ``_updated(plan, new_nodes)`` returning the new state."""

    _st: Any

    @property
    def nodes(self) -> List[BaseNode]:
        return self._st.nodes

    def _updated(self, plan: List[update_plan.Source], new_nodes: List[BaseNode]) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _apply(self, new_nodes: Sequence[BaseNode], drop: Sequence[str] = ()) -> None:
        old = self._st.nodes
        plan = update_plan.merge_plan(old, new_nodes, drop)
        if not plan:
            raise update_plan.cannot_empty(", ".join(drop))
        self._st = self._updated(plan, list(new_nodes))

    @public_method
    def insert_nodes(self, nodes: Sequence[BaseNode], **insert_kwargs: Any) -> None:
        """Add ``nodes``; nodes of a document already indexed replace all of its nodes, in place.
        The result equals an expert built from the updated node list (same order)."""
        nodes = check_nodes(nodes)
        if nodes:
            self._apply(nodes)

    def _parse(
        self, documents: Sequence[Document], transformations: Optional[Sequence[TransformComponent]]
    ) -> List[BaseNode]:
        return run_transformations(list(documents), list(transformations or Settings.transformations))

    def insert(
        self, documents: Sequence[Document] | Document, transformations: Optional[Sequence[TransformComponent]] = None
    ) -> None:
        """Split ``documents`` (``transformations``, default ``Settings.transformations``) and
        insert their nodes. A document whose id is indexed is refreshed (see
        :meth:`refresh_ref_docs`)."""
        if isinstance(documents, Document):
            documents = [documents]
        self.refresh_ref_docs(documents, transformations)

    @public_method
    def refresh_ref_docs(
        self, documents: Sequence[Document], transformations: Optional[Sequence[TransformComponent]] = None
    ) -> List[bool]:
        """Re-index the documents that are new or whose hash changed; one bool per document."""
        documents = check_documents(documents)
        todo, flags = update_plan.changed_documents(documents, update_plan.known_docs(self._st.nodes))
        if todo:
            self._apply(self._parse(todo, transformations))
        return flags

    @public_method
    def delete_ref_doc(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Remove every node of ``ref_doc_id``; an unknown id logs a warning and does nothing."""
        if ref_doc_id not in update_plan.known_docs(self._st.nodes):
            update_plan.unknown_ref_doc(ref_doc_id)
            return
        self._apply([], drop=[ref_doc_id])
