"""Text helpers shared by every method: sentence splitting, word tokenisation, stopwords.

Nothing is downloaded: sentences come from NLTK's Punkt model with the ``punkt_tab`` data that
ships inside ``llama_index.core``; tokens and stopwords are regular expressions and word lists.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Any, FrozenSet, List, Tuple

# ---- stopwords --------------------------------------------------------------------------
# English function words; each method adds the words that carry no signal for it.
ENGLISH_STOPWORDS: FrozenSet[str] = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before
    being below best between both but by can could did do does doing down during each eg few for
    from further given had has have having he her here hers herself him himself his how i ie if
    in into is it its itself just known least likely may me might more most must my myself no
    nor not now of off on once only or other our ours ourselves out over own same shall she
    should so some such than that the their theirs them themselves then there these they this
    those through to too under until up very was we were what when where which while who whom
    why will with would you your yours yourself yourselves
    """.split()
)
# Entity and keyphrase extraction from paper abstracts: also research-writing boilerplate.
KEYPHRASE_STOPWORDS: FrozenSet[str] = ENGLISH_STOPWORDS | frozenset(
    """
    able abstract according across activate activated activatees activates activating
    additionally affect affected affectes affecting affects aim aims allow allowed allows almost
    along already alter altered alteres altering alters although always among analyse analysed
    analyses analyze analyzed analyzing another appear appeared appeares appearing appears
    approach approaches around article assess assessed assesses assessing assesss associated
    association associations attenuate attenuated attenuatees attenuates attenuating author
    authors available background based became become becomed becomees becomes becoming better
    case cases cause caused causees causes causing change changed changes compare compared
    comparees compares comparing comparison conclusion conclusions consider considered
    considering contain contained containes containing contains contrast contribute contributed
    contributees contributes contributing copyright create created createes creates creating
    current currently damage damaged damagees damages damaging data decrease decreased
    decreasees decreases decreasing demonstrate demonstrated demonstrates depend depended
    dependes depending depends describe described despite determine determined determinees
    determines determining difference differences different done drive drived drivees driven
    drives driving drove due effect effectiveness effects either elevate elevated elevatees
    elevates elevating else enable enabled enablees enables enabling enhance enhanced enhancees
    enhances enhancing enough especially et etc evaluate evaluated even ever every evidence
    exacerbate exacerbated exacerbatees exacerbates exacerbating examine examined examinees
    examines examining example exhibit exhibited exhibites exhibiting exhibits explore explored
    explorees explores exploring facilitate facilitated facilitatees facilitates facilitating
    factor factors fig figure finally find finding findings first found furthermore generate
    generated generatees generates generating good great group groups high higher highest
    highlight highlights however identified identify impact impacts impair impaired impaires
    impairing impairs importance important improve improved improvees improves improving include
    included includes including increase increased increasees increases increasing indicate
    indicated indicates induce induced inducees induces inducing influence influenced
    influencees influences influencing inhibit inhibited inhibites inhibiting inhibits
    investigate investigated involve involved involvees involves involving key kind kinds lack
    large larger largest last lead leaded leades leading leads led less level levels like limit
    limited limites limiting limits low lower lowest made main major make makes making many
    mechanism mechanisms mediate mediated mediatees mediates mediating method methods modulate
    modulated modulatees modulates modulating moreover much near nearly neither new novel number
    numbers objective objectives observe observed observees observes observing obtain obtained
    obtaines obtaining obtains occur occured occures occuring occurs often one onto others
    overall paper part particular particularly parts per perhaps possible potential potentially
    present presented prevent prevented preventes preventing prevents previous previously
    process processes produce produced producees produces producing promote promoted promotees
    promotes promoting propose proposed protect protected protectes protecting protects provide
    provided providees provides providing purpose range ranges rather recent recently reduce
    reduced reducees reduces reducing regulate regulated regulatees regulates regulating related
    relationship relationships relative relatively remain remained remaines remaining remains
    reported require required requirees requires requiring reserved respectively result resulted
    resultes resulting results reveal revealed reveales revealing reveals review reviews rights
    role roles second set sets several show showed shown shows significant significantly similar
    since small smaller specific still stimulate stimulated stimulatees stimulates stimulating
    studied studies study suggest suggested suggests support suppress suppressed suppresses
    suppressing suppresss table take taken takes tend tended tendes tending tends term terms
    thereby therefore therein though threaten threatened threatenes threatening threatens three
    thus time times total toward towards trigger triggered triggeres triggering triggers two
    type types understanding upon us use used uses using various via vs way ways well whatever
    whereas whether whole whose within without work works year years yet
    """.split()
)
# Query terms of exam-style questions: also question boilerplate ("which statement is correct").
QUESTION_STOPWORDS: FrozenSet[str] = ENGLISH_STOPWORDS | frozenset(
    """
    answer called common commonly correct e except false following g incorrect option options
    regarding seen statement statements true usually
    """.split()
)

# ---- words ------------------------------------------------------------------------------
WORD = re.compile(r"(?u)\b[\w][\w\-']*\b")  # words with inner hyphens and apostrophes


def words(text: str) -> List[str]:
    """Lower-cased words of ``text`` (``WORD``), in order."""
    return WORD.findall(text.lower())


# ---- sentences --------------------------------------------------------------------------
EXTRA_ABBREVIATIONS = (
    "al",
    "fig",
    "figs",
    "e.g",
    "i.e",
    "eq",
    "eqs",
    "sec",
    "sect",
    "ref",
    "refs",
    "vs",
    "approx",
    "ca",
    "cf",
    "no",
    "nos",
    "vol",
    "tab",
    "resp",
    "spp",
    "sp",
    "subsp",
    "var",
    "nov",
    "ed",
    "eds",
    "pp",
    "ch",
    "dr",
    "mr",
    "mrs",
    "ms",
    "prof",
    "inc",
    "ltd",
    "jr",
    "sr",
    "st",
    "est",
    "min",
    "max",
    "dept",
    "univ",
    "corp",
    "co",
    "govt",
    "approx",
    "appx",
    "suppl",
)

_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")


@lru_cache(maxsize=1)
def _punkt() -> Any:
    try:
        import llama_index.core
        import nltk
        from nltk.tokenize.punkt import PunktTokenizer
    except ImportError as e:  # pragma: no cover - nltk is a llama-index-core dependency
        raise ImportError("sentence splitting needs nltk: run `pip install nltk`.") from e
    cache = os.path.join(os.path.dirname(llama_index.core.__file__), "_static", "nltk_cache")
    # The one process-wide change, on first use (not at import): the folder is appended to
    # nltk.data.path, as llama_index.core's own SentenceSplitter does with the same folder. NLTK
    # 3.10 refuses to read model files outside nltk.data.path (load_punkt_params on a pointer
    # into this folder raised "PermissionError: Security Violation [pathsec.open]" here).
    if cache not in nltk.data.path:
        nltk.data.path.append(cache)
    try:
        tok = PunktTokenizer("english")
    except LookupError as e:  # pragma: no cover - data ships with llama-index-core
        raise LookupError(
            f"NLTK punkt_tab data not found (looked in {cache}); reinstall llama-index-core, "
            "or pass sentence_splitter= to MultiGranularityNodeParser."
        ) from e
    tok._params.abbrev_types.update(EXTRA_ABBREVIATIONS)
    return tok


def split_sentence_spans(text: str) -> List[Tuple[int, int]]:
    """Character spans ``[(start, end), ...]`` of the sentences of ``text``, whitespace trimmed.

    Blank lines always end a sentence; inside a paragraph Punkt decides, so "et al.",
    "Fig. 2", "e.g." and "3.5 mg" do not end sentences.
    """
    tok = _punkt()
    spans: List[Tuple[int, int]] = []
    pos = 0
    for para in _BLANK_LINE.split(text):
        start = text.find(para, pos)
        pos = start + len(para)
        if not para.strip():
            continue
        for s, e in tok.span_tokenize(para):
            piece = para[s:e]
            lead = len(piece) - len(piece.lstrip())
            trail = len(piece) - len(piece.rstrip())
            if e - trail > s + lead:
                spans.append((start + s + lead, start + e - trail))
    return spans


@lru_cache(maxsize=8192)
def sentence_spans(text: str) -> Tuple[Tuple[int, int], ...]:
    """:func:`split_sentence_spans` as a tuple, cached per text (retrieval splits the same parent
    and unit texts query after query)."""
    return tuple(split_sentence_spans(text))
