"""Where an index keeps what it holds: one backend object per index, instead of branches.

An index holds exactly one :class:`IndexBackend`: in memory (everything in the process; persisted
as one folder) or on LlamaIndex's stores (a vector store, a docstore and optionally a kvstore).
The index's methods call the backend's verbs and never ask which kind it is:

* ``write``: what a build produced goes to the backend (in memory: nothing to do);
* ``commit(old, new)``: an update's new state reaches the backend before the index swaps it in
  (in memory: nothing to do; on stores: the changed rows are replaced, and put back on failure);
* ``persist(persist_dir)``: the backend's part of the index as one folder (in memory: all of it;
  on stores: what the stores do not hold);
* ``describe()``: one line for errors and logs.

Each method package has its own pair (``multigranularity/backend.py`` and so on): what a
state holds differs by method, the verbs do not.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar


class IndexBackend(ABC):
    """The storage of one index; ``kind`` is ``"memory"`` or ``"stores"``."""

    kind: ClassVar[str]

    @abstractmethod
    def write(self, index: Any, state: Any) -> None:
        """Store what a build produced (``state``) for ``index``."""

    @abstractmethod
    def commit(self, index: Any, old: Any, new: Any) -> None:
        """Make the backend hold ``new`` instead of ``old``; on failure it still holds ``old``."""

    @abstractmethod
    def persist(self, index: Any, persist_dir: "str | Path") -> None:
        """Write the backend's part of ``index`` to ``persist_dir`` (atomically)."""

    @abstractmethod
    def describe(self) -> str:
        """One line naming where the index lives, for messages."""

    @property
    def in_stores(self) -> bool:
        return self.kind == "stores"
