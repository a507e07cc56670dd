"""See why: :class:`Explanation` of one query, its stages and the instrumentation events they emit."""

from llama_index_ext_causalrag.explain.explanation import ExplainMixin, Explanation
from llama_index_ext_causalrag.explain.html import render_page
from llama_index_ext_causalrag.explain.trace import RetrievalStageEvent, StageRecorder, recording

__all__ = ["ExplainMixin", "Explanation", "RetrievalStageEvent", "StageRecorder", "recording", "render_page"]
