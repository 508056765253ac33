"""Keeping a cleanup faithful to its transcript: the content check and the restoring of dropped words.

:func:`is_faithful` rejects an output that invents a word or loses most of the content.
:func:`restore_dropped` repairs the subtler loss. A cleanup may delete words only where speech
is disfluent: fillers, the reparandum of a self-repair (the words before an editing term such
as ``no``, ``sorry``, ``I mean``, or before a restart of the same phrase), and exact repeats (Shriberg 1994, "Preliminaries to a theory of
speech disfluencies": reparandum, interregnum, repair). :func:`restore_dropped` finds the runs of
input words missing from a model's output (``difflib`` word alignment, case- and
punctuation-blind) and puts back each run that no disfluency explains, so a content word said
once and never taken back survives the cleanup (``set an alarm for uh for six thirty`` must not
lose ``six``).
"""

from __future__ import annotations

import difflib
import re

from llm.rules import QUESTION_STARTS, is_literal, word_key, words_of

SENTENCE_END = re.compile(r"(?<=[.?!])\s+")
#: Inputs with at least this many content words are checked for dropped content.
FALLBACK_MIN_CONTENT_WORDS = 4
#: Fraction of the input's content words the model output must keep.
FALLBACK_MIN_KEPT = 0.5

#: Hesitations: never content, removed from any cleanup output (``ummm``, ``errr`` match too).
HESITATIONS = {"um", "uh", "er", "erm", "hmm", "mm", "ah", "ugh"}
#: Fillers: hesitations and discourse fillers that may stand alone or inside a repair.
FILLER_WORDS = HESITATIONS | {"huh", "so"}
#: Single-word editing terms: the interregnum of a self-repair (``Boston no Chicago``).
EDITING_WORDS = {"doh", "oops", "no", "nope", "sorry", "wait", "actually", "rather", "or", "correction",
                 "instead", "oh", "well", "like"}
#: Multi-word editing phrases (``I mean``, ``let me say``, ``scratch that`` ...), as word tuples.
EDITING_PHRASES = [tuple(p.split()) for p in (
    "i mean", "i meant", "you know", "tell me", "let me say", "let me ask", "i want to know",
    "i should say", "should say", "better yet", "not that but", "change that to", "make that", "scratch that",
    "hold on", "what in tarnation")]
#: Words that carry no content of their own: fillers, function words, pronouns.
NON_CONTENT = {"um", "uh", "er", "erm", "hmm", "mm", "like", "you", "know", "i", "mean", "so", "well",
               "the", "a", "an", "no", "sorry", "wait", "actually", "oh", "uh-huh", "huh", "okay", "ok",
               "or", "rather", "scratch", "that", "make", "it", "is", "to", "of", "and", "in", "for", "at",
               "on", "with", "by", "from", "be", "are", "was", "were", "do", "does", "did", "can", "could",
               "would", "will", "me", "my", "we", "our", "your", "this", "there", "some", "any", "i'm", "i'd"}
_FILLER_SHAPE = re.compile(r"u+h+m*|u+m+|e+r+m*|h+m+|a+h+|m{2,}")


def is_hesitation(key: str) -> bool:
    """Whether a word key is a hesitation (:data:`HESITATIONS`, or shaped like one: ``ummm``, ``errr``)."""
    return key in HESITATIONS or _FILLER_SHAPE.fullmatch(key or "-") is not None


def is_filler(key: str) -> bool:
    """Whether a word key is a filler (:data:`FILLER_WORDS`, or a hesitation's shape)."""
    return key in FILLER_WORDS or is_hesitation(key)


def drop_hesitations(text: str) -> str:
    """``text`` without hesitation words (:data:`HESITATIONS` and their shapes) and without
    U+FFFD characters (a byte-level BPE piece of a multi-byte character, decoded alone).
    ``Um, turn on the light`` -> ``turn on the light``."""
    words = [w for w in text.replace("\ufffd", "").split() if not is_hesitation(word_key(w))]
    return " ".join(words)


def editing_mask(keys: list[str]) -> list[bool]:
    """Per word key: is it part of an editing term or phrase (:data:`EDITING_WORDS`,
    :data:`EDITING_PHRASES`)? Fillers are not editing terms: ``late uh by ten`` repairs nothing."""
    mask = [k in EDITING_WORDS for k in keys]
    for phrase in EDITING_PHRASES:
        n = len(phrase)
        for i in range(len(keys) - n + 1):
            if tuple(keys[i:i + n]) == phrase:
                mask[i:i + n] = [True] * n
    return mask


def restore_dropped(source: str, output: str) -> str:
    """``output`` with every run of ``source`` words it dropped outside a disfluency put back.

    Word alignment of ``source`` and ``output`` by ``difflib.SequenceMatcher`` on
    :func:`llm.rules.word_key` forms. Of each dropped run only its last segment counts (the words after
    the run's last editing term; what comes before an editing term is a reparandum). That
    segment is a licensed deletion when it holds no content word (:data:`NON_CONTENT`), when
    each of its content words is still in ``output`` (a repeat), or when the next ``source``
    word that is not a filler is an editing term, repeats the segment's first word (a
    restart: ``for uh for``), or, like the segment's first word, opens a question (``which is
    what is``). Any other segment is inserted back -- its words as written in ``source``,
    fillers left out, trailing punctuation stripped, a first word that repeats the output word
    before the gap left out -- where the alignment puts it. Numbers and spelled letters
    (:func:`llm.rules.is_literal`) repeat for real (``five five five``), so a repeat or restart
    never explains their loss; only an editing term does.

    Both arguments are plain text; the result is plain text (whitespace normalised).
    """
    src = source.split()
    keys = [word_key(w) for w in src]
    editing = editing_mask(keys)
    out = output.split()
    out_keys = [word_key(w) for w in out]
    kept = set(out_keys)
    inserts: list[tuple[int, int, list[str]]] = []
    matcher = difflib.SequenceMatcher(None, keys, out_keys, autojunk=False)
    for op, i1, i2, j1, _ in matcher.get_opcodes():
        if op not in ("delete", "replace"):
            continue
        start = max([i + 1 for i in range(i1, i2) if editing[i]], default=i1)
        segment = [k for k in keys[start:i2] if not is_filler(k)]
        if not segment:
            continue
        content = [k for k in segment if k not in NON_CONTENT]
        literal = bool(content) and all(is_literal(k) for k in content)  # digits repeat for real
        after = next((i for i in range(i2, len(keys)) if not is_filler(keys[i])), None)
        if after is not None and (editing[after] or (keys[after] == segment[0] and not literal) or (
                segment[0] in QUESTION_STARTS and keys[after] in QUESTION_STARTS)):
            continue  # a reparandum: an editing term or a restart follows
        if content and not literal and all(k in kept for k in content):
            continue  # a repeat: the content words are still there
        if not content and [k for k in keys[i2:] if not is_filler(k)][:len(segment)] == segment:
            continue  # function words said twice
        words = [(w.rstrip(".,?!;:"), k) for w, k in zip(src[start:i2], keys[start:i2]) if not is_filler(k)]
        if j1 > 0 and words[0][1] == out_keys[j1 - 1] and not is_literal(words[0][1]):
            words = words[1:]  # the head of a restart already stands before the gap
        if words:
            inserts.append((i1, j1, [w for w, _ in words]))
    for i, j, words in reversed(inserts):
        if 0 < i and 0 < j and out[j - 1][-1] in ".?!," and src[i - 1][-1] not in ".?!,":
            # the model ended a clause where the speaker did not: the mark moves past the words put back
            words[-1] += out[j - 1][-1]
            out[j - 1] = out[j - 1][:-1]
        out[j:j] = words
    return " ".join(out)


def content_words(text: str) -> list[str]:
    """Words of ``text`` that carry content (not fillers, editing terms or function words)."""
    return [w for w in words_of(text) if w not in NON_CONTENT]


def is_faithful(source: str, output: str) -> bool:
    """Whether a cleanup ``output`` keeps to ``source``: invents no word, keeps most content.

    Fails when ``output`` is empty, contains a word absent from ``source`` (case-insensitive),
    keeps none of the content words of ``source`` (``um hello there`` -> ``There.``), drops
    every content word of a sentence of ``source`` that has two or more (``Go forward 10
    meters. 1, 2, 3.`` -> ``Go forward 10 meters.``), or, when ``source`` has
    :data:`FALLBACK_MIN_CONTENT_WORDS` or more content words, keeps fewer than
    :data:`FALLBACK_MIN_KEPT` of them.
    """
    src_words = set(words_of(source))
    out_words = set(words_of(output))
    if not out_words:
        return False
    if any(w not in src_words for w in out_words):
        return False
    content = content_words(source)
    kept = sum(1 for w in content if w in out_words)
    if content and kept == 0:
        return False
    if len(content) >= FALLBACK_MIN_CONTENT_WORDS and kept < FALLBACK_MIN_KEPT * len(content):
        return False
    for sentence in SENTENCE_END.split(source):
        words = content_words(sentence)
        if len(words) >= 2 and not any(w in out_words for w in words):
            return False
    return True
