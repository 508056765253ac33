"""Voice activity detection with endpointing: Silero VAD (v6, ONNX) run as a stream.

The model is the one faster-whisper ships (``faster_whisper/assets/silero_vad_v6.onnx``, from
snakers4/silero-vad, MIT). faster-whisper's own wrapper resets the recurrent state on every call,
so :class:`SileroVAD` keeps the LSTM state ``(h, c)`` and the 64-sample context between windows,
which makes it usable on a live stream. It takes 512-sample windows at 16 kHz (32 ms) and returns
the speech probability of each.

:class:`EndpointDetector` turns probabilities into speech-start / speech-end events with
hysteresis, like silero-vad's ``VADIterator``: speech starts when a window's probability reaches
``threshold``; it ends once the probability has stayed below ``threshold - 0.15`` for
``min_silence_ms`` (the endpoint hangover); after ``pause_ms`` of that silence it announces a
tentative :class:`SpeechPause` so the ASR (and, live, the reply) can start early. When the
transcript decoded at that pause reads as a finished turn, the caller may call
:meth:`EndpointDetector.end_early`: the endpoint then comes after ``complete_silence_ms`` instead
(semantic endpointing, ``voice.endpointing``). Defaults: see :class:`VadConfig`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from audio.frames import PIPELINE_RATE_HZ, AudioFrame

WINDOW_SAMPLES = 512
"""Silero VAD window at 16 kHz (32 ms)."""
CONTEXT_SAMPLES = 64
"""Samples of the previous window prepended to each window (Silero v5/v6 input layout)."""
WINDOW_S = WINDOW_SAMPLES / PIPELINE_RATE_HZ
STATE_RESET_S = 5.0
"""Outside speech, the model state is reset after this much audio. Silero's LSTM state drifts on
long non-speech: after 9.5 min of kitchen noise the onset of "go forward ten meters" scored
0.03…0.16 for 250 ms (0.68 from a fresh state) and the VAD cut off "go"."""


class SileroVAD:
    """Streaming Silero VAD: one speech probability per 512-sample window, state kept across calls."""

    def __init__(self) -> None:
        from faster_whisper.vad import get_vad_model

        self._session = get_vad_model().session  # one ONNX session per process, 1 thread
        self.reset()

    def reset(self) -> None:
        """Forget the stream (new session)."""
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros((1, CONTEXT_SAMPLES), dtype=np.float32)

    def __call__(self, window: np.ndarray) -> float:
        """Speech probability in [0, 1] of one window: float32 in [-1, 1], shape ``(512,)``."""
        if window.shape != (WINDOW_SAMPLES,):
            raise ValueError(f"Silero VAD takes windows of {WINDOW_SAMPLES} samples, got {window.shape}")
        x = np.concatenate([self._context, window[None, :].astype(np.float32)], axis=1)
        prob, self._h, self._c = self._session.run(None, {"input": x, "h": self._h, "c": self._c})
        self._context = x[:, -CONTEXT_SAMPLES:]
        return float(prob.reshape(-1)[0])


@dataclass(frozen=True)
class VadConfig:
    """Endpointing settings.

    Attributes:
        threshold: speech probability that starts speech (Silero's default, 0.5).
        min_silence_ms: endpoint hangover: silence that ends an utterance. Measured on the clean
            samples (tiny.en, concatenated finals; ``bench/v2v.py --sweep-hangover``): at 300 and
            500 ms "one two three" (pauses of 0.64–0.70 s between the words) is cut into single
            words, one of which is rejected as unclear (WER 33 %); from 700 ms it stays one
            utterance (WER 0 %). jfk.wav's 1.1 s rhetorical pauses split it at any value below
            1.2 s (WER 9 % either way). 700 ms is the shortest hangover without the split; every
            millisecond of it is part of voice-to-voice latency.
        complete_silence_ms: the shorter hangover of a pause whose transcript reads as a finished
            turn (:meth:`EndpointDetector.end_early`; ``None`` = never early). Measured on the
            clean samples played live (``bench/v2v.py``): see the README figures table.
        pause_ms: silence after which a tentative :class:`SpeechPause` is announced (the
            speculative final decode starts there); at most ``speech_pad_ms``.
        speech_pad_ms: audio kept before the start and after the end of speech for the ASR.
        min_speech_ms: voiced runs shorter than this are dropped as clicks/noise.
        max_speech_s: an utterance is cut at this length (Whisper's 30 s window).
    """

    threshold: float = 0.5
    min_silence_ms: int = 700
    complete_silence_ms: int | None = 400
    pause_ms: int = 128
    speech_pad_ms: int = 200
    min_speech_ms: int = 250
    max_speech_s: float = 28.0

    @property
    def neg_threshold(self) -> float:
        return max(self.threshold - 0.15, 0.01)


@dataclass(frozen=True)
class SpeechStart:
    """Speech began at ``start_s`` (stream seconds, padding included); detected at ``detected_s``."""

    start_s: float
    detected_s: float


@dataclass(frozen=True)
class SpeechPause:
    """Silence of ``pause_ms`` inside speech: maybe the end, maybe a pause (tentative).

    The ASR may decode the utterance now (the audio up to ``detected_s``; ``end_s`` names the cut
    the endpoint will make), so its final is ready when the endpoint (:class:`SpeechEnd` with the
    same ``end_s``) confirms it; if speech resumes, it is discarded.
    """

    start_s: float
    speech_end_s: float
    end_s: float
    detected_s: float


@dataclass(frozen=True)
class SpeechEnd:
    """Speech ended.

    Attributes:
        start_s: stream time of the utterance start (padding included).
        speech_end_s: true end of speech: the end of the last voiced window.
        end_s: end of the utterance audio for the ASR (``speech_end_s`` + padding).
        detected_s: stream time when the endpoint was detected (``speech_end_s`` + hangover).
        forced: true when cut by ``max_speech_s`` or the end of the stream.
    """

    start_s: float
    speech_end_s: float
    end_s: float
    detected_s: float
    forced: bool = False

    @property
    def hangover_s(self) -> float:
        return self.detected_s - self.speech_end_s


VadEvent = SpeechStart | SpeechPause | SpeechEnd


class EndpointDetector:
    """Frames in, :class:`SpeechStart` / :class:`SpeechEnd` events out (16 kHz mono frames).

    Pure computation, no I/O: call :meth:`process` for every frame in stream order and
    :meth:`flush` at the end of the stream.
    """

    def __init__(self, config: VadConfig = VadConfig(), vad: SileroVAD | None = None) -> None:
        self.config = config
        self.vad = vad or SileroVAD()
        self._pending = np.zeros(0, dtype=np.float32)
        self._pending_start_s = 0.0
        self.in_speech = False
        self._candidate_start_s: float | None = None  # first voiced window of a run not yet confirmed
        self._speech_start_s = 0.0
        self._last_voiced_end_s = 0.0
        self.last_probability = 0.0
        self._paused = False
        self._non_speech_s = 0.0
        self._early_end_s: float | None = None

    def end_early(self, speech_end_s: float) -> None:
        """The transcript up to ``speech_end_s`` (a :class:`SpeechPause`'s) reads as a finished
        turn: if the silence after it reaches ``complete_silence_ms``, end the utterance then.
        Ignored once speech has resumed after ``speech_end_s``."""
        if self.config.complete_silence_ms is not None and self.in_speech and speech_end_s == self._last_voiced_end_s:
            self._early_end_s = speech_end_s

    @property
    def trailing_silence_s(self) -> float:
        """Silence since the last voiced window of the current utterance (0 outside speech)."""
        return max(0.0, self._pending_start_s - self._last_voiced_end_s) if self.in_speech else 0.0

    def process(self, frame: AudioFrame) -> list[VadEvent]:
        """Feed one frame; return the events it completes."""
        if frame.sample_rate_hz != PIPELINE_RATE_HZ:
            raise ValueError(f"EndpointDetector takes {PIPELINE_RATE_HZ} Hz frames, got {frame.sample_rate_hz}")
        if not len(self._pending):
            self._pending_start_s = frame.timestamp_s
        self._pending = np.concatenate([self._pending, frame.to_float32()])
        events: list[VadEvent] = []
        while len(self._pending) >= WINDOW_SAMPLES:
            window, self._pending = self._pending[:WINDOW_SAMPLES], self._pending[WINDOW_SAMPLES:]
            start_s = self._pending_start_s
            self._pending_start_s += WINDOW_S
            events.extend(self._step(self.vad(window), start_s))
        return events

    def flush(self) -> list[VadEvent]:
        """End of stream: close an open utterance (``forced=True``)."""
        if not self.in_speech:
            return []
        self.in_speech = False
        c = self.config
        end = self._last_voiced_end_s
        return [SpeechEnd(self._speech_start_s, end, end + c.speech_pad_ms / 1000, max(end, self._pending_start_s), forced=True)]

    def _step(self, prob: float, window_start_s: float) -> Iterator[VadEvent]:
        c = self.config
        window_end_s = window_start_s + WINDOW_S
        self.last_probability = prob
        pad_s = c.speech_pad_ms / 1000
        if not self.in_speech:
            self._non_speech_s += WINDOW_S
            if self._candidate_start_s is None and self._non_speech_s >= STATE_RESET_S:
                self.vad.reset()
                self._non_speech_s = 0.0
            if prob >= c.threshold:
                if self._candidate_start_s is None:
                    self._candidate_start_s = window_start_s
                if window_end_s - self._candidate_start_s >= c.min_speech_ms / 1000:
                    self.in_speech = True
                    self._speech_start_s = max(0.0, self._candidate_start_s - pad_s)
                    self._last_voiced_end_s = window_end_s
                    self._candidate_start_s = None
                    self._paused = False
                    self._non_speech_s = 0.0
                    yield SpeechStart(self._speech_start_s, window_end_s)
            elif prob < c.neg_threshold:
                self._candidate_start_s = None
            return
        if prob >= c.neg_threshold:
            self._last_voiced_end_s = window_end_s
            self._paused = False
            self._early_end_s = None
        silence_s = window_end_s - self._last_voiced_end_s
        hangover_ms = c.min_silence_ms
        if self._early_end_s is not None and c.complete_silence_ms is not None:
            hangover_ms = min(c.min_silence_ms, c.complete_silence_ms)
        if not self._paused and min(c.pause_ms, c.speech_pad_ms) / 1000 <= silence_s < hangover_ms / 1000:
            self._paused = True
            end = self._last_voiced_end_s
            yield SpeechPause(self._speech_start_s, end, end + pad_s, window_end_s)
        if silence_s >= hangover_ms / 1000:
            self.in_speech = False
            self._paused = False
            self._early_end_s = None
            end = self._last_voiced_end_s
            yield SpeechEnd(self._speech_start_s, end, end + pad_s, window_end_s)
        elif window_end_s - self._speech_start_s >= c.max_speech_s:
            end = window_end_s
            yield SpeechEnd(self._speech_start_s, end, end, window_end_s, forced=True)
            self._speech_start_s = end  # speech continues: a new utterance starts here
            yield SpeechStart(end, window_end_s)
