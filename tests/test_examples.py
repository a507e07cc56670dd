"""The offline examples run as a user runs them (real packaged MiniLM, no LLM, no network)."""

import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _run(script: str) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, script], cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=300, check=True
    )
    return out.stdout


def test_quickstart_shows_umgp_covering_gold_the_plain_retriever_misses():
    out = _run("quickstart.py")
    assert out.startswith("Question: ")
    m = re.search(r"gold sentences covered: VectorStoreIndex (\d)/4, UMGP (\d)/4", out)
    assert m, out
    assert int(m.group(2)) > int(m.group(1))


def test_compose_example_runs_hcqr_over_umgp_then_the_causal_filter():
    out = _run("compose_methods.py")
    assert "support       query:" in out and "Context after HCQR over UMGP, then the causal filter:" in out
    assert re.search(r"^1\. \[orchard-report\] found by \{", out, re.M), out


def test_llamaindex_app_chats_calls_a_tool_in_an_agent_and_evaluates():
    out = _run("llamaindex_app.py")
    assert "chat> What causes bitter pit in apples?\n  Calcium deficiency in apples causes bitter pit" in out
    assert "  The manager applied ground limestone" in out  # the follow-up was condensed and answered
    assert "tool call: Ladybird larvae eat aphids" in out
    assert "agent: In October the compressor failed" in out and "agent tool calls: ['orchard_records']" in out
    rows = re.findall(r"budget_tokens=(\w+): hit_rate ([\d.]+), mrr ([\d.]+) \((\d+) fitted pieces\)", out)
    assert [r[0] for r in rows] == ["None", "48"], out
    (_, hit, mrr, whole), (_, hit_b, mrr_b, fitted) = rows
    assert (hit, mrr) == (hit_b, mrr_b) == ("1.00", "1.00") and whole == "0" and int(fitted) > 0
