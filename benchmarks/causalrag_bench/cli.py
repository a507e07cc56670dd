"""``causalrag-bench``: run retrievers beside LlamaIndex's own on a real dataset."""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from causalrag_bench import provenance as _provenance
from causalrag_bench.loaders import LOADERS


def _ints(value: str) -> List[int]:
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}") from None


def shown_data_path(path: str) -> str:
    """``path`` as ``$DATA/...`` when it lies under a ``datasets`` folder, else unchanged."""
    parts = Path(path).parts
    return "$DATA/" + "/".join(parts[parts.index("datasets") + 1 :]) if "datasets" in parts else path


def script_command(script: str, argv: List[str]) -> str:
    """``python benchmarks/scripts/<script> <argv>`` as run, quoted, with a path under a
    ``datasets`` folder shown as ``$DATA/...``."""
    shown = []
    for a in argv:
        short = shown_data_path(a)
        shown.append(short if short != a else shlex.quote(a))
    return f"python benchmarks/scripts/{script} " + " ".join(shown)


def write_results(out: str | Path, report: Mapping[str, Any], *, embed_model: Any, llm: Any) -> Path:
    """``report`` as ``<out>/results.json`` (folder created) with a ``provenance`` entry; prints the path.

    Every results.json the benchmark writes goes through here. ``embed_model`` and ``llm`` are
    what the run used (``None``: none; a mapping: a description kept as given); they are required
    so that no writer can leave them out. ``provenance`` (see ``causalrag_bench.provenance``)
    describes the process that writes the file; a writer that merges runs of earlier processes
    into one file keeps those runs' own ``provenance`` inside them (``provenance_of``).
    """
    path = Path(out) / "results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    stamped = {**report, "provenance": provenance_of(embed_model, llm)}
    path.write_text(json.dumps(stamped, indent=2), encoding="utf-8")
    print(f"wrote {path}")
    return path


def provenance_of(embed_model: Any, llm: Any) -> Dict[str, Any]:
    """The ``provenance`` entry ``write_results`` adds, for a part of a file (one of its runs)."""
    return _provenance.provenance(embed_model, llm)


def display_command(argv: List[str]) -> str:
    """The command line with machine paths shortened: a path under a ``datasets`` folder becomes
    ``$DATA/...``, ``--out`` becomes ``results/<its last component>``."""
    out, it = ["causalrag-bench"], iter(argv)
    for a in it:
        out.append(a)
        if a in ("--path", "--out", "--cache-dir"):
            v = next(it, "")
            if a == "--path":
                v = shown_data_path(v)
            elif a == "--out":
                v = f"results/{Path(v).name}"
            elif a == "--cache-dir":
                v = Path(v).name
            out.append(v)
    return " ".join(out)


def bench_embed_model(name: str, cache_dir: Path) -> Any:
    """The cached embedder ``--embed name`` runs every row with."""
    from causalrag_bench.embedding_cache import CachedEmbedding, cached_default_embed_model
    from causalrag_bench.mpnet import mpnet_embed_model

    if name == "minilm":
        return cached_default_embed_model(cache_dir)
    if name == "mpnet":
        return CachedEmbedding(mpnet_embed_model(cache_dir), cache_dir)
    raise ValueError(f"unknown embedder {name!r}; choose minilm or mpnet.")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="causalrag-bench",
        description="Budgeted context recall, R@K/MRR/AP, latency and build cost of retrievers on a dataset.",
    )
    p.add_argument("--dataset", choices=sorted(LOADERS), help="dataset format (required unless --list)")
    p.add_argument("--path", help="dataset folder or file (required unless --list)")
    p.add_argument(
        "--retrievers",
        default="dense,bm25,rrf,automerging,sentence_window",
        help="comma-separated registered names (see --list)",
    )
    p.add_argument("--budgets", type=_ints, default=[256, 512, 1024], help="token budgets, e.g. 256,512,1024")
    p.add_argument("--out", default=None, help="folder for results.json and recall_vs_budget.png")
    p.add_argument("--limit", type=int, default=None, help="first N questions only (the whole corpus is indexed)")
    p.add_argument(
        "--corpus-limit",
        type=int,
        default=None,
        help="smoke run: first N questions, corpus cut to their gold documents plus N distractors",
    )
    p.add_argument("--top-k", type=int, default=10, help="nodes each retriever returns (default 10)")
    p.add_argument("--chunk-size", type=int, default=256, help="flat chunk size in tokens (default 256)")
    p.add_argument(
        "--group-by", default=None, help="also report metrics per value of this question metadata key (e.g. type)"
    )
    p.add_argument(
        "--drop-no-gold", action="store_true", help="skip questions without gold evidence instead of failing"
    )
    p.add_argument(
        "--embed",
        choices=("minilm", "mpnet"),
        default="minilm",
        help="embedder of every row: minilm (the library's default, all-MiniLM-L6-v2) or mpnet "
        "(all-mpnet-base-v2 from its PyPI parts, a benchmark option; see causalrag_bench.mpnet)",
    )
    p.add_argument(
        "--cache-dir", default=None, help="embedding cache and artifacts (default ~/.cache/llama_index_ext_causalrag)"
    )
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.add_argument(
        "--torch-threads",
        type=int,
        default=0,
        help="torch threads for the embedder (default 0: torch decides, all cores; run one benchmark at a time)",
    )
    p.add_argument("--list", action="store_true", help="list registered retrievers and exit")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    cli = parser()
    args = cli.parse_args(argv)
    if not args.list and (args.dataset is None or args.path is None):
        cli.error("--dataset and --path are required (or use --list to see the retrievers)")
    if args.torch_threads > 0:
        try:
            import torch

            torch.set_num_threads(args.torch_threads)
        except ImportError:
            pass
    from causalrag_bench.registry import BenchContext, RowUnavailable, available

    if args.list:
        for name, spec in available().items():
            print(f"{name:28s} [{spec.group}] {spec.description}")
        return 0
    from causalrag_bench.embedding_cache import default_cache_dir
    from causalrag_bench.loaders import load_dataset
    from causalrag_bench.mpnet import EmbedderMissing
    from causalrag_bench.runner import legend, markdown_table, run_bench
    from causalrag_bench.types import corpus_subset

    names = [n.strip() for n in args.retrievers.split(",") if n.strip()]
    try:
        known = available()
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown retriever(s) {', '.join(map(repr, unknown))}; choose from: {', '.join(known)}.")
        if any(b <= 0 for b in args.budgets) or not args.budgets:
            raise ValueError(f"budgets must be positive token counts, got {args.budgets}; e.g. --budgets 256,512,1024.")
        if args.top_k <= 0:
            raise ValueError(f"--top-k must be >= 1, got {args.top_k}.")
        dataset = load_dataset(args.dataset, args.path)
        cache_dir = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
        work_dir = cache_dir / "bench" / args.dataset / Path(args.path).resolve().name
        if args.embed != "minilm":  # persisted artifacts hold the embedder's vectors
            work_dir = work_dir / f"embed_{args.embed}"
        if args.corpus_limit is not None:
            dataset = corpus_subset(dataset, args.corpus_limit)
            work_dir = work_dir / f"corpus_limit_{args.corpus_limit}"
            print(
                f"corpus limit: {len(dataset.examples)} questions, {len(dataset.documents)} documents", file=sys.stderr
            )
        ctx = BenchContext(
            dataset=dataset,
            embed_model=bench_embed_model(args.embed, cache_dir),
            work_dir=work_dir,
            top_k=args.top_k,
            chunk_size=args.chunk_size,
            show_progress=not args.no_progress,
        )
        report = run_bench(
            dataset,
            names,
            ctx,
            budgets=args.budgets,
            out_dir=Path(args.out) if args.out else None,
            limit=args.limit,
            group_by=args.group_by,
            drop_no_gold=args.drop_no_gold,
            command=display_command(argv if argv is not None else sys.argv[1:]),
        )
    except (ValueError, FileNotFoundError, RowUnavailable, EmbedderMissing) as e:
        print(f"causalrag-bench: error: {e}", file=sys.stderr)
        return 2
    print(f"\n{report['dataset']} ({report['path']}), {report['n_questions']} questions\n")
    print(markdown_table(report["rows"], args.budgets, args.chunk_size))
    for g, rows in report.get("groups", {}).items():
        print(f"\n{args.group_by} = {g} ({rows[0]['n']} questions)\n")
        print(markdown_table(rows, args.budgets, args.chunk_size))
    print("\n" + legend(args.chunk_size))
    if args.out:
        print(f"\nwrote {Path(args.out) / 'results.json'} (with its provenance) and recall_vs_budget.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
