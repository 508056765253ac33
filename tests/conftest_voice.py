"""Fixtures and helpers shared by the audio/voice/pipeline tests (import the fixtures you use).

One Whisper model, one Piper voice and one LM per test session: loading them is the slow part.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
REFERENCES = json.loads((SAMPLES / "references.json").read_text())


def sample(name: str) -> Path:
    return SAMPLES / name


@pytest.fixture(scope="session")
def recognizer():
    """The shared ``WhisperRecognizer`` (bundled tiny.en, int8, 2 threads)."""
    from voice.asr import WhisperRecognizer

    return WhisperRecognizer()


@pytest.fixture(scope="session")
def synthesizer():
    """The bundled Piper voice (en_US-joe-medium, 22.05 kHz)."""
    from voice.tts import PiperSynthesizer

    return PiperSynthesizer()


@pytest.fixture(scope="session")
def voice_lm():
    """The real local LM backend, through the interface the product uses."""
    import llm

    return llm.load_backend("local", device="cpu")


async def transcribe_file(recognizer, name: str, **source_kwargs):
    """Run the pipeline (transcription only) on a sample; returns (events, traces)."""
    from audio.sources import FileSource
    from voice.pipeline import PipelineConfig, VoicePipeline

    config = PipelineConfig(reply=False, turn_taking="wait")
    source = FileSource(sample(name), tail_silence_ms=config.vad.min_silence_ms + 200, **source_kwargs)
    session = VoicePipeline(None, None, recognizer, config).session(source)
    events = []
    session.subscribe(events.append)
    traces = await session.run()
    return events, traces
