"""Training and evaluation data for the Quicksilver checkpoint.

Sources (copied into ``data/`` with their licences):

- Disfl-QA (Gupta et al. 2021, CC BY 4.0): disfluent -> fluent questions.
- Schema-Guided Dialogue (Rastogi et al. 2020, CC BY-SA 4.0): user and system turns
  of a virtual assistant in 20 everyday domains.

Cleanup pairs: Disfl-QA train; SGD user turns with synthetic disfluencies injected
(fillers, repetitions, repairs, restarts; the clean turn is the target); clean turns
unchanged (so the model learns to leave fluent text alone); and ASR-style variants of
every input (lowercase, no punctuation, numbers spoken as words, as faster-whisper
writes them). Reply pairs: SGD (previous system turn, user turn) -> system turn.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

#: Folder holding the copied data sets (repository root ``data/``).
DATA_DIR = Path(__file__).resolve().parent.parent / "data"

FILLERS = ("um", "uh", "uh", "um", "er", "hmm", "you know", "I mean", "like", "well", "so", "uh huh")
EDIT_TERMS = ("", "", "uh", "um", "I mean", "sorry", "no", "wait", "actually", "no wait", "or rather",
              "sorry I mean", "scratch that", "no no")
_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen " \
        "sixteen seventeen eighteen nineteen".split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


@dataclass(frozen=True)
class CleanupPair:
    """A transcript and its fluent, punctuated form; ``source`` names the data set."""

    disfluent: str
    fluent: str
    source: str = ""


@dataclass(frozen=True)
class ReplyPair:
    """The previous system turn, the user turn, and the system's reply."""

    system: str
    user: str
    reply: str


def load_disfl_qa(split: str, data_dir: Path = DATA_DIR) -> list[CleanupPair]:
    """Disfl-QA ``split`` (``train`` or ``dev``) in file order, ``#VALUE!`` rows removed."""
    rows = json.loads((data_dir / "disfl-qa" / f"{split}.json").read_text())
    return [
        CleanupPair(r["disfluent"].strip(), r["original"].strip(), "disfl-qa")
        for r in rows.values()
        if "#VALUE!" not in r["disfluent"] and "#VALUE!" not in r["original"]
        and r["disfluent"].strip() and r["original"].strip()
    ]


def load_sgd(split: str, data_dir: Path = DATA_DIR) -> list[list[tuple[str, str]]]:
    """SGD dialogues of ``split``: each a list of ``(speaker, utterance)``."""
    with gzip.open(data_dir / "sgd" / f"{split}.jsonl.gz", "rt") as f:
        return [[(t["speaker"], t["utterance"].strip()) for t in json.loads(line)["turns"]] for line in f]


def reply_pairs(dialogues: list[list[tuple[str, str]]]) -> list[ReplyPair]:
    """(previous system turn, user turn) -> system reply, for every system turn after a user turn."""
    pairs = []
    for turns in dialogues:
        previous_system = ""
        for (s1, u1), (s2, u2) in zip(turns, turns[1:]):
            if s1 == "USER" and s2 == "SYSTEM":
                pairs.append(ReplyPair(previous_system, u1, u2))
            if s1 == "SYSTEM":
                previous_system = u1
    return pairs


def number_to_words(n: int) -> str:
    """English words for ``0 <= n < 100`` (``42`` -> ``forty two``), as ASR often writes them."""
    if n < 20:
        return _ONES[n]
    tens, ones = divmod(n, 10)
    return _TENS[tens] + ("" if ones == 0 else " " + _ONES[ones])


def asr_style(text: str, rng: random.Random) -> str:
    """An ASR-style rendering of ``text``: lowercase, no punctuation, small numbers as words (half the time)."""
    if rng.random() < 0.5:
        text = re.sub(r"\b\d{1,2}\b", lambda m: number_to_words(int(m.group())), text)
    text = re.sub(r"[^\w\s'$:-]", " ", text.lower())
    return " ".join(text.split())


def disfluent_version(clean: str, rng: random.Random, pool: list[str]) -> str:
    """Inject one to three disfluencies into a fluent ``clean`` turn.

    Kinds: filler (``um``, ``you know``), repetition (``I I want``), repair
    (reparandum with one word swapped, an optional editing term, then the repair),
    restart (the start of another turn abandoned). ``pool`` supplies swapped words
    and abandoned starts.
    """
    words = clean.split()
    if not words:
        return clean
    for _ in range(rng.choice((1, 1, 2, 2, 3))):
        kind = rng.random()
        i = rng.randrange(len(words))
        if kind < 0.35:
            filler = rng.choice(FILLERS)
            if rng.random() < 0.4:
                filler += ","
            words[i:i] = filler.split()
        elif kind < 0.55:
            k = rng.choice((1, 1, 2))
            words[i:i] = words[i:i + k]
        elif kind < 0.88:
            k = rng.choice((1, 2, 3))
            reparandum = list(words[i:i + k])
            other = rng.choice(pool).split()
            if reparandum and other:
                reparandum[-1] = rng.choice(other)
            if rng.random() < 0.3:
                reparandum = reparandum[:-1] or reparandum  # cut off: a false start
            term = rng.choice(EDIT_TERMS).split()
            words[i:i] = reparandum + term
        else:
            other = rng.choice(pool).split()
            start = other[: rng.randint(1, 3)]
            term = rng.choice(EDIT_TERMS).split()
            words[0:0] = start + term
    return " ".join(words)


def cleanup_training_pairs(seed: int = 0, sgd_turns: int = 60000) -> list[CleanupPair]:
    """All cleanup training pairs, deterministic for ``seed``.

    Disfl-QA train (as written and ASR-style), ``sgd_turns`` SGD user turns (about
    80 % with injected disfluencies, 20 % clean), each ASR-style 40 % of the time.
    """
    rng = random.Random(seed)
    pairs = []
    for p in load_disfl_qa("train"):
        pairs.append(p)
        pairs.append(CleanupPair(asr_style(p.disfluent, rng), p.fluent, p.source))
    user_turns = [u for d in load_sgd("train") for s, u in d if s == "USER" and 0 < len(u.split()) <= 40]
    rng.shuffle(user_turns)
    pool = user_turns[:5000]
    for clean in user_turns[:sgd_turns]:
        noisy = disfluent_version(clean, rng, pool) if rng.random() < 0.8 else clean
        if rng.random() < 0.4:
            noisy = asr_style(noisy, rng)
        pairs.append(CleanupPair(noisy, clean, "sgd"))
    rng.shuffle(pairs)
    return pairs
