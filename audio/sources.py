"""Audio sources: a file, the microphone, or a queue fed by a network connection.

Each source is an async iterator of :class:`audio.frames.AudioFrame` at 16 kHz, mono PCM16, in
frames of ``frame_ms`` (32 ms = 512 samples by default, the Silero VAD window), stamped with
their stream time. Iteration ends when the input ends.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Iterator

import numpy as np
import soxr

from audio.decode import iter_decoded_blocks
from audio.device import default_device, import_sounddevice
from audio.errors import AudioDeviceError
from audio.frames import PIPELINE_RATE_HZ, AudioFrame, float32_to_int16

log = logging.getLogger(__name__)

DEFAULT_FRAME_MS = 32
_END = object()


class FileSource:
    """Frames of an audio file, paced in real time (as if spoken) or as fast as they decode.

    Args:
        path: any file :func:`audio.decode.iter_decoded_blocks` reads.
        realtime: when true, frame *k* is released at ``start + k * frame duration``.
        raw_rate_hz: sample rate of a headerless PCM16 file.
        frame_ms: frame length in milliseconds.
        tail_silence_ms: digital silence appended after the file so a speech that runs to the very
            end of the recording still reaches the endpoint the way live speech would.
        channel: ``None`` averages the channels; an index plays one channel.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        realtime: bool = False,
        raw_rate_hz: int | None = None,
        frame_ms: int = DEFAULT_FRAME_MS,
        tail_silence_ms: int = 0,
        channel: int | None = None,
    ) -> None:
        self.path = path
        self.channel = channel
        self.realtime = realtime
        self.raw_rate_hz = raw_rate_hz
        self.frame_samples = PIPELINE_RATE_HZ * frame_ms // 1000
        self.tail_silence_samples = PIPELINE_RATE_HZ * tail_silence_ms // 1000

    def _blocks(self) -> Iterator[np.ndarray]:
        """Decoded float32 blocks, then the tail silence."""
        yield from iter_decoded_blocks(self.path, raw_rate_hz=self.raw_rate_hz, channel=self.channel)
        if self.tail_silence_samples:
            yield np.zeros(self.tail_silence_samples, dtype=np.float32)

    async def __aiter__(self) -> AsyncIterator[AudioFrame]:
        blocks = self._blocks()
        pending = np.zeros(0, dtype=np.int16)
        sent = 0  # samples released so far
        start = time.monotonic()
        while True:
            block = await asyncio.to_thread(next, blocks, None)  # file I/O and decoding off the loop
            last = block is None
            if not last:
                pending = np.concatenate([pending, float32_to_int16(block)])
            while len(pending) >= self.frame_samples or (last and len(pending)):
                chunk, pending = pending[: self.frame_samples], pending[self.frame_samples :]
                if self.realtime:
                    delay = start + sent / PIPELINE_RATE_HZ - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                yield AudioFrame(chunk, PIPELINE_RATE_HZ, sent / PIPELINE_RATE_HZ)
                sent += len(chunk)
            if last:
                return


class QueueSource:
    """Frames pushed by another task (the websocket server): PCM16 bytes or frames in, frames out.

    Pushed audio must be mono 16 kHz PCM16 unless ``sample_rate_hz`` says otherwise, in which case
    it is resampled. Call :meth:`end` when the input ends. The queue is bounded
    (``max_frames``): :meth:`push` waits when the pipeline falls behind.
    """

    def __init__(self, sample_rate_hz: int = PIPELINE_RATE_HZ, max_frames: int = 256) -> None:
        self.sample_rate_hz = sample_rate_hz
        self._queue: asyncio.Queue = asyncio.Queue(max_frames)
        self._resampler = (
            soxr.ResampleStream(sample_rate_hz, PIPELINE_RATE_HZ, 1, dtype="int16")
            if sample_rate_hz != PIPELINE_RATE_HZ
            else None
        )
        self._samples_in = 0

    async def push(self, audio: bytes | np.ndarray) -> None:
        """Queue little-endian PCM16 bytes or an int16 array of shape ``(n,)``.

        Raises:
            ValueError: odd byte count, or an array that is not int16 mono.
        """
        samples = AudioFrame.from_pcm16_bytes(audio, self.sample_rate_hz).samples if isinstance(audio, (bytes, bytearray, memoryview)) else audio
        if not isinstance(samples, np.ndarray) or samples.dtype != np.int16 or samples.ndim != 1:
            raise ValueError("QueueSource.push takes PCM16 bytes or a numpy.int16 array of shape (n,)")
        if self._resampler is not None:
            samples = self._resampler.resample_chunk(samples)
        if len(samples):
            frame = AudioFrame(samples, PIPELINE_RATE_HZ, self._samples_in / PIPELINE_RATE_HZ)
            self._samples_in += len(samples)
            await self._queue.put(frame)

    async def end(self) -> None:
        """Mark the end of the input; iteration stops after the queued frames."""
        if self._resampler is not None:  # the resampler's delay line still holds the last samples
            tail = self._resampler.resample_chunk(np.zeros(0, dtype=np.int16), last=True)
            self._resampler = None
            if len(tail):
                await self.push(tail)
        await self._queue.put(_END)

    async def __aiter__(self) -> AsyncIterator[AudioFrame]:
        while (item := await self._queue.get()) is not _END:
            yield item


class MicrophoneSource:
    """Frames from the default input device through ``sounddevice.InputStream``.

    PortAudio calls the stream callback on its own thread; the callback hands each block to the
    event loop with ``loop.call_soon_threadsafe``. When the device refuses the requested channel
    count or 16 kHz, the stream falls back to mono at the device's default rate and blocks are
    resampled with soxr. If the pipeline falls behind, the oldest blocks are dropped (logged).

    Raises (on iteration):
        AudioDeviceError: no PortAudio, no input device, or every stream configuration refused.
    """

    def __init__(self, channels: int = 1, frame_ms: int = DEFAULT_FRAME_MS, max_frames: int = 256) -> None:
        self.channels = channels
        self.frame_ms = frame_ms
        self.max_frames = max_frames

    def _configurations(self, device: dict) -> Iterator[tuple[int, int]]:
        """(channels, sample rate in Hz) to try, in order: as asked, then mono fallbacks."""
        default_rate = int(device.get("default_samplerate") or PIPELINE_RATE_HZ)
        seen = set()
        for config in ((self.channels, PIPELINE_RATE_HZ), (1, PIPELINE_RATE_HZ), (1, default_rate)):
            if config not in seen:
                seen.add(config)
                yield config

    async def __aiter__(self) -> AsyncIterator[AudioFrame]:
        sd = import_sounddevice()
        device = default_device("input")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue(self.max_frames)

        def deliver(block: np.ndarray) -> None:  # runs on the event loop
            if queue.full():
                queue.get_nowait()
                log.warning("microphone: pipeline behind, dropped %d ms of audio", self.frame_ms)
            queue.put_nowait(block)

        def callback(indata, frames, time_info, status) -> None:  # runs on PortAudio's thread
            if status:
                log.debug("microphone status: %s", status)
            loop.call_soon_threadsafe(deliver, indata.copy())

        stream, rate_hz, channels, errors = None, 0, 0, []
        for channels, rate_hz in self._configurations(device):
            try:
                stream = sd.InputStream(
                    samplerate=rate_hz,
                    channels=channels,
                    dtype="int16",
                    blocksize=rate_hz * self.frame_ms // 1000,
                    callback=callback,
                )
                break
            except (sd.PortAudioError, ValueError) as exc:
                errors.append(f"{channels} ch @ {rate_hz} Hz: {exc}")
        if stream is None:
            raise AudioDeviceError("the input device refused every configuration: " + "; ".join(errors))
        resampler = soxr.ResampleStream(rate_hz, PIPELINE_RATE_HZ, 1, dtype="int16") if rate_hz != PIPELINE_RATE_HZ else None
        sent = 0
        with stream:
            while True:
                block = await queue.get()
                mono = block[:, 0] if channels == 1 else block.mean(axis=1).astype(np.int16)
                if resampler is not None:
                    mono = resampler.resample_chunk(mono)
                if len(mono):
                    yield AudioFrame(np.ascontiguousarray(mono, dtype=np.int16), PIPELINE_RATE_HZ, sent / PIPELINE_RATE_HZ)
                    sent += len(mono)
