"""The explanation page and the graph page in a real headless Chromium: every node id is in the
DOM, a ``<script>`` inside the data stays text and never runs, and the screenshot is not blank.

Skipped only when no ``chromium`` binary exists (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from html import escape
from pathlib import Path
from typing import List, Set

import pytest

from _causal_graph_helpers import HashEmbedding, corpus
from _explain_helpers import HOSTILE_ID, PWNED, sample_explanation
from llama_index_ext_causalrag.causal_graph import CausalGraphIndex
from llama_index_ext_causalrag.explain import render_page

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)"),
]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions"]


def _chromium(tmp_path: Path, *args: str) -> str:
    done = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _title(dom: str) -> str:
    m = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert m, dom[:500]
    return m.group(1)


def png_colours(path: Path, limit: int = 3) -> Set[bytes]:
    """Distinct pixel values of an 8-bit RGB/RGBA PNG (stops after ``limit``): IDAT inflated, rows unfiltered."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            width, _, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), f"unexpected PNG format depth={depth} colour type={ctype}"
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride = zlib.decompress(idat), width * bpp
    prev, seen = bytearray(stride), set()
    for r in range(len(raw) // (stride + 1)):
        f, row = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1 : (r + 1) * (stride + 1)])
        for i in range(stride):
            a = row[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                row[i] = (row[i] + a) & 255
            elif f == 2:
                row[i] = (row[i] + b) & 255
            elif f == 3:
                row[i] = (row[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        seen.update(bytes(row[i : i + bpp]) for i in range(0, stride, bpp * 7))
        if len(seen) >= limit:
            return seen
        prev = row
    return seen


def _check_screenshot(tmp_path: Path, page: Path, name: str) -> Path:
    shot = tmp_path / name
    _chromium(tmp_path, "--window-size=900,700", "--hide-scrollbars", f"--screenshot={shot}", page.as_uri())
    assert shot.exists() and shot.stat().st_size > 1000
    assert len(png_colours(shot)) >= 3, "the screenshot is blank"
    return shot


def test_chromium_would_run_an_unescaped_script(tmp_path):
    """Control: the title check below can fail (Chromium runs inline scripts in --dump-dom)."""
    page = tmp_path / "control.html"
    page.write_text(f"<!DOCTYPE html><html><head><title>safe</title></head><body>{PWNED}</body></html>")
    assert _title(_chromium(tmp_path, "--dump-dom", page.as_uri())) == "pwned"


def test_explanation_page_in_chromium(tmp_path):
    ex = sample_explanation(hostile=True)
    page = tmp_path / "explain.html"
    page.write_text(render_page(ex), encoding="utf-8")
    dom = _chromium(tmp_path, "--dump-dom", page.as_uri())
    title = _title(dom)
    assert "pwned" not in title and title.startswith("See why: causalrag2")
    assert "<script" not in dom
    assert escape(PWNED, quote=False) in dom  # shown as text
    assert escape(HOSTILE_ID, quote=False) in dom
    for n in ex["nodes"]:
        assert escape(n["id"], quote=False) in dom, n["id"]
    assert dom.count("<svg") == 1
    _check_screenshot(tmp_path, page, "explain.png")


def test_graph_page_in_chromium(tmp_path):
    idx = CausalGraphIndex.from_documents(corpus(2), embed_model=HashEmbedding(), max_cluster_size=3)
    page = idx.graph_page(tmp_path / "graph.html", max_nodes=20)
    dom = _chromium(tmp_path, "--dump-dom", page.as_uri())
    assert "more than max_nodes=20" in dom and dom.count("<svg") == 1
    shown: List[str] = re.findall(r'<g data-id="([^"]*)"', dom)
    assert 0 < len(shown) <= 20
    _check_screenshot(tmp_path, page, "graph.png")
