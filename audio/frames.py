"""The frame type every stage of the pipeline exchanges.

An :class:`AudioFrame` is a block of mono PCM16 samples (``numpy.int16``, shape ``(n,)``) at a
sample rate in Hz, stamped with the stream time of its first sample in seconds (0 = start of
the stream). Sources produce frames at :data:`PIPELINE_RATE_HZ`; the TTS produces frames at the
voice's own rate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PIPELINE_RATE_HZ = 16_000
"""Sample rate of everything between a source and the ASR (Whisper and Silero VAD expect 16 kHz)."""


@dataclass(frozen=True)
class AudioFrame:
    """Mono PCM16 audio.

    Attributes:
        samples: ``numpy.int16`` array of shape ``(n,)``.
        sample_rate_hz: samples per second.
        timestamp_s: stream time of ``samples[0]`` in seconds.
    """

    samples: np.ndarray
    sample_rate_hz: int
    timestamp_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.samples, np.ndarray) or self.samples.dtype != np.int16:
            raise TypeError("AudioFrame.samples must be a numpy.int16 array")
        if self.samples.ndim != 1:
            raise ValueError(f"AudioFrame.samples must be mono, shape (n,), got {self.samples.shape}")
        if self.sample_rate_hz <= 0:
            raise ValueError(f"sample_rate_hz must be positive, got {self.sample_rate_hz}")

    @property
    def duration_s(self) -> float:
        """Length of the frame in seconds."""
        return len(self.samples) / self.sample_rate_hz

    @property
    def end_s(self) -> float:
        """Stream time just after the last sample, in seconds."""
        return self.timestamp_s + self.duration_s

    def to_float32(self) -> np.ndarray:
        """Samples as ``float32`` in [-1, 1), shape ``(n,)``."""
        return int16_to_float32(self.samples)

    @classmethod
    def from_float32(cls, samples: np.ndarray, sample_rate_hz: int, timestamp_s: float = 0.0) -> "AudioFrame":
        """Build a frame from ``float32`` samples in [-1, 1] (values outside are clipped)."""
        return cls(float32_to_int16(samples), sample_rate_hz, timestamp_s)

    @classmethod
    def from_pcm16_bytes(cls, data: bytes, sample_rate_hz: int, timestamp_s: float = 0.0) -> "AudioFrame":
        """Build a frame from little-endian PCM16 bytes (as a websocket or raw file carries them).

        Raises:
            ValueError: ``len(data)`` is odd (a torn sample).
        """
        if len(data) % 2:
            raise ValueError(f"PCM16 data must have an even number of bytes, got {len(data)}")
        return cls(np.frombuffer(data, dtype="<i2").astype(np.int16), sample_rate_hz, timestamp_s)


def int16_to_float32(samples: np.ndarray) -> np.ndarray:
    """PCM16 → float32 in [-1, 1): divides by 32768."""
    return samples.astype(np.float32) / 32768.0


def float32_to_int16(samples: np.ndarray) -> np.ndarray:
    """float32 in [-1, 1] → PCM16, clipping out-of-range values (clipped input stays bounded)."""
    return np.clip(np.round(np.asarray(samples, dtype=np.float32) * 32767.0), -32768, 32767).astype(np.int16)
