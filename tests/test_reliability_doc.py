"""docs/reliability.md names only tests that exist."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_named_in_the_reliability_doc_exists():
    doc = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    named = set(re.findall(r"\b(test_\w+)\b", doc)) - {p.stem for p in (ROOT / "tests").glob("test_*.py")}
    defined = set()
    for f in (ROOT / "tests").glob("test_*.py"):
        defined |= set(re.findall(r"^(?:async )?def (test_\w+)", f.read_text(encoding="utf-8"), re.M))
    assert named and not named - defined, sorted(named - defined)
