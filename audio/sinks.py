"""Audio sinks: a WAV file and the speaker.

A sink takes :class:`audio.frames.AudioFrame` objects with :meth:`write` and is closed with
:meth:`close`. ``write`` returns when the frame has been *played*: immediately for a plain file,
after the frame's duration for the speaker or a file sink with ``realtime=True`` (which simulates
a loudspeaker, so barge-in behaves the same on a recording as live). Cancelling a ``write``
stops playback at once; that is how barge-in silences a reply.
"""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np
import soundfile

from audio.device import default_device, import_sounddevice
from audio.errors import AudioDeviceError
from audio.frames import AudioFrame


class WavFileSink:
    """Writes frames to a mono PCM16 WAV file at ``sample_rate_hz``.

    Args:
        path: output file (created or overwritten).
        sample_rate_hz: rate of every frame written (a frame at another rate raises ``ValueError``).
        realtime: when true, :meth:`write` waits as long as the frame plays.
    """

    def __init__(self, path: str | os.PathLike, sample_rate_hz: int, realtime: bool = False) -> None:
        self.path = path
        self.sample_rate_hz = sample_rate_hz
        self.realtime = realtime
        self.samples_written = 0
        self._file = soundfile.SoundFile(str(path), "w", samplerate=sample_rate_hz, channels=1, subtype="PCM_16")
        self._play_until = 0.0

    async def write(self, frame: AudioFrame) -> None:
        if frame.sample_rate_hz != self.sample_rate_hz:
            raise ValueError(f"frame at {frame.sample_rate_hz} Hz written to a {self.sample_rate_hz} Hz sink")
        self._file.write(frame.samples)
        self.samples_written += len(frame.samples)
        if self.realtime:
            now = time.monotonic()
            self._play_until = max(self._play_until, now) + frame.duration_s
            await asyncio.sleep(self._play_until - now)

    def interrupt(self) -> None:
        """Forget queued playback time (barge-in)."""
        self._play_until = 0.0

    async def close(self) -> None:
        self._file.close()


class SpeakerSink:
    """Plays frames on the default output device through ``sounddevice.RawOutputStream``.

    Frames are written in blocks of ``block_ms`` on a worker thread; a cancelled :meth:`write`
    stops after the current block and :meth:`interrupt` discards what the device has buffered.

    Raises:
        AudioDeviceError: no PortAudio or no output device (raised by the constructor).
    """

    def __init__(self, sample_rate_hz: int, block_ms: int = 40) -> None:
        self._sd = import_sounddevice()
        default_device("output")
        self.sample_rate_hz = sample_rate_hz
        self.block_samples = sample_rate_hz * block_ms // 1000
        try:
            self._stream = self._sd.RawOutputStream(samplerate=sample_rate_hz, channels=1, dtype="int16")
            self._stream.start()
        except (self._sd.PortAudioError, ValueError) as exc:
            raise AudioDeviceError(f"the output device refused {sample_rate_hz} Hz mono ({exc})") from exc

    async def write(self, frame: AudioFrame) -> None:
        if frame.sample_rate_hz != self.sample_rate_hz:
            raise ValueError(f"frame at {frame.sample_rate_hz} Hz written to a {self.sample_rate_hz} Hz sink")
        samples = frame.samples
        for start in range(0, len(samples), self.block_samples):
            block = np.ascontiguousarray(samples[start : start + self.block_samples])
            await asyncio.to_thread(self._stream.write, block.tobytes())

    def interrupt(self) -> None:
        """Drop buffered audio now (barge-in) and keep the stream open."""
        try:
            self._stream.abort()
            self._stream.start()
        except self._sd.PortAudioError:
            pass

    async def close(self) -> None:
        self._stream.close()
