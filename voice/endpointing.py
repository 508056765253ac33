"""Semantic endpointing: does the transcript decoded at a pause read as a finished turn?

The VAD alone cannot tell a speaker who has finished from one who pauses to think; a fixed
hangover long enough for the pauses inside utterances (``VadConfig.min_silence_ms``) is paid by
every turn. Production voice agents shorten it when the words say the turn is over (LiveKit's
turn detector, Pipecat's smart-turn, AssemblyAI's end-of-turn confidence). Here the signal is the
final decode the pipeline already starts at a pause (``SpeechPause``): a transcript that ends a
sentence and does not stop on a word that needs a continuation allows the endpoint after the
shorter ``VadConfig.complete_silence_ms``; anything else waits for the full hangover.

Rules (measured on ``samples/``, see ``VadConfig.complete_silence_ms``): at least
:data:`MIN_WORDS` words (single words — "One.", "Ask!", "So." — are the commonest false endings:
counting, lists, a speaker starting a sentence), a final ``.``/``?``/``!`` (Whisper writes ``,``
or ``...`` or nothing when the speech trails on), and a last word not in :data:`CONTINUATIONS`.
"""

from __future__ import annotations

import re

MIN_WORDS = 2
"""Fewer words than this never end a turn early."""

CONTINUATIONS = frozenset(
    "a an the and or but so because if when while that which who whose where than then to of for "
    "with without in on at by from into about as like my your his her its our their this these those "
    "is are was were be been am i i'm we you he she they it's um uh er erm hmm mm".split()
)
"""Words after which a speaker is not done (articles, conjunctions, prepositions, fillers)."""

_WORD = re.compile(r"[\w']+")


def reads_as_complete(transcript: str) -> bool:
    """True when ``transcript`` reads as a finished turn (see the module docstring)."""
    text = transcript.strip()
    words = _WORD.findall(text.lower())
    if len(words) < MIN_WORDS or text.endswith("...") or not text.endswith((".", "?", "!")):
        return False
    return words[-1] not in CONTINUATIONS
