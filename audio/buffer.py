"""A rolling store of recent frames, cut by stream time (pre-roll and utterance audio for the ASR)."""

from __future__ import annotations

from collections import deque

import numpy as np

from audio.frames import PIPELINE_RATE_HZ, AudioFrame


class StreamBuffer:
    """Keeps frames of one 16 kHz stream, at most ``max_s`` seconds of them (oldest dropped).

    Memory is bounded by ``max_s`` whatever the stream length.
    """

    def __init__(self, max_s: float) -> None:
        self.max_samples = int(max_s * PIPELINE_RATE_HZ)
        self._frames: deque[AudioFrame] = deque()
        self._samples = 0

    def append(self, frame: AudioFrame) -> None:
        self._frames.append(frame)
        self._samples += len(frame.samples)
        while self._samples - len(self._frames[0].samples) >= self.max_samples:
            self._samples -= len(self._frames.popleft().samples)

    def clear(self) -> None:
        self._frames.clear()
        self._samples = 0

    @property
    def end_s(self) -> float:
        """Stream time just after the newest sample (0 when empty)."""
        return self._frames[-1].end_s if self._frames else 0.0

    def slice(self, start_s: float, end_s: float | None = None) -> np.ndarray:
        """Samples in [start_s, end_s) that are still held, as ``numpy.int16`` of shape ``(n,)``."""
        parts = []
        for frame in self._frames:
            if frame.end_s <= start_s or (end_s is not None and frame.timestamp_s >= end_s):
                continue
            a = max(0, round((start_s - frame.timestamp_s) * PIPELINE_RATE_HZ))
            b = len(frame.samples) if end_s is None else min(len(frame.samples), round((end_s - frame.timestamp_s) * PIPELINE_RATE_HZ))
            parts.append(frame.samples[a:b])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)
