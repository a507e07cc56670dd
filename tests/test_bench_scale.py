"""benchmarks/scripts/bench_scale.py: the growth exponent, the RAM refusal, a tiny in-memory run."""

import json
import sys
from pathlib import Path

import pytest

from test_eval_bench import write_holisqa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "scripts"))
import bench_scale  # noqa: E402


def _holisqa(tmp_path):
    for domain in ("biology", "business"):
        write_holisqa(tmp_path / "holisqa" / domain)
    return str(tmp_path / "holisqa")


def test_growth_exponent_is_the_log_log_slope():
    units = [1_000, 10_000, 100_000]
    assert bench_scale.growth_exponent(units, [3.0 * u**0.5 for u in units]) == pytest.approx(0.5)
    assert bench_scale.growth_exponent(units, [7.0, 7.0, 7.0]) == pytest.approx(0.0, abs=1e-9)
    assert bench_scale.growth_exponent([1_000], [5.0]) is None


def test_replicas_have_new_ids_and_their_own_text_and_metadata():
    from llama_index.core.schema import TextNode

    unit = TextNode(text="Some window text.", id_="d::s0-2", metadata={"umg_granularity": 2})
    (copy,) = bench_scale.replica([unit], 3)
    assert copy.node_id == "d::s0-2#r3" and copy.text == unit.text
    assert copy.text is not unit.text and copy.metadata is not unit.metadata


def test_refuses_a_size_whose_ram_would_exceed_max_gb(tmp_path, capsys):
    code = bench_scale.main(
        [
            "--holisqa",
            _holisqa(tmp_path),
            "--sizes",
            "1000000",
            "--backends",
            "memory",
            "--random-embeddings",
            "--max-gb",
            "8",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "refusing size 1000000 on memory: its RAM would exceed --max-gb 8" in err
    assert "every requested point was refused" in err


def test_ram_estimate_grows_with_size_and_postgres_keeps_one_copy_in_memory():
    small, big = (bench_scale.estimate("memory", s, 30_000, 384, 5_500.0, 2_650.0)["ram"] for s in (1, 100))
    assert big > 25 * bench_scale.GB > small
    pg = bench_scale.estimate("postgres", 100, 30_000, 384, 5_500.0, 2_650.0)
    assert pg["ram"] < 2 * bench_scale.GB and pg["disk"] > 10 * bench_scale.GB


def test_tiny_memory_run_writes_points_and_the_exponent(tmp_path, capsys):
    out = tmp_path / "out"
    code = bench_scale.main(
        [
            "--holisqa",
            _holisqa(tmp_path),
            "--sizes",
            "1,2",
            "--backends",
            "memory",
            "--random-embeddings",
            "--questions",
            "3",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err[-2000:]
    report = json.loads((out / "results.json").read_text())
    points = report["points"]
    assert [(p["backend"], p["size"]) for p in points] == [("memory", 1), ("memory", 2)]
    assert points[1]["units"] == 2 * points[0]["units"] > 0
    assert all(p["peak_rss_bytes"] > 0 and p["disk_bytes"] > 0 and p["n_questions"] == 3 for p in points)
    assert points[1]["disk_bytes"] > points[0]["disk_bytes"]
    assert report["p50_growth_exponent"]["memory"] is not None
    assert "random unit-norm" in report["corpus"]["replicas"]
    assert "no quality" in capsys.readouterr().out


def test_append_adds_points_refits_the_exponent_and_refuses_another_corpus(tmp_path, capsys):
    from causalrag_bench.perf_tables import scale_table

    holisqa, out = _holisqa(tmp_path), tmp_path / "out"
    base = ["--holisqa", holisqa, "--backends", "memory", "--random-embeddings", "--questions", "3", "--out", str(out)]
    assert bench_scale.main([*base, "--sizes", "1"]) == 0
    first = json.loads((out / "results.json").read_text())
    assert first["p50_growth_exponent"]["memory"] is None  # one size: no slope yet
    assert bench_scale.main([*base, "--sizes", "2", "--append"]) == 0
    report = json.loads((out / "results.json").read_text())
    assert [(p["backend"], p["size"]) for p in report["points"]] == [("memory", 1), ("memory", 2)]
    assert report["points"][0] == first["points"][0]  # the first run's point is kept, not re-measured
    assert report["p50_growth_exponent"]["memory"] is not None
    assert len(report["commands"]) == 2 and "--append" in report["commands"][1]
    # one provenance per command, the first run's kept; random vectors: no embedder
    assert report["provenances"][0] == first["provenances"][0] == first["provenance"]
    assert len(report["provenances"]) == 2 and report["provenance"]["embedder"] == "none"
    table = scale_table(report)
    assert "| memory | 1x |" in table and "| memory | 2x |" in table and "--append" in table
    capsys.readouterr()
    assert bench_scale.main([*base, "--sizes", "1", "--append", "--articles", "1"]) == 2
    assert "measured another corpus" in capsys.readouterr().err
    assert len(json.loads((out / "results.json").read_text())["points"]) == 2  # left as it was


def test_max_units_within_is_where_the_rss_line_reaches_the_budget():
    from causalrag_bench.perf_tables import max_units_within

    points = [{"units": 1_000, "peak_rss_bytes": 2_000}, {"units": 3_000, "peak_rss_bytes": 4_000}]
    assert max_units_within(points, 10_000) == 9_000  # rss = units + 1000
    assert max_units_within(points[:1], 10_000) is None


def test_replica_nodes_hold_every_copy_for_in_and_getitem():
    from llama_index.core.schema import TextNode

    nodes = bench_scale.ReplicaNodes([TextNode(text="a", id_="d::s0-2")])
    assert "d::s0-2" in nodes and "d::s0-2#r3" in nodes  # `in` sees the copies too
    assert nodes["d::s0-2#r3"].node_id == "d::s0-2#r3" and nodes["d::s0-2#r3"].text == "a"
    assert "other#r1" not in nodes and "d::s0-2#rx" not in nodes


def test_perturbed_copies_replace_a_tenth_of_each_unit_s_tokens_from_the_corpus_seeded():
    """bench_served_scale's --copies perturbed mode (profile_milvus_lists.py): each copy's BM25
    tokens differ from its original's in about a tenth of their positions (at least one), drawn
    from the corpus's tokens; the same seed gives the same copies."""
    import bench_served_scale
    import numpy as np

    tokens = [[f"w{i}_{j}" for j in range(40)] for i in range(30)] + [["only"], []]
    a = bench_served_scale.perturbed_tokens(tokens, np.random.default_rng(3))
    b = bench_served_scale.perturbed_tokens(tokens, np.random.default_rng(3))
    pool = {t for ts in tokens for t in ts}
    assert a == b and [len(t) for t in a] == [len(t) for t in tokens]
    changed = [sum(x != y for x, y in zip(new, old)) for new, old in zip(a[:30], tokens[:30])]
    assert all(1 <= c <= 4 for c in changed) and sum(changed) >= 108  # 4 positions of 40, rarely redrawn alike
    assert all(t in pool for ts in a for t in ts) and a[31] == []
