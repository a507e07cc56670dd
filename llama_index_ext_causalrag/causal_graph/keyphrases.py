"""Pure text helpers: sentences, tokens, name normalisation, keyphrase candidates, causal cues.

No downloads: a regex tokenizer and a stopword list stand in for spaCy/NLTK models.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Sequence, Set, Tuple

from llama_index_ext_causalrag.text.sentences import KEYPHRASE_STOPWORDS

_HYPHENS = re.compile("[\u2010\u2011\u2212]")
_DASHES = re.compile("[\u2012-\u2015]")
_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_TOKEN = re.compile(r"[^\W\d_][\w]*(?:[-'][\w]+)*|\d+(?:\.\d+)?|[^\w\s]", re.UNICODE)

CAUSAL_CUES = re.compile(
    r"\b(caus\w*|lead(?:s|ing)? to|led to|result(?:s|ed|ing)? in|due to|because|"
    r"induc\w*|inhibit\w*|suppress\w*|promot\w*|trigger\w*|driv(?:e|es|en|ing)|"
    r"increas\w*|decreas\w*|reduc\w*|enhanc\w*|affect\w*|regulat\w*|activat\w*|"
    r"block\w*|prevent\w*|contribut\w* to|responsible for|consequen\w*|therefore|thus|"
    r"effect(?:s)? (?:of|on)|impact\w*|depend\w* on|mediat\w*|elevat\w*|impair\w*)\b",
    re.IGNORECASE,
)

STOPWORDS: Set[str] = set(KEYPHRASE_STOPWORDS)

_PLURAL_KEEP = {
    "species",
    "series",
    "analysis",
    "basis",
    "thesis",
    "virus",
    "bias",
    "status",
    "genus",
    "corpus",
    "diabetes",
    "physics",
    "genetics",
    "mathematics",
    "news",
    "biomass",
    "stress",
    "class",
    "mass",
    "glass",
    "grass",
    "process",
    "access",
}


def normalize_text(text: str) -> str:
    return _DASHES.sub(" - ", _HYPHENS.sub("-", text))


def split_sentences(text: str) -> List[str]:
    """Sentences by a punctuation + capital-letter rule (no model download).

    Kept instead of ``text.sentences.split_sentence_spans`` (Punkt), which splits differently
    on the test corpora, so the extracted graph would change: on 23 of the 60 generated
    HolisQA-like abstracts (``tests/_update_helpers.holisqa_biology``) Punkt also ends a sentence
    before a lower-case gene name ("... seedlings. p53 lowers ..."), and on all 6 QUIC RFC
    excerpts it splits the prose and front matter differently (rfc9000: 109 sentences here,
    592 with Punkt)."""
    text = normalize_text(text).strip()
    if not text:
        return []
    return [s.strip() for s in _SENT_SPLIT.split(text) if s.strip()]


def tokenize(text: str) -> List[str]:
    return _TOKEN.findall(normalize_text(text))


def _singular(tok: str) -> str:
    if len(tok) <= 3 or tok in _PLURAL_KEEP or not tok.isalpha():
        return tok
    if tok.endswith("ies") and len(tok) > 4:
        return tok[:-3] + "y"
    if tok.endswith(("ss", "us", "is", "ics")):
        return tok
    if tok.endswith("s"):
        return tok[:-1]
    return tok


def _is_word(tok: str) -> bool:
    return tok[:1].isalnum()


def normalize_name(name: str) -> str:
    """Canonical key of a name: lowercase, punctuation dropped, hyphens as spaces, singular."""
    toks: List[str] = []
    for t in tokenize(normalize_text(name).replace("-", " ")):
        if _is_word(t):
            toks.append(_singular(t.lower()))
    return " ".join(toks)


def segments(sentence: str) -> List[List[str]]:
    """Normalised word tokens of a sentence, split at punctuation (n-grams never cross it)."""
    out: List[List[str]] = [[]]
    for t in tokenize(normalize_text(sentence).replace("-", " ")):
        if _is_word(t):
            out[-1].append(_singular(t.lower()))
        elif out[-1]:
            out.append([])
    return [s for s in out if s]


def find_mentions(sentence: str, keys: Dict[str, str], max_words: int) -> Set[str]:
    """Ids of the entities whose normalised key occurs as an n-gram of ``sentence``."""
    found: Set[str] = set()
    for seg in segments(sentence):
        n = len(seg)
        for i in range(n):
            for j in range(i + 1, min(n, i + max_words) + 1):
                eid = keys.get(" ".join(seg[i:j]))
                if eid is not None:
                    found.add(eid)
    return found


def keyphrase_candidates(sentence: str, max_words: int = 4, min_chars: int = 3) -> List[Tuple[str, str]]:
    """``(surface, type)`` keyphrase candidates of one sentence, RAKE-style.

    A candidate is a maximal run of non-stopword word tokens (a number or punctuation ends
    the run), cut to its last ``max_words`` tokens (English noun phrases end in their head).
    Type is ``acronym`` for upper-case tokens like ``DNA``, else ``concept``.
    """
    runs: List[List[str]] = [[]]
    for t in tokenize(sentence):
        low = t.lower()
        if (
            t[:1].isalpha()
            and low not in STOPWORDS
            and not low.endswith("ly")
            and not (low.endswith("ed") and len(low) > 4)
        ):
            runs[-1].append(t)
        elif runs[-1]:
            runs.append([])
    out: List[Tuple[str, str]] = []
    for run in runs:
        if not run:
            continue
        run = run[-max_words:]
        surface = " ".join(run)
        if len(run) == 1:
            tok = run[0]
            is_acr = tok.isupper() and len(tok) >= 2
            if not is_acr and (len(tok) < min_chars + 1 or tok.lower().endswith("ed")):
                continue
            out.append((surface, "acronym" if is_acr else "concept"))
        elif len(surface) >= min_chars:
            out.append((surface, "concept"))
    return out


def has_causal_cue(sentence: str) -> bool:
    return CAUSAL_CUES.search(sentence) is not None


def dedupe(items: Iterable[str]) -> List[str]:
    seen: Set[str] = set()
    out = []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def short(text: str, n: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3].rstrip() + "..."


__all__: Sequence[str] = [
    "CAUSAL_CUES",
    "STOPWORDS",
    "split_sentences",
    "tokenize",
    "normalize_name",
    "segments",
    "find_mentions",
    "keyphrase_candidates",
    "has_causal_cue",
    "dedupe",
    "short",
]


def _verb_forms(stems: str) -> Set[str]:
    out: Set[str] = set()
    for v in stems.split():
        base = v[:-1] if v.endswith("e") else v
        out.update({v, v + "s", base + "ed", base + "ing", v + "es"})
    out.update({"led", "leading", "driven", "drove"})
    return out


# Verbs of the causal cues delimit keyphrases like stopwords ("drought | reduces | growth").
STOPWORDS |= _verb_forms(
    "cause lead result induce inhibit suppress promote trigger drive increase decrease reduce "
    "enhance affect regulate activate prevent contribute elevate impair mediate alter modulate "
    "improve stimulate attenuate exacerbate facilitate limit enable determine influence produce "
    "generate create threaten damage protect depend require remain exhibit tend assess explore "
    "examine reveal contain involve occur appear become provide obtain observe compare"
)
