"""One self-contained HTML page for an explanation dict, and the inline SVG graph drawing.

Pure: depends only on the dict (and networkx for the layout), never on ``llama_index`` or on the
methods. The page loads nothing: CSS and SVG are inline, there is no script, and a
Content-Security-Policy forbids scripts and remote loads as a second line of defence behind the
escaping (every string that comes from the data goes through :func:`html.escape`).

The explanation dict::

    {"method": str, "query": str, "options": {...},
     "nodes": [{"id": str, "text": str, "score": float | None, "metadata": {...}}],
     "stages": [{"name": str, "took": {...}, "decided": {...}, "why": str}],
     "graph": None | {"nodes": [{"id", "label", "kind"}],
                      "edges": [{"source", "target", "kind", "weight", "crossed"}]}}
"""

from __future__ import annotations

import html
import json
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import networkx as nx

LIST_OPEN_MAX = 10  # lists and tables longer than this are collapsed under <details>
TEXT_OPEN_MAX = 400  # strings longer than this show a preview and the rest under <details>
LABEL_ALL_MAX = 60  # draw every node's label when the graph has at most this many nodes
MAX_DEPTH = 4
KIND_COLOURS = {
    "entity": "#4e79a7",
    "module": "#f28e2b",
    "unit": "#59a14f",
    "node": "#59a14f",
    "query": "#b07aa1",
    "document": "#76b7b2",
}
OTHER_COLOURS = ("#9c755f", "#edc948", "#ff9da7", "#bab0ac", "#e15759")
CROSSED_COLOUR = "#d62728"

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#fafbfc}
main{max-width:1100px;margin:0 auto;padding:20px 28px 60px}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #dde3ea;padding-bottom:4px}
h3{font-size:15px;margin:14px 0 6px}
.query{font-size:17px;background:#fff;border-left:4px solid #4e79a7;padding:8px 12px;margin:8px 0;white-space:pre-wrap}
.muted{color:#5f6b7a}.note{background:#fff8e1;border:1px solid #f0d58c;padding:6px 10px;border-radius:4px}
table{border-collapse:collapse;margin:4px 0;background:#fff;font-size:13px}
th,td{border:1px solid #dde3ea;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f0f3f7;font-weight:600}td.k{font-weight:600;color:#34495e;white-space:nowrap}
.stage,.node{background:#fff;border:1px solid #dde3ea;border-radius:6px;padding:8px 14px;margin:10px 0}
.stage h3 .n,.node h3 .n{color:#8a94a3;font-weight:400;margin-right:6px}
.why{margin:4px 0 8px;font-style:italic}.cols{display:flex;gap:18px;flex-wrap:wrap}.cols>div{flex:0 1 auto;min-width:0;max-width:100%;overflow-x:auto}
.cols>div+div{flex:1 1 420px}
.text{white-space:pre-wrap;background:#f6f8fa;padding:6px 9px;border-radius:4px;margin:6px 0;overflow-wrap:anywhere}
code,.id{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px;overflow-wrap:anywhere}
summary{cursor:pointer;color:#2f5d8a}ol{margin:4px 0;padding-left:26px}.none{color:#9aa4b1}
svg{background:#fff;border:1px solid #dde3ea;border-radius:6px;max-width:100%;height:auto}
svg text{font:11px system-ui,sans-serif;fill:#1d2330;paint-order:stroke;stroke:#fff;stroke-width:3px}
.legend span{display:inline-block;margin-right:14px}.sw{display:inline-block;width:11px;height:11px;border-radius:50%;margin-right:4px;vertical-align:-1px}
"""
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def esc(value: Any) -> str:
    """``value`` as text, HTML-escaped (quotes included, so it is safe in attributes too)."""
    return html.escape(value if isinstance(value, str) else str(value), quote=True)


def _scalar(v: Any) -> str:
    if v is None:
        return '<span class="none">&mdash;</span>'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return esc(f"{v:.4g}") if math.isfinite(v) else esc(v)
    if isinstance(v, int):
        return esc(v)
    s = v if isinstance(v, str) else str(v)
    if len(s) <= TEXT_OPEN_MAX:
        return esc(s)
    return (
        f"{esc(s[: TEXT_OPEN_MAX // 2])}&hellip; <details><summary>all {len(s)} characters</summary>"
        f'<div class="text">{esc(s)}</div></details>'
    )


def _collapsed(n: int, what: str, inner: str) -> str:
    return inner if n <= LIST_OPEN_MAX else f"<details><summary>{n} {what}</summary>{inner}</details>"


def render_value(v: Any, depth: int = 0) -> str:
    """Scalars as text, dicts as key/value tables, lists of dicts as tables, long ones collapsed."""
    if isinstance(v, Mapping):
        return _collapsed(len(v), "entries", kv_table(v, depth + 1)) if v else '<span class="none">{}</span>'
    if isinstance(v, (list, tuple, set, frozenset)):
        items = list(v)
        if not items:
            return '<span class="none">[]</span>'
        if depth >= MAX_DEPTH:
            return _scalar(json.dumps(items, default=str))
        if all(isinstance(x, Mapping) for x in items):
            return _collapsed(len(items), "rows", rows_table(items, depth + 1))
        if len(items) <= LIST_OPEN_MAX and all(not isinstance(x, (Mapping, list, tuple)) for x in items):
            return ", ".join(_scalar(x) for x in items)
        inner = "<ol>" + "".join(f"<li>{render_value(x, depth + 1)}</li>" for x in items) + "</ol>"
        return _collapsed(len(items), "items", inner)
    return _scalar(v)


def kv_table(d: Mapping[str, Any], depth: int = 0) -> str:
    if depth > MAX_DEPTH:
        return _scalar(json.dumps(d, default=str))
    rows = "".join(f'<tr><td class="k">{esc(k)}</td><td>{render_value(v, depth)}</td></tr>' for k, v in d.items())
    return f"<table>{rows}</table>"


def rows_table(rows: Sequence[Mapping[str, Any]], depth: int = 0) -> str:
    cols: List[str] = []
    for r in rows:
        cols += [str(k) for k in r if str(k) not in cols]
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{render_value(_get(r, c), depth)}</td>" for c in cols) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _get(row: Mapping[str, Any], col: str) -> Any:
    return row[col] if col in row else next((v for k, v in row.items() if str(k) == col), None)


# ----------------------------------------------------------------------------- the graph as SVG
def _colours(kinds: Sequence[str]) -> Dict[str, str]:
    out, extra = {}, iter(OTHER_COLOURS * (1 + len(kinds) // len(OTHER_COLOURS)))
    for k in kinds:
        out[k] = KIND_COLOURS.get(k) or next(extra)
    return out


LAYOUT_PULL = {"member": 3.0, "child": 3.0}  # edges that pull harder in the layout (a module and its members)


def _pack(parts: List[Dict[str, Tuple[float, float]]]) -> Dict[str, Tuple[float, float]]:
    """Place component layouts (each in [0, 1]^2, largest first) on shelves, cell side ~ size^0.65
    (a large component gets more room per node than sqrt would give it)."""
    sides = [len(p) ** 0.65 for p in parts]
    width = max(max(sides), 1.3 * math.sqrt(sum(s * s for s in sides)))
    out: Dict[str, Tuple[float, float]] = {}
    x = y = row_h = 0.0
    for p, side in zip(parts, sides):
        if x > 0 and x + side > width:
            x, y, row_h = 0.0, y + row_h, 0.0
        inner = 0.8 * side if len(p) > 1 else 0.0
        for n, (px, py) in p.items():
            out[n] = (x + 0.1 * side + px * inner, y + 0.1 * side + py * inner)
        x, row_h = x + side, max(row_h, side)
    return out


def _unit(pos: Mapping[str, Any]) -> Dict[str, Tuple[float, float]]:
    xs = [float(p[0]) for p in pos.values()]
    ys = [float(p[1]) for p in pos.values()]
    span_x, span_y = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
    return {n: ((float(p[0]) - min(xs)) / span_x, (float(p[1]) - min(ys)) / span_y) for n, p in pos.items()}


def layout(graph: Mapping[str, Any], seed: int = 0) -> Dict[str, Tuple[float, float]]:
    """Node id -> (x, y) in [0, 1]^2: networkx ``spring_layout`` with a fixed seed per connected
    component (member edges pull harder), components packed largest first."""
    g = nx.Graph()
    g.add_nodes_from(str(n["id"]) for n in graph.get("nodes", []))
    for e in graph.get("edges", []):
        s, t = str(e["source"]), str(e["target"])
        if s in g and t in g and s != t:
            g.add_edge(
                s,
                t,
                pull=max(LAYOUT_PULL.get(str(e.get("kind")), 1.0), g.edges[s, t]["pull"] if g.has_edge(s, t) else 0.0),
            )
    if not len(g):
        return {}
    comps = sorted((sorted(c) for c in nx.connected_components(g)), key=lambda c: (-len(c), c[0]))
    parts = []
    for c in comps:
        if len(c) == 1:
            parts.append({c[0]: (0.5, 0.5)})
            continue
        sub = g.subgraph(c)
        parts.append(_unit(nx.spring_layout(sub, seed=seed, iterations=60, weight="pull")))
    return _unit(_pack(parts))


def render_graph_svg(graph: Mapping[str, Any], width: int = 960, height: Optional[int] = None, seed: int = 0) -> str:
    """The graph as one inline ``<svg>``: nodes coloured by kind (hover shows id, kind and label),
    gate edges dashed, crossed edges thick red, a legend below. ``height`` defaults to one that
    grows with the number of nodes (260 to 620 px)."""
    nodes = list(graph.get("nodes", []))
    height = height or max(260, min(620, 140 + 16 * len(nodes)))
    edges = list(graph.get("edges", []))
    pos = layout(graph, seed)
    pad, right = 24, 170  # room on the right for the labels of the rightmost nodes
    xy = {n: (pad + x * (width - pad - right), pad + y * (height - 2 * pad)) for n, (x, y) in pos.items()}
    kinds = sorted({str(n.get("kind", "node")) for n in nodes})
    colour = _colours(kinds)
    max_w = max((float(e.get("weight") or 1.0) for e in edges), default=1.0) or 1.0
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="graph">'
    ]
    for e in sorted(edges, key=lambda e: bool(e.get("crossed"))):  # crossed edges drawn last, on top
        s, t = str(e["source"]), str(e["target"])
        if s not in xy or t not in xy:
            continue
        kind = str(e.get("kind", ""))
        w = float(e.get("weight") or 1.0)
        if e.get("crossed"):
            style = f'stroke="{CROSSED_COLOUR}" stroke-width="3.2" stroke-opacity="0.95"'
        elif kind == "gate":
            style = 'stroke="#e15759" stroke-width="1.6" stroke-dasharray="6 3" stroke-opacity="0.8"'
        else:
            style = f'stroke="#8a94a3" stroke-width="{0.6 + 1.6 * min(1.0, w / max_w):.2f}" stroke-opacity="0.45"'
        tip = f"{s} \u2014{kind}\u2192 {t} (weight {w:.4g}{', crossed' if e.get('crossed') else ''})"
        parts.append(
            f'<line x1="{xy[s][0]:.1f}" y1="{xy[s][1]:.1f}" x2="{xy[t][0]:.1f}" y2="{xy[t][1]:.1f}" '
            f"{style}><title>{esc(tip)}</title></line>"
        )
    show_all = len(nodes) <= LABEL_ALL_MAX
    for n in nodes:
        nid = str(n["id"])
        if nid not in xy:
            continue
        kind = str(n.get("kind", "node"))
        label = str(n.get("label") or nid)
        x, y = xy[nid]
        r = 7 if "module" in kind else 5
        parts.append(
            f'<g data-id="{esc(nid)}"><circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{colour[kind]}" '
            f'stroke="#fff" stroke-width="1"><title>{esc(f"{label} [{kind}] id={nid}")}</title></circle>'
        )
        if show_all or "module" in kind:
            short = label if len(label) <= 28 else label[:27] + "\u2026"
            parts.append(f'<text x="{x + r + 2:.1f}" y="{y + 4:.1f}">{esc(short)}</text>')
        parts.append("</g>")
    parts.append("</svg>")
    legend = "".join(f'<span><i class="sw" style="background:{colour[k]}"></i>{esc(k)}</span>' for k in kinds)
    legend += (
        '<span><i class="sw" style="background:#e15759;border-radius:0;height:3px"></i>gate (dashed)</span>'
        f'<span><i class="sw" style="background:{CROSSED_COLOUR};border-radius:0;height:4px"></i>crossed</span>'
    )
    return "".join(parts) + f'<p class="legend muted">{legend}</p>'


# ----------------------------------------------------------------------------- pages
def document(title: str, body: str) -> str:
    """A complete HTML document: ``title`` is escaped here, ``body`` must already be HTML."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>{body}</main></body></html>\n"
    )


def _stage(i: int, st: Mapping[str, Any]) -> str:
    took, decided = st.get("took") or {}, st.get("decided") or {}
    why = st.get("why") or ""
    return (
        f'<section class="stage"><h3><span class="n">{i}.</span>{esc(st.get("name", "?"))}</h3>'
        + (f'<p class="why">{esc(why)}</p>' if why else "")
        + f'<div class="cols"><div><h4>took</h4>{render_value(took)}</div>'
        f"<div><h4>decided</h4>{render_value(decided)}</div></div></section>"
    )


def _node(i: int, n: Mapping[str, Any]) -> str:
    score = n.get("score")
    meta = n.get("metadata") or {}
    text = str(n.get("text") or "")
    shown = text if len(text) <= 2 * TEXT_OPEN_MAX else text[: 2 * TEXT_OPEN_MAX] + "\u2026"
    body = f'<div class="text">{esc(shown)}</div>'
    if len(text) > 2 * TEXT_OPEN_MAX:
        body += f'<details><summary>all {len(text)} characters</summary><div class="text">{esc(text)}</div></details>'
    if meta:
        body += f"<details><summary>metadata ({len(meta)} keys)</summary>{kv_table(meta)}</details>"
    return (
        f'<section class="node"><h3><span class="n">#{i}</span><span class="id">{esc(n.get("id", "?"))}</span>'
        f' <span class="muted">score {_scalar(score)}</span></h3>{body}</section>'
    )


def render_page(explanation: Mapping[str, Any]) -> str:
    """The explanation dict as one self-contained HTML page (no network resources, no script)."""
    method, query = explanation.get("method", "?"), explanation.get("query", "")
    stages = list(explanation.get("stages") or [])
    nodes = list(explanation.get("nodes") or [])
    graph: Optional[Mapping[str, Any]] = explanation.get("graph")
    body = [
        f'<h1>Why these results <span class="muted">({esc(method)})</span></h1>',
        f'<div class="query">{esc(query)}</div>',
    ]
    if explanation.get("options"):
        body.append(f"<details><summary>options</summary>{kv_table(explanation['options'])}</details>")
    body.append(f"<h2>Path through {esc(method)}: {len(stages)} stage(s)</h2>")
    body += [_stage(i + 1, st) for i, st in enumerate(stages)] or ['<p class="muted">No stage was recorded.</p>']
    if graph:
        n_cross = sum(bool(e.get("crossed")) for e in graph.get("edges", []))
        body.append(
            f"<h2>Graph: {len(graph.get('nodes', []))} nodes, {len(graph.get('edges', []))} edges, "
            f"{n_cross} crossed</h2>{render_graph_svg(graph)}"
        )
    body.append(f"<h2>Returned nodes: {len(nodes)}</h2>")
    body += [_node(i + 1, n) for i, n in enumerate(nodes)] or ['<p class="muted">No node was returned.</p>']
    return document(f"See why: {method}: {str(query)[:80]}", "".join(body))


def render_graph_page(
    graph: Mapping[str, Any],
    title: str,
    facts: Mapping[str, Any],
    note: str = "",
    tables: Sequence[Tuple[str, Sequence[Mapping[str, Any]]]] = (),
) -> str:
    """A page for a whole graph: ``facts`` (a key/value table), a ``note`` (what is shown of it),
    the SVG, then each ``(heading, rows)`` of ``tables`` collapsed under its heading."""
    body = [f"<h1>{esc(title)}</h1>", kv_table(facts)]
    if note:
        body.append(f'<p class="note">{esc(note)}</p>')
    body.append(render_graph_svg(graph, width=1040, height=760))
    for heading, rows in tables:
        body.append(f"<h2>{esc(heading)}</h2>")
        body.append(
            f"<details><summary>{len(rows)} rows</summary>{rows_table(list(rows))}</details>"
            if rows
            else '<p class="muted">none</p>'
        )
    return document(title, "".join(body))
