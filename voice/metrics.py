"""Word error rate with the normalisation ASR evaluations use (case, punctuation, number words).

Whisper writes "10 meters" and "1, 2, 3"; references say "ten meters" and "one two three". Both
sides are lower-cased, stripped of punctuation, and number words up to ninety-nine are written as
digits before jiwer computes WER = (substitutions + deletions + insertions) / reference words.
"""

from __future__ import annotations

import re

import jiwer

_UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_NUMBER = {w: str(i) for i, w in enumerate(_UNITS)} | {w: str(v) for w, v in _TENS.items()}


def normalize_transcript(text: str) -> str:
    """Lower case, no punctuation (apostrophes kept), number words → digits, single spaces."""
    text = re.sub(r"(\d),(\d)", r"\1\2", text.lower())
    text = re.sub(r"[^\w\s']|_", " ", text.replace("-", " "))
    words = [_NUMBER.get(w, w) for w in text.split()]
    out: list[str] = []
    for w in words:  # "twenty one" → "21"
        if out and out[-1].isdigit() and int(out[-1]) in _TENS.values() and w.isdigit() and int(w) < 10:
            out[-1] = str(int(out[-1]) + int(w))
        else:
            out.append(w)
    return " ".join(out)


def word_error_rate(reference: str, hypothesis: str) -> float:
    """WER of ``hypothesis`` against ``reference`` after :func:`normalize_transcript`.

    Raises:
        ValueError: the reference is empty after normalisation.
    """
    ref, hyp = normalize_transcript(reference), normalize_transcript(hypothesis)
    if not ref:
        raise ValueError("empty reference transcript")
    return float(jiwer.wer(ref, hyp or "<empty>"))
