"""Decoding audio files to mono float32 at 16 kHz, block by block.

Containers and codecs: everything libsndfile reads (WAV, FLAC, AIFF, OGG, and MP3 with
libsndfile ≥ 1.1) through ``soundfile``; everything else FFmpeg reads (MP3, M4A, Opus, …) through
PyAV, which faster-whisper already depends on. Headerless PCM16 (little-endian, mono) needs an
explicit ``raw_rate_hz``. Channels are averaged to mono (or one is picked with ``channel``) and
the result is resampled with ``soxr`` (streaming, "HQ" quality).

Decoding is streamed: a 10-minute file never sits in memory as a whole unless the caller
concatenates it (:func:`decode_file` does; the file source does not).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import soundfile
import soxr

from audio.errors import AudioDecodeError, UnsupportedAudioFormatError
from audio.frames import PIPELINE_RATE_HZ, float32_to_int16

log = logging.getLogger(__name__)

RAW_SUFFIXES = (".raw", ".pcm", ".s16", ".s16le")
PYAV_FIRST_SUFFIXES = (".mp3", ".m4a", ".aac", ".mp4", ".webm", ".opus")
"""Compressed formats sent straight to FFmpeg: libsndfile's mpg123 path logs errors on some MP3s."""
DEFAULT_BLOCK_S = 0.5


def iter_decoded_blocks(
    path: str | os.PathLike,
    *,
    raw_rate_hz: int | None = None,
    target_rate_hz: int = PIPELINE_RATE_HZ,
    channel: int | None = None,
    block_s: float = DEFAULT_BLOCK_S,
) -> Iterator[np.ndarray]:
    """Yield the file's audio as mono ``float32`` blocks in [-1, 1] at ``target_rate_hz``.

    Args:
        path: audio file.
        raw_rate_hz: sample rate of a headerless PCM16 little-endian mono file. Required for
            ``.raw``/``.pcm`` files; when given, the file is always read as raw PCM16.
        target_rate_hz: output sample rate in Hz.
        channel: ``None`` averages all channels; an index picks one channel.
        block_s: approximate input block length in seconds (bounds memory use).

    Yields:
        ``numpy.float32`` arrays of shape ``(n,)``; no block is yielded for a file with zero samples.

    Raises:
        AudioDecodeError: missing, zero-byte, truncated or corrupt file, or a bad ``channel``.
        UnsupportedAudioFormatError: neither soundfile nor PyAV recognises the format, or a
            headerless file was given without ``raw_rate_hz``.
    """
    path = Path(path)
    if not path.exists():
        raise AudioDecodeError(f"{path}: no such file")
    if path.is_dir():
        raise AudioDecodeError(f"{path}: is a directory, not an audio file")
    if not path.is_file():
        raise AudioDecodeError(f"{path}: not a regular file (a device, pipe or socket); give a recording")
    if path.stat().st_size == 0:
        raise AudioDecodeError(f"{path}: file is empty (0 bytes)")
    if raw_rate_hz is not None:
        blocks, rate_hz = _raw_pcm16_blocks(path, raw_rate_hz, block_s), raw_rate_hz
    elif path.suffix.lower() in RAW_SUFFIXES:
        raise UnsupportedAudioFormatError(
            f"{path}: headerless PCM has no sample rate; pass --raw-rate (e.g. --raw-rate 16000)"
        )
    else:
        blocks, rate_hz = _open_container(path, channel, block_s)
    yield from _resampled(blocks, rate_hz, target_rate_hz)


def decode_file(path: str | os.PathLike, **kwargs) -> np.ndarray:
    """Decode a whole file to mono PCM16 (``numpy.int16``, shape ``(n,)``) at 16 kHz.

    Takes the keyword arguments of :func:`iter_decoded_blocks`; raises what it raises.
    """
    blocks = list(iter_decoded_blocks(path, **kwargs))
    if not blocks:
        return np.zeros(0, dtype=np.int16)
    return float32_to_int16(np.concatenate(blocks))


def audio_duration_s(path: str | os.PathLike, raw_rate_hz: int | None = None) -> float | None:
    """Duration from the header (or file size for raw PCM16), ``None`` when unknown. No decoding."""
    path = Path(path)
    if raw_rate_hz:
        return path.stat().st_size / 2 / raw_rate_hz
    try:
        info = soundfile.info(str(path))
        return info.frames / info.samplerate
    except Exception:  # noqa: BLE001 - header-less or non-libsndfile formats: unknown
        return None


# -- readers: each returns (iterator of (frames, channels) float32 blocks, sample rate) --------------


def _raw_pcm16_blocks(path: Path, rate_hz: int, block_s: float) -> Iterator[np.ndarray]:
    if rate_hz <= 0:
        raise AudioDecodeError(f"--raw-rate must be a positive sample rate in Hz, got {rate_hz}")
    block_bytes = max(2, int(rate_hz * block_s) * 2)
    with open(path, "rb") as f:
        while data := f.read(block_bytes):
            if len(data) % 2:  # a torn last sample: drop it
                log.warning("%s: odd byte count, dropping the last byte", path)
                data = data[:-1]
            yield (np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0)[:, None]


def _open_container(path: Path, channel: int | None, block_s: float):
    if path.suffix.lower() in PYAV_FIRST_SUFFIXES:
        return _pyav_blocks(path, channel, block_s)
    try:
        sf = soundfile.SoundFile(str(path))
    except (soundfile.LibsndfileError, RuntimeError) as exc:
        log.debug("soundfile cannot read %s (%s); trying PyAV", path, exc)
        return _pyav_blocks(path, channel, block_s)
    _check_channel(path, channel, sf.channels)
    return _soundfile_blocks(path, sf, channel, block_s), sf.samplerate


def _soundfile_blocks(path: Path, sf: soundfile.SoundFile, channel: int | None, block_s: float):
    with sf:
        block_frames = max(1, int(sf.samplerate * block_s))
        try:
            for block in sf.blocks(blocksize=block_frames, dtype="float32", always_2d=True):
                yield _downmix(block, channel)
        except (soundfile.LibsndfileError, RuntimeError) as exc:
            raise AudioDecodeError(f"{path}: corrupt or truncated audio ({exc})") from exc


def _pyav_blocks(path: Path, channel: int | None, block_s: float):
    import av  # PyAV: installed with faster-whisper

    try:
        container = av.open(str(path), mode="r", metadata_errors="ignore")
    except av.error.InvalidDataError as exc:
        raise UnsupportedAudioFormatError(f"{path}: not a readable audio file (unknown format, or a truncated/corrupt header)") from exc
    except (av.error.FFmpegError, OSError) as exc:
        raise AudioDecodeError(f"{path}: cannot open ({exc})") from exc
    if not container.streams.audio:
        container.close()
        raise UnsupportedAudioFormatError(f"{path}: the file has no audio stream")
    stream = container.streams.audio[0]
    rate_hz = stream.codec_context.sample_rate or stream.rate
    if not rate_hz:
        container.close()
        raise AudioDecodeError(f"{path}: the audio stream has no sample rate")
    _check_channel(path, channel, stream.codec_context.channels or 1)

    def blocks() -> Iterator[np.ndarray]:
        resampler = av.AudioResampler(format="fltp")  # planar float32, same rate and layout
        try:
            with container:
                for frame in container.decode(stream):
                    for out in resampler.resample(frame):
                        yield _downmix(out.to_ndarray().T, channel)
        except av.error.FFmpegError as exc:
            raise AudioDecodeError(f"{path}: corrupt or truncated audio ({exc})") from exc

    return blocks(), rate_hz


def _check_channel(path: Path, channel: int | None, channels: int) -> None:
    if channel is not None and not 0 <= channel < channels:
        raise AudioDecodeError(f"{path}: channel {channel} requested, the file has {channels}")


def _downmix(block: np.ndarray, channel: int | None) -> np.ndarray:
    """(frames, channels) → (frames, 1): the mean of the channels, or the chosen one."""
    if channel is not None:
        return block[:, channel : channel + 1]
    return block.mean(axis=1, keepdims=True, dtype=np.float32)


def _resampled(blocks: Iterator[np.ndarray], in_rate_hz: int, out_rate_hz: int) -> Iterator[np.ndarray]:
    if in_rate_hz == out_rate_hz:
        for block in blocks:
            if len(block):
                yield np.ascontiguousarray(block[:, 0], dtype=np.float32)
        return
    stream = soxr.ResampleStream(in_rate_hz, out_rate_hz, 1, dtype="float32", quality="HQ")
    for block in blocks:
        out = stream.resample_chunk(np.ascontiguousarray(block[:, 0], dtype=np.float32))
        if len(out):
            yield out
    tail = stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
    if len(tail):
        yield tail
