"""Rule-based transcript cleanup: the baseline of ``quicksilver eval`` and the safe fallback.

Removes filler words (``um``, ``uh``, ``er``, ``hmm``, ``you know``), collapses a word
repeated back to back (``I I want`` -> ``I want``), capitalises the first letter and ends
the text with a full stop or question mark. It never drops a content word.
"""

from __future__ import annotations

import re

FILLER_PATTERN = re.compile(
    r"(?<![\w'])(?:um+|uh+|er+|erm|hmm+|mm+|uh huh|you know)(?![\w'])[,.]?\s*", re.IGNORECASE
)
QUESTION_STARTS = {"what", "who", "whom", "whose", "when", "where", "which", "why", "how", "is", "are",
                   "was", "were", "do", "does", "did", "can", "could", "would", "will", "should", "shall",
                   "may", "have", "has"}


def rule_cleanup(text: str) -> str:
    """Filler removal, repeat collapse, capitalisation and end punctuation of ``text``.

    Returns ``""`` for text that holds nothing but fillers.
    """
    text = FILLER_PATTERN.sub("", text)
    words = text.split()
    out: list[str] = []
    for w in words:
        if out and w.lower().strip(",") == out[-1].lower().strip(","):
            continue
        out.append(w)
    text = " ".join(out).strip(" ,")
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    if text[-1] not in ".?!":
        first = re.sub(r"\W", "", text.split()[0].lower())
        text += "?" if first in QUESTION_STARTS else "."
    return text


def words_of(text: str) -> list[str]:
    """Lowercased words of ``text`` without punctuation (apostrophes kept)."""
    return re.findall(r"[\w']+", text.lower())
