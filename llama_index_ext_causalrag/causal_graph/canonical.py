"""Entity canonicalisation: exact keys, near-duplicates by string ratio and embedding cosine.

Pure (numpy + difflib). Names are first reduced to a normalised key (case, punctuation,
plural); distinct keys are then merged by union-find when their string ratio or their
embedding cosine passes a threshold. String comparisons are blocked (same first four
characters or same last word) so the cost stays near-linear in the number of keys.
"""

from __future__ import annotations

import re
from collections import defaultdict
from difflib import SequenceMatcher
from typing import Dict, List, Optional, Sequence

import numpy as np

_DIGITS = re.compile(r"\d+")


class UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: int, b: int) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if rb < ra:
            ra, rb = rb, ra
        self.parent[rb] = ra
        return True

    def groups(self) -> List[List[int]]:
        out: Dict[int, List[int]] = defaultdict(list)
        for i in range(len(self.parent)):
            out[self.find(i)].append(i)
        return sorted(out.values())


def _compatible(a: str, b: str) -> bool:
    """Never merge names that differ in a number (``type 1 diabetes`` vs ``type 2 diabetes``)."""
    return _DIGITS.findall(a) == _DIGITS.findall(b)


def string_duplicate_pairs(keys: Sequence[str], threshold: float = 0.92, max_block: int = 60) -> List[tuple]:
    """Index pairs whose ``difflib`` ratio is at least ``threshold``, within blocks."""
    blocks: Dict[str, List[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        if len(k) < 5:
            continue  # short names: only exact keys merge
        blocks["p:" + k[:4]].append(i)
        blocks["s:" + k.rsplit(" ", 1)[-1]].append(i)
    pairs = set()
    for members in blocks.values():
        if len(members) < 2:
            continue
        if len(members) > max_block:  # sorted-neighbourhood inside a huge block
            members = sorted(members, key=lambda i: keys[i])
            cand = [
                (members[j], members[j + d]) for j in range(len(members)) for d in (1, 2, 3) if j + d < len(members)
            ]
        else:
            cand = [(a, b) for x, a in enumerate(members) for b in members[x + 1 :]]
        for a, b in cand:
            ka, kb = keys[a], keys[b]
            if not _compatible(ka, kb):
                continue
            sm = SequenceMatcher(None, ka, kb)
            if sm.real_quick_ratio() >= threshold and sm.quick_ratio() >= threshold and sm.ratio() >= threshold:
                pairs.add((min(a, b), max(a, b)))
    return sorted(pairs)


def embedding_duplicate_pairs(
    keys: Sequence[str], embeddings: np.ndarray, threshold: float = 0.95, block: int = 2048
) -> List[tuple]:
    """Index pairs with cosine >= ``threshold``. ``embeddings``: (n, d), rows need not be unit."""
    n = embeddings.shape[0]
    if n < 2:
        return []
    X = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    X = X.astype(np.float32)
    pairs = []
    for s in range(0, n, block):
        sims = X[s : s + block] @ X.T
        rows, cols = np.nonzero(sims >= threshold)
        for r, c in zip(rows.tolist(), cols.tolist()):
            a = s + r
            if a < c and _compatible(keys[a], keys[c]):
                pairs.append((a, c))
    return sorted(pairs)


def canonical_groups(
    keys: Sequence[str],
    embeddings: Optional[np.ndarray] = None,
    string_threshold: float = 0.92,
    embed_threshold: float = 0.95,
) -> List[List[int]]:
    """Groups of key indices to merge (union-find over string and embedding near-duplicates).

    A threshold above 1 disables that criterion.
    """
    uf = UnionFind(len(keys))
    if string_threshold <= 1.0:
        for a, b in string_duplicate_pairs(keys, string_threshold):
            uf.union(a, b)
    if embeddings is not None and embed_threshold <= 1.0:
        if embeddings.shape[0] != len(keys):
            raise ValueError(f"embeddings has {embeddings.shape[0]} rows for {len(keys)} keys; pass one row per key.")
        for a, b in embedding_duplicate_pairs(keys, embeddings, embed_threshold):
            uf.union(a, b)
    return uf.groups()
