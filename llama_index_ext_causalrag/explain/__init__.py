"""See why: explanation objects and the self-contained HTML page."""

from llama_index_ext_causalrag.explain.html import render_page

__all__ = ["render_page"]
