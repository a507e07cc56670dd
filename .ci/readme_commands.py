"""Prints the README's set-up commands, one per line: the ```bash blocks of its "Set-up" section.

.ci/run runs exactly these, so what CI checks is what the README tells a user to type.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import List

SECTION = re.compile(r"^## Set-up\b.*?(?=^## )", re.S | re.M)
BASH = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def setup_commands(readme: str) -> List[str]:
    section = SECTION.search(readme)
    if section is None:
        raise ValueError("README.md has no '## Set-up' section")
    commands = [
        " ".join(line.strip() for line in block.strip().splitlines()) for block in BASH.findall(section.group(0))
    ]
    if any("\\" in c for c in commands):
        raise ValueError(f"a set-up command continues a line with a backslash; write it on one line: {commands}")
    return commands


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    print("\n".join(setup_commands((root / "README.md").read_text(encoding="utf-8"))))
    sys.exit(0)
