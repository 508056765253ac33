"""A 10-minute recording runs through the pipeline with bounded memory and finds its speech."""

from __future__ import annotations

import asyncio
import tracemalloc

import numpy as np
import pytest
import soundfile

from audio.decode import decode_file
from audio.sources import FileSource
from conftest_voice import recognizer, sample  # noqa: F401 - fixture
from voice.events import FinalTranscript
from voice.metrics import normalize_transcript
from voice.pipeline import PipelineConfig, VoicePipeline

pytestmark = pytest.mark.slow


async def test_ten_minutes_of_kitchen_noise_around_two_commands(recognizer, tmp_path):
    path = tmp_path / "long.flac"
    noise = decode_file(sample("noise_doing_the_dishes.wav"))
    command = decode_file(sample("goforward_16k_s16le.raw"), raw_rate_hz=16000)
    silence = np.zeros(16000, np.int16)
    with soundfile.SoundFile(path, "w", samplerate=16000, channels=1, format="FLAC") as f:
        f.write(np.concatenate([command, silence]))
        for _ in range(6):  # 6 × 95 s of noise
            f.write(noise)
        f.write(np.concatenate([silence, command, silence]))
    duration_s = soundfile.info(str(path)).duration
    assert duration_s > 575

    config = PipelineConfig(reply=False, turn_taking="wait", interims=False)
    session = VoicePipeline(None, None, recognizer, config).session(FileSource(path, tail_silence_ms=900))
    finals = []
    session.subscribe(lambda e: finals.append(e.text) if isinstance(e, FinalTranscript) else None)
    tracemalloc.start()
    traces = await asyncio.wait_for(session.run(), timeout=240)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert [normalize_transcript(t) for t in finals] == ["go forward 10 meters"] * 2
    assert len(traces) == 2
    assert peak < 16_000_000, f"peak {peak / 1e6:.1f} MB for {duration_s:.0f} s of audio"  # 10 min of PCM16 = 19 MB
