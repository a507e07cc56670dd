"""Shared helpers of the incremental-update tests: corpora committed with the tests, result keys.

* :func:`holisqa_biology`: abstract-like biology documents and questions *generated* here
  (seeded, so every run and every machine gets the same text). They stand in for HolisQA's
  biology abstracts, which are not in the repository.
* :func:`quic_rfcs`: excerpts of the six QUIC RFCs in ``tests/fixtures/quic_rfcs`` (see the
  README there) and questions written for those excerpts.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import List, Tuple

from llama_index.core.schema import Document

FIXTURES = Path(__file__).resolve().parent / "fixtures"
QUIC = FIXTURES / "quic_rfcs"
QUIC_RFCS = ("rfc8999", "rfc9000", "rfc9001", "rfc9114", "rfc9204", "rfc9002")  # rfc9002 last


def _jsonl(path: Path) -> List[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ---- generated biology abstracts -------------------------------------------------------------
# A small shared vocabulary, so documents overlap (BM25 and dense scores tie or nearly tie),
# with causal sentences ("X increases Y") of the kind CausalGraphIndex extracts.
_GENES = (
    "SIRT1",
    "AMPK",
    "mTOR",
    "p53",
    "HIF-1alpha",
    "VEGF",
    "TNF-alpha",
    "IL-6",
    "NF-kB",
    "PGC-1alpha",
    "FOXO3",
    "BRCA1",
    "insulin",
    "leptin",
    "TGF-beta",
    "Nrf2",
)
_PROCESSES = (
    "apoptosis",
    "autophagy",
    "inflammation",
    "angiogenesis",
    "cell proliferation",
    "oxidative stress",
    "insulin resistance",
    "mitochondrial biogenesis",
    "DNA repair",
    "fibrosis",
    "lipid accumulation",
    "glucose uptake",
    "senescence",
    "tumour growth",
)
_MODELS = (
    "mice",
    "rats",
    "Drosophila",
    "yeast",
    "human fibroblasts",
    "rat hepatocytes",
    "Arabidopsis seedlings",
    "patient biopsies",
)
_TISSUES = ("liver", "skeletal muscle", "kidney", "brain", "adipose tissue", "retina", "heart", "pancreas")
_METHODS = (
    "RNA sequencing",
    "CRISPR knockout",
    "western blotting",
    "mass spectrometry",
    "flow cytometry",
    "confocal microscopy",
    "chromatin immunoprecipitation",
    "metabolic labelling",
)
_TREATMENTS = (
    "caloric restriction",
    "metformin",
    "rapamycin",
    "hypoxia",
    "a high-fat diet",
    "exercise training",
    "resveratrol",
    "cold exposure",
)
_UP, _DOWN = ("increases", "promotes", "enhances", "induces"), ("reduces", "inhibits", "suppresses", "lowers")
_TITLES = (
    "{g} regulates {p} in the {t} of {m}",
    "{tr} and {p}: a role for {g}",
    "Loss of {g} drives {p} in {m}",
    "{g} links {p} and {p2} in the {t}",
)
_SENTENCES = (
    "{g} {up} {p} in the {t}.",
    "{tr} causes {p} in {m}.",
    "Loss of {g} {down} {p2} in {m}.",
    "{g} activation leads to {p} and {p2}.",
    "{g} {down} {g2} signalling during {p}.",
    "We used {meth} to profile {t} samples from {m} exposed to {tr}.",
    "{g} expression was {n}-fold higher in the {t} after {tr}.",
    "{p} in the {t} is regulated by {g} and {g2}.",
    "{tr} {up} {g} levels, which in turn {up2} {p}.",
    "Inhibiting {g2} with {tr} {down} {p} but not {p2}.",
    "{meth} showed that {g} binds {g2} in {m}.",
    "These findings suggest that {g} couples {p} to {p2} in the {t}.",
)


def _cap(s: str) -> str:
    return s if s.startswith(_GENES) else s[0].upper() + s[1:]


def _biology_corpus(n_docs: int, n_questions: int, seed: int = 20240601) -> Tuple[List[Document], List[str]]:
    rng = random.Random(seed)
    docs: List[Document] = []
    facts: List[Tuple[int, dict]] = []  # (document index, the words of one of its sentences)
    for i in range(n_docs):
        topic = {
            "g": rng.choice(_GENES),
            "p": rng.choice(_PROCESSES),
            "m": rng.choice(_MODELS),
            "t": rng.choice(_TISSUES),
            "tr": rng.choice(_TREATMENTS),
        }
        topic["p2"] = rng.choice([p for p in _PROCESSES if p != topic["p"]])
        title = _cap(rng.choice(_TITLES).format(**topic))
        sents = []
        for _ in range(rng.randint(6, 12)):
            w = dict(
                topic,
                g2=rng.choice([g for g in _GENES if g != topic["g"]]),
                meth=rng.choice(_METHODS),
                up=rng.choice(_UP),
                up2=rng.choice(_UP),
                down=rng.choice(_DOWN),
                n=rng.randint(2, 9),
            )
            if rng.random() < 0.4:  # sentences about another process or tissue than the title's
                w["p"], w["t"] = rng.choice(_PROCESSES), rng.choice(_TISSUES)
            s = rng.choice(_SENTENCES).format(**w)
            sents.append(_cap(s))
            facts.append((i, w))
        text = title + "\n" + " ".join(sents)
        docs.append(Document(id_=f"bio-{i:03d}", text=text, metadata={"title": title}))
    dups = {23: 7, 57: 12}  # two documents published twice under another id (one in the tail)
    for dup, of in dups.items():
        if dup < n_docs:
            docs[dup] = Document(id_=f"bio-{dup:03d}", text=docs[of].text, metadata=dict(docs[of].metadata))
    facts = [f for f in facts if f[0] not in dups]
    questions = []
    asks = (
        "Does {g} increase {p} in the {t}?",
        "What causes {p} in {m}?",
        "Which genes regulate {p} in the {t}?",
        "How does {tr} affect {g} expression?",
        "Does loss of {g} reduce {p2}?",
        "What links {g} to {p} and {p2}?",
        "Which method showed that {g} binds {g2}?",
        "What is the effect of {tr} on {p} in {m}?",
    )
    for k in range(n_questions):
        _, w = facts[rng.randrange(len(facts))]
        questions.append(asks[k % len(asks)].format(**w))
    return docs, questions


def holisqa_biology(n_articles: int = 60, n_questions: int = 60) -> Tuple[List[Document], List[str]]:
    """``n_articles`` generated biology abstracts (title, newline, 6-12 sentences; ids
    ``bio-000`` ...; two are verbatim duplicates of earlier ones) and ``n_questions`` questions."""
    return _biology_corpus(n_articles, n_questions)


def quic_rfcs() -> Tuple[List[Document], List[str]]:
    """Excerpts of the six QUIC RFCs (file stem as id, rfc9002 last) and questions about them."""
    docs = [
        Document(id_=stem, text=(QUIC / f"{stem}.md").read_text(encoding="utf-8"), metadata={"file_name": f"{stem}.md"})
        for stem in QUIC_RFCS
    ]
    questions = [q["question"] for q in _jsonl(QUIC / "questions.jsonl")]
    return docs, questions


def result_key(nodes) -> List[Tuple[str, float]]:
    return [(n.node.node_id, float(n.score)) for n in nodes]


def assert_same_results(a, b, questions, tol: float = 1e-9) -> None:
    """Same ids in the same order and scores within ``tol`` for every question."""
    for q in questions:
        ra, rb = result_key(a.retrieve(q)), result_key(b.retrieve(q))
        assert [i for i, _ in ra] == [i for i, _ in rb], q
        for (_, sa), (_, sb) in zip(ra, rb):
            assert abs(sa - sb) <= tol, (q, sa, sb)
