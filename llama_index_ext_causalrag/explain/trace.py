"""Recording a query's stages: one LlamaIndex instrumentation event per stage, details on demand.

A method's module holds one :class:`StageRecorder` and calls :meth:`StageRecorder.stage` after each
stage with a few numbers and a function building the details. The numbers become a
:class:`RetrievalStageEvent` (only when an event handler listens); the function runs only inside
:func:`recording` (what ``explain`` opens), so plain ``retrieve`` pays a few calls per stage.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional

from llama_index.core.instrumentation import Dispatcher, NullEventHandler, get_dispatcher
from llama_index.core.instrumentation.events.base import BaseEvent

# what a stage's detail function returns: {"took": {...}, "decided": {...}, "why": str}, and for
# a stage that draws the retrieval subgraph also "graph": {"nodes": [...], "edges": [...]}
Detail = Callable[[], Dict[str, Any]]


class RetrievalStageEvent(BaseEvent):
    """One stage of one query: the method, the stage name and its key numbers."""

    method: str
    stage: str
    numbers: Dict[str, float]

    @classmethod
    def class_name(cls) -> str:
        return "RetrievalStageEvent"


class Trace:
    """The stages of one ``explain`` call for ``method`` (stages of other methods, e.g. the base
    retriever HCQR queries, are left out)."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.stages: List[Dict[str, Any]] = []
        self.graph: Optional[Dict[str, Any]] = None

    def add(self, name: str, detail: Dict[str, Any]) -> None:
        graph = detail.pop("graph", None)
        if graph is not None:
            self.graph = graph
        self.stages.append(
            {
                "name": name,
                "took": detail.get("took", {}),
                "decided": detail.get("decided", {}),
                "why": detail.get("why", ""),
            }
        )


_ACTIVE: ContextVar[Optional[Trace]] = ContextVar("llama_index_ext_causalrag_trace", default=None)


@contextmanager
def recording(method: str) -> Iterator[Trace]:
    """Collect the details of ``method``'s stages run inside the block (nested calls: the innermost)."""
    trace = Trace(method)
    token = _ACTIVE.set(trace)
    try:
        yield trace
    finally:
        _ACTIVE.reset(token)


def _listening(d: Dispatcher) -> bool:
    """True when an event handler other than LlamaIndex's null handler would see ``d``'s events."""
    c: Optional[Dispatcher] = d
    while c is not None:
        for h in c.event_handlers:
            if not isinstance(h, NullEventHandler):
                return True
        c = c.parent if c.propagate else None
    return False


class StageRecorder:
    """The stages of ``method``, emitted through ``get_dispatcher(module)``."""

    def __init__(self, module: str, method: str) -> None:
        self.dispatcher = get_dispatcher(module)
        self.method = method

    def active(self, method: Optional[str] = None) -> bool:
        """True inside :func:`recording` of ``method`` (default: this recorder's): a stage that
        collects details along a loop checks this first."""
        trace = _ACTIVE.get()
        return trace is not None and trace.method == (method or self.method)

    def stage(
        self, name: str, numbers: Mapping[str, float], detail: Optional[Detail] = None, method: Optional[str] = None
    ) -> None:
        """Emit ``numbers`` as a :class:`RetrievalStageEvent`; inside :func:`recording` of this
        recorder's method (or ``method``), also record ``detail()``."""
        method = method or self.method
        if _listening(self.dispatcher):
            self.dispatcher.event(RetrievalStageEvent(method=method, stage=name, numbers=dict(numbers)))
        trace = _ACTIVE.get()
        if trace is not None and detail is not None and trace.method == method:
            trace.add(name, detail())
