"""The page of an :class:`~llama_index_ext_causalrag.explain.Explanation` (placeholder: stages and nodes
as plain lists)."""

from __future__ import annotations

import json
from html import escape
from typing import Any, Dict


def render_page(explanation: Dict[str, Any]) -> str:
    """A self-contained HTML page of ``Explanation.to_dict()``; every text is escaped."""
    e = explanation
    stages = "".join(
        f"<li><b>{escape(s['name'])}</b>: {escape(s.get('why', ''))}"
        f"<pre>{escape(json.dumps({'took': s.get('took'), 'decided': s.get('decided')}, indent=1))}</pre></li>"
        for s in e["stages"])
    nodes = "".join(
        f"<li><code>{escape(n['id'])}</code> score {escape(str(n['score']))}<p>{escape(n['text'])}</p></li>"
        for n in e["nodes"])
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>{escape(e['method'])}: {escape(e['query'])}</title></head><body>"
        f"<h1>{escape(e['method'])}</h1><p>{escape(e['query'])}</p>"
        f"<h2>Stages</h2><ol>{stages}</ol><h2>Nodes</h2><ol>{nodes}</ol></body></html>\n"
    )
