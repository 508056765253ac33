"""Rule-based transcript cleanup: the baseline of ``quicksilver eval`` and the safe fallback.

Removes filler words (``um``, ``uh``, ``er``, ``hmm``, ``you know``), collapses words
repeated back to back (``I want I want`` -> ``I want``), capitalises the first letter and ends
the text with a full stop or question mark. It never drops a content word. The repeat
collapse and end punctuation also finish the model's cleanup (:mod:`llm.tasks`).
"""

from __future__ import annotations

import re

from llm.data import number_to_words

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
    text = collapse_repeats(FILLER_PATTERN.sub("", text)).strip(" ,")
    if not text:
        return ""
    return end_punctuation(text[0].upper() + text[1:])


def collapse_repeats(text: str, max_words: int = 4) -> str:
    """Drop the first of two identical adjacent word runs of up to ``max_words`` words
    (``I want I want a table`` -> ``I want a table``, ``the the`` -> ``the``): in speech an exact
    repetition is a disfluency (Shriberg 1994), and the second copy, the repair, is the one kept.

    Words compare case- and punctuation-blind, but a run that ends in punctuation is kept: a
    sentence or clause boundary (``for you, you can``) is not a repetition. Runs made only of
    numbers (``five five five``, ``5 5``) or single letters other than ``a`` and ``I``
    (``B B King``) are kept: digits of a phone number and spelled initials repeat for real.
    Nothing else changes (whitespace is normalised). Longest runs first, repeated to a fixpoint.
    """
    words = text.split()
    keys = [word_key(w) for w in words]
    i = 0
    while i < len(words):
        for n in range(min(max_words, (len(words) - i) // 2), 0, -1):
            first, second = keys[i:i + n], keys[i + n:i + 2 * n]
            if first == second and all(first) and words[i + n - 1][-1] not in ".?!,;:" \
                    and not all(is_literal(k) for k in first):
                del words[i:i + n], keys[i:i + n]
                i = max(0, i - max_words)  # the shorter text may repeat again just before
                break
        else:
            i += 1
    return " ".join(words)


#: Number words as ASR writes them (``zero`` ... ``ninety nine``, plus ``oh``, ``hundred``, ...).
NUMBER_WORDS = {w for n in range(100) for w in number_to_words(n).split()} | {
    "oh", "hundred", "thousand", "double", "triple"}


def is_literal(key: str) -> bool:
    """A number or a spelled letter: a word whose repetition is content, not a disfluency."""
    return key.isdigit() or key in NUMBER_WORDS or (len(key) == 1 and key not in ("a", "i"))


def tidy_punctuation(text: str) -> str:
    """Runs of sentence-end marks made one (``What city??`` -> ``What city?``, ``in...`` ->
    ``in.``; the first mark of a run is kept) and no space before ``.,?!;:``."""
    text = re.sub(r"([.?!])[.?!]+", r"\1", text)
    return re.sub(r"\s+([.,?!;:])", r"\1", text)


def end_punctuation(text: str) -> str:
    """``text`` ending in ``.``, ``?`` or ``!``: a question mark when its first word opens a
    question (:data:`QUESTION_STARTS`), else a full stop. A trailing ``,``/``;``/``:`` is replaced."""
    text = text.rstrip(" ,;:")
    if not text or text[-1] in ".?!":
        return text
    first = re.sub(r"\W", "", text.split()[0].lower())
    return text + ("?" if first in QUESTION_STARTS else ".")


def word_key(word: str) -> str:
    """``word`` lowercased without punctuation (apostrophes kept): the form words compare in."""
    return re.sub(r"[^\w']", "", word.lower())


def words_of(text: str) -> list[str]:
    """Lowercased words of ``text`` without punctuation (apostrophes kept)."""
    return re.findall(r"[\w']+", text.lower())
