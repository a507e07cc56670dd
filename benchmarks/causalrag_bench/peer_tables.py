"""The "where peers publish" tables of docs/peers.md, generated from the runs'
``benchmarks/results/peers_<set>_<embedder>/results.json`` with the peers' published figures
beside ours (``python -m causalrag_bench.tables`` writes them with the other tables).

The published figures are typed here once, each with its source; every number of ours comes
from a results.json.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

RESULTS = "benchmarks/results"
DOC = "docs/peers.md"
EMBEDDERS = (("minilm", "all-MiniLM-L6-v2"), ("mpnet", "all-mpnet-base-v2"))
BASELINES = ("dense", "bm25", "rrf")
ROWS = ("dense", "bm25", "rrf", "umgp", "causalrag2", "causalrag2_ppr", "causalrag2_passages")
ROW_NAMES = {
    "dense": "LlamaIndex `VectorStoreIndex` (dense)",
    "bm25": "LlamaIndex `BM25Retriever`",
    "rrf": "LlamaIndex `QueryFusionRetriever` (RRF of the two)",
    "umgp": "`MultiGranularityIndex` (`umgp`, default)",
    "causalrag2": "`CausalGraphIndex` preset `causalrag2` (gated expansion)",
    "causalrag2_ppr": "`CausalGraphIndex` preset `ppr`",
    "causalrag2_passages": "`CausalGraphIndex` preset `passages` (default: `ppr` + title nodes and bridges)",
}


@dataclass(frozen=True)
class Published:
    """A peer's published figure of the set's headline metric on the full set (x100), its
    same-embedder dense figure when published, what it ran with, and where it is published."""

    system: str
    value: float
    dense: Optional[float]
    models: str
    source: str


@dataclass(frozen=True)
class PeerSet:
    key: str  # the run folders: peers_<key>_<embedder>
    title: str
    metrics: Tuple[str, ...]  # columns
    headline: str  # the peers' metric: the gain column and the published figures
    gain_over: str  # "dense": the same-embedder dense row; "best": the best LlamaIndex baseline
    published: Tuple[Published, ...]


_HIPPO = "HippoRAG 2 paper (arXiv 2502.14802), full set"
_NV = "NV-Embed-v2 (7B)"
_NV_LLM = "NV-Embed-v2 (7B), Llama-3.3-70B"
_HIPPO_SETS = (
    ("musique", "MuSiQue (100 questions of the train split, 1,890 passages)", 74.7, 69.7, 73.0),
    ("2wikimultihopqa", "2WikiMultiHopQA (164 dev questions, 1,294 passages)", 90.4, 76.5, 94.1),
    ("hotpotqa", "HotpotQA (200 dev questions, distractor setting, 1,971 passages)", 96.3, 94.5, 96.3),
)
SETS = (
    *[
        PeerSet(
            key,
            title,
            ("PR@2", "PR@5"),
            "PR@5",
            "dense",
            (
                Published("NV-Embed-v2 dense", dense, None, _NV, _HIPPO),
                Published("HippoRAG 2", hippo, dense, _NV_LLM, _HIPPO),
                Published("Zilliz Vector Graph RAG", zilliz, None, "as published by Zilliz", "Zilliz, full set"),
            ),
        )
        for key, title, hippo, dense, zilliz in _HIPPO_SETS
    ],
    PeerSet(
        "scifact",
        "BEIR SciFact (809 train claims, 5,183 abstracts)",
        ("nDCG@10", "PR@100"),
        "nDCG@10",
        "best",
        (
            Published("BM25", 66.5, None, "Elasticsearch BM25", "BEIR paper (Thakur et al., 2021), test split"),
            Published("all-MiniLM-L6-v2 dense", 64.5, None, "all-MiniLM-L6-v2", "MTEB, test split"),
        ),
    ),
    PeerSet(
        "holisqa_biology",
        "HolisQA biology (421 questions, 1,111 abstracts; no peer publishes on it)",
        ("CR@256", "CR@512", "CR@1024"),
        "CR@512",
        "best",
        (),
    ),
)
CAVEAT = (
    "The peers' figures are on the full sets, with a 7B embedder (NV-Embed-v2) and a 70B LLM "
    "(Llama-3.3-70B-Instruct) building their graph; ours run fully offline with a 22M (MiniLM) or 110M "
    "(mpnet) embedder and no LLM, on the dev subsets above. Compare gains over a dense row with the same "
    "embedder, not absolute numbers."
)


def _run(root: Path, key: str, embedder: str) -> Optional[Dict[str, Any]]:
    path = root / RESULTS / f"peers_{key}_{embedder}" / "results.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _reference(rows: Mapping[str, Mapping[str, float]], metric: str, gain_over: str) -> Tuple[str, float]:
    if gain_over == "dense":
        return "dense", rows["dense"][metric]
    best = max((b for b in BASELINES if b in rows), key=lambda b: rows[b][metric])
    return best, rows[best][metric]


def set_table(root: Path, s: PeerSet) -> Optional[str]:
    """One set's table: every row of every embedder run, its gain on the headline metric over the
    reference row of its own run, then the published figures; ``None`` when no run exists."""
    head = s.headline
    ref_name = "dense (same embedder)" if s.gain_over == "dense" else "best of dense, bm25, rrf (same embedder)"
    cols = [*s.metrics, "CR@512"] if "CR@512" not in s.metrics else list(s.metrics)
    lines = [
        f"| row | embedder | {' | '.join(cols)} | {head} gain over {ref_name} |",
        "|---|---|" + "---:|" * (len(cols) + 1),
    ]
    commands: List[str] = []
    for emb, emb_name in EMBEDDERS:
        report = _run(root, s.key, emb)
        if report is None:
            continue
        commands.append(report.get("command") or "")
        rows = {r["retriever"]: r["metrics"] for r in report["rows"]}
        _, ref = _reference(rows, head, s.gain_over)
        for name in ROWS:
            if name in rows:
                m = rows[name]
                vals = " | ".join(f"{m[c]:.1f}" if c in m else "–" for c in cols)
                lines.append(f"| {ROW_NAMES[name]} | {emb_name} | {vals} | {m[head] - ref:+.1f} |")
    if not commands:
        return None
    for p in s.published:
        gain = f"{p.value - p.dense:+.1f}" if p.dense is not None else "–"
        vals = " | ".join(f"{p.value:.1f}" if c == head else "–" for c in cols)
        lines.append(f"| {p.system} (published: {p.source}) | {p.models} | {vals} | {gain} |")
    out = [f"**{s.title}**", "", *lines, "", "Commands:", "", *[f"    {c}" for c in commands]]
    return "\n".join(out)


def run_table(report: Mapping[str, Any]) -> str:
    """One run's rows as the bench prints them, with its command."""
    from causalrag_bench.runner import markdown_table

    table = markdown_table(report["rows"], report["budgets"], report.get("chunk_size"))
    return f"{table}\n\n    {report.get('command') or ''}"


SHORT_PASSAGE_RUNS = (
    ("hotpotqa", "hotpotqa"),
    ("2wikimultihopqa", "2wikimultihopqa"),
    ("musique", "musique"),
    ("scifact", "scifact"),
    ("holisqa_biology", "biology"),
)  # (peer set key, umgp_short_passages_<run>)


def short_passages_table(root: Path) -> Optional[str]:
    """``umgp`` (default) against ``umgp_passages`` (short documents kept whole) on each set, MiniLM,
    beside the best LlamaIndex row of the set's peers run; ``None`` when no run exists."""
    lines = [
        "| set | metric | best LlamaIndex row | umgp (default) | umgp_passages | umgp_passages - best |",
        "|---|---|---|---:|---:|---:|",
    ]
    commands: List[str] = []
    for key, run in SHORT_PASSAGE_RUNS:
        path = root / RESULTS / f"umgp_short_passages_{run}" / "results.json"
        peers = _run(root, key, "minilm")
        if not path.exists() or peers is None:
            continue
        report = json.loads(path.read_text(encoding="utf-8"))
        commands.append(report.get("command") or "")
        ours = {r["retriever"]: r["metrics"] for r in report["rows"]}
        base = {r["retriever"]: r["metrics"] for r in peers["rows"]}
        s = next(x for x in SETS if x.key == key)
        for metric in s.metrics if s.key != "scifact" else ("nDCG@10",):
            best, value = _reference(base, metric, "best")
            a, b = ours["umgp"][metric], ours["umgp_passages"][metric]
            lines.append(
                f"| {s.title.split(' (')[0]} | {metric} | {best} {value:.1f} | {a:.1f} | {b:.1f} | {b - value:+.1f} |"
            )
    if not commands:
        return None
    return "\n".join([*lines, "", *[f"    {c}" for c in commands]])


def peers_block(root: Path, sets: Sequence[PeerSet] = SETS) -> str:
    tables = [t for t in (set_table(root, s) for s in sets) if t]
    return "\n\n".join([f"> {CAVEAT}", *tables]) if tables else f"> {CAVEAT}\n\n(no runs yet)"


def render(root: Path, text: Optional[str] = None) -> Dict[str, str]:
    """``{DOC: new text}`` with the block between the ``peers`` markers replaced, in ``text``
    (the doc's text after other tables were written into it) or the file's."""
    from causalrag_bench.tables import doc_markers, replace_block  # tables imports this module

    doc = root / DOC
    if text is None and not doc.exists():
        return {}
    text = text if text is not None else doc.read_text(encoding="utf-8")
    text = replace_block(text, peers_block(root), *doc_markers("peers"))
    short = short_passages_table(root)
    if short is not None:
        text = replace_block(text, short, *doc_markers("umgp_short_passages"))
    documents = documents_table(root)
    if documents is not None:
        text = replace_block(text, documents, *doc_markers("umgp_documents"))
    tuning = documents_tuning_table(root)
    if tuning is not None:
        text = replace_block(text, tuning, *doc_markers("umgp_documents_tuning"))
    return {DOC: text}


DOCUMENT_SETS = (("hotpotqa", "HotpotQA"), ("2wikimultihopqa", "2WikiMultiHopQA"), ("musique", "MuSiQue"))
_CR = ("CR@256", "CR@512", "CR@1024")
DOCUMENT_OTHER = (
    ("umgp_documents_scifact", "BEIR SciFact", ("nDCG@10",), "umgp_documents"),
    ("umgp_documents_biology", "HolisQA biology", _CR, "umgp_documents"),
    ("umgp_documents_business", "HolisQA business", _CR, "umgp_documents"),
    # no novel is within 256 tokens, so the preset is its parent_evidence="lists" alone: the umgp_doclists row
    ("umgp_doclists_graphrag", "GraphRAG-Bench novels (row umgp_doclists)", _CR, "umgp_doclists"),
)  # (run folder, title, metrics, the preset's row)


def _load(root: Path, name: str) -> Optional[Dict[str, Any]]:
    path = root / RESULTS / name / "results.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _half_cells(halves: Optional[Mapping[str, Any]], metric: str) -> str:
    if halves is None:
        return "– | –"
    cells = []
    for h in ("first", "second"):
        part = halves["halves"][h]
        best = part[f"best {metric}"]
        cells.append(f"{best['row']} {best['value']:.1f} / {part['umgp_documents'][metric]:.1f}")
    return " | ".join(cells)


def documents_table(root: Path) -> Optional[str]:
    """The opt-in preset ``documents`` (row ``umgp_documents``) against ``umgp`` and the best LlamaIndex
    row of the same run on the multi-hop sets (all questions, then each half: the preset was chosen on
    the first), and against ``umgp`` on the other sets; ``None`` when no run exists."""
    lines = [
        "| set | metric | best LlamaIndex row | umgp (default) | umgp_documents | documents - best "
        "| first half: best / documents | second half: best / documents |",
        "|---|---|---|---:|---:|---:|---|---|",
    ]
    commands: List[str] = []
    for run, title in DOCUMENT_SETS:
        report = _load(root, f"umgp_documents_{run}")
        if report is None:
            continue
        commands.append(report.get("command") or "")
        halves = _load(root, f"umgp_documents_halves_{run}")
        if halves is not None:
            commands.append(halves.get("command") or "")
        rows = {r["retriever"]: r["metrics"] for r in report["rows"]}
        for metric in ("PR@2", "PR@5"):
            best, value = _reference(rows, metric, "best")
            a, b = rows["umgp"][metric], rows["umgp_documents"][metric]
            lines.append(
                f"| {title} | {metric} | {best} {value:.1f} | {a:.1f} | {b:.1f} | {b - value:+.1f} "
                f"| {_half_cells(halves, metric)} |"
            )
    other = ["| set | metric | umgp (default) | umgp_documents | difference |", "|---|---|---:|---:|---:|"]
    cost = ["| set | build s: umgp / umgp_documents | p50 ms: umgp / umgp_documents |", "|---|---:|---:|"]
    for run, title, metrics, row in (
        *((f"umgp_documents_{r}", t, (), "umgp_documents") for r, t in DOCUMENT_SETS),
        *DOCUMENT_OTHER,
    ):
        report = _load(root, run)
        if report is None:
            continue
        rows = {r["retriever"]: r for r in report["rows"]}
        a, b = rows["umgp"], rows[row]
        cost.append(f"| {title} | {a['build_s']:.1f} / {b['build_s']:.1f} | {a['p50_ms']:.1f} / {b['p50_ms']:.1f} |")
        if metrics:
            commands.append(report.get("command") or "")
        for metric in metrics:
            x, y = a["metrics"][metric], b["metrics"][metric]
            other.append(f"| {title} | {metric} | {x:.1f} | {y:.1f} | {y - x:+.1f} |")
    if not commands:
        return None
    return "\n".join([*lines, "", *other, "", *cost, "", *[f"    {c}" for c in commands]])


def documents_tuning_table(root: Path) -> Optional[str]:
    """benchmarks/scripts/tune_umgp_documents.py on each multi-hop set: every (layout, variant) tried,
    first half (the tuning half) then second half; ``None`` when no run exists."""
    lines = [
        "| set | layout | variant | first half PR@2 | first half PR@5 | second half PR@2 | second half PR@5 |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    commands: List[str] = []
    for run, title in DOCUMENT_SETS:
        report = _load(root, f"umgp_documents_tuning_{run}")
        if report is None:
            continue
        commands.append(report.get("command") or "")
        for r in report["rows"]:
            cells = " | ".join(f"{r[f'{h} PR@{k}']:.1f}" for h in ("first", "second") for k in (2, 5))
            lines.append(f"| {title} | {r.get('layout', '–')} | {r['row']} | {cells} |")
    if not commands:
        return None
    return "\n".join([*lines, "", *[f"    {c}" for c in commands]])
