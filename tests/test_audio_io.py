"""audio.sources and audio.sinks: pacing, queues, WAV output, and clear device errors."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
import soundfile

from audio.decode import decode_file
from audio.errors import AudioDeviceError
from audio.frames import AudioFrame
from audio.sinks import SpeakerSink, WavFileSink
from audio.sources import FileSource, MicrophoneSource, QueueSource
from conftest_voice import sample


async def collect(source):
    return [frame async for frame in source]


async def test_file_source_frames_are_contiguous_and_complete():
    frames = await collect(FileSource(sample("english_one_two_three.wav"), tail_silence_ms=300))
    assert all(len(f.samples) == 512 for f in frames[:-1])
    for a, b in zip(frames, frames[1:]):
        assert abs(a.end_s - b.timestamp_s) < 1e-9
    total = sum(len(f.samples) for f in frames)
    assert total == len(decode_file(sample("english_one_two_three.wav"))) + 4800


async def test_file_source_in_real_time_takes_the_file_duration():
    started = time.monotonic()
    frames = await collect(FileSource(sample("english_one_two_three.wav"), realtime=True))
    elapsed = time.monotonic() - started
    assert 2.6 < elapsed < 10.0  # 2.745 s of audio paced in real time (upper bound: no stall, even loaded)
    assert frames[-1].end_s == pytest.approx(2.745, abs=0.01)


async def test_file_source_raises_decode_errors(tmp_path):
    (tmp_path / "x.wav").write_bytes(b"")
    from audio.errors import AudioDecodeError

    with pytest.raises(AudioDecodeError):
        await collect(FileSource(tmp_path / "x.wav"))


async def test_queue_source_resamples_pushed_pcm_and_ends():
    source = QueueSource(sample_rate_hz=8000)
    pcm8k = decode_file(sample("LDC93S1_8k_mono.wav"))  # 16 kHz
    pcm8k = pcm8k[::2].copy()  # a crude 8 kHz stream
    consumer = asyncio.create_task(collect(source))
    for i in range(0, len(pcm8k), 800):
        await source.push(pcm8k[i : i + 800].tobytes())
    await source.end()
    frames = await consumer
    total = sum(len(f.samples) for f in frames)
    assert abs(total - 2 * len(pcm8k)) < 100
    assert frames[0].sample_rate_hz == 16000 and frames[0].timestamp_s == 0.0


async def test_queue_source_rejects_torn_pcm():
    with pytest.raises(ValueError, match="even number of bytes"):
        await QueueSource().push(b"\x00\x01\x02")


async def test_wav_sink_writes_what_it_is_given(tmp_path):
    sink = WavFileSink(tmp_path / "out.wav", 22050)
    tone = (np.sin(np.arange(22050) / 10) * 8000).astype(np.int16)
    await sink.write(AudioFrame(tone[:11025], 22050))
    await sink.write(AudioFrame(tone[11025:], 22050))
    await sink.close()
    data, rate = soundfile.read(tmp_path / "out.wav", dtype="int16")
    assert rate == 22050
    np.testing.assert_array_equal(data, tone)


async def test_wav_sink_in_real_time_plays_for_the_frame_duration(tmp_path):
    sink = WavFileSink(tmp_path / "out.wav", 16000, realtime=True)
    started = time.monotonic()
    for _ in range(5):
        await sink.write(AudioFrame(np.zeros(1600, np.int16), 16000))
    assert 0.45 < time.monotonic() - started < 5.0  # 0.5 s of frames paced in real time
    await sink.close()


async def test_wav_sink_refuses_another_rate(tmp_path):
    sink = WavFileSink(tmp_path / "out.wav", 22050)
    with pytest.raises(ValueError, match="16000 Hz"):
        await sink.write(AudioFrame(np.zeros(10, np.int16), 16000))
    await sink.close()


async def test_microphone_without_a_device_is_a_clear_error():
    with pytest.raises(AudioDeviceError, match="PortAudio|device"):
        await collect(MicrophoneSource())


def test_speaker_without_a_device_is_a_clear_error():
    with pytest.raises(AudioDeviceError, match="PortAudio|device"):
        SpeakerSink(22050)


def test_frame_validates_its_samples():
    with pytest.raises(TypeError):
        AudioFrame(np.zeros(4, np.float32), 16000)
    with pytest.raises(ValueError):
        AudioFrame(np.zeros((2, 4), np.int16), 16000)
    frame = AudioFrame.from_pcm16_bytes(np.array([1, -2, 3], "<i2").tobytes(), 16000, 1.0)
    assert frame.samples.tolist() == [1, -2, 3] and frame.end_s == pytest.approx(1.0 + 3 / 16000)
