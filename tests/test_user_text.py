"""User-facing text stands on its own: no internal spec, no machine paths, in code or docs."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("METHODS.md", "METHODS ", "../shared", "/work/")


def test_library_docs_and_examples_cite_nothing_outside_the_repository():
    files = [
        *ROOT.joinpath("llama_index_ext_causalrag").rglob("*.py"),
        *ROOT.joinpath("examples").rglob("*.py"),
        *ROOT.joinpath("docs").rglob("*.md"),
        ROOT / "README.md",
    ]
    bad = [f"{f.relative_to(ROOT)}: {w}" for f in files for w in FORBIDDEN if w in f.read_text(encoding="utf-8")]
    assert not bad, bad


def test_relative_links_in_readme_and_docs_resolve():
    import re

    bad = []
    for f in [ROOT / "README.md", *ROOT.joinpath("docs").rglob("*.md")]:
        for link in re.findall(r"\]\(([^)#\s]+)", f.read_text(encoding="utf-8")):
            if not link.startswith("http") and not (f.parent / link).exists():
                bad.append(f"{f.relative_to(ROOT)} -> {link}")
    assert not bad, bad
