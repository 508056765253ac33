"""voice.tts: Piper produces real speech in pieces; sentence release while drafts arrive."""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from conftest_voice import recognizer, synthesizer  # noqa: F401 - fixtures
from voice.metrics import word_error_rate
from voice.tts import StableSentences, split_utterances


def test_piper_speaks_text_that_whisper_understands(synthesizer, recognizer):
    text = "Your table for two is booked at seven tonight."
    chunks = list(synthesizer.synthesize(text))
    assert synthesizer.sample_rate_hz == 22050
    audio = np.concatenate(chunks)
    assert audio.dtype == np.int16 and audio.ndim == 1
    assert 1.0 < len(audio) / 22050 < 6.0
    assert np.sqrt(np.mean(audio.astype(np.float64) ** 2)) > 500
    heard = recognizer.decode(soxr.resample(audio, 22050, 16000))
    assert word_error_rate(text, heard.text) <= 0.2, heard.text


def test_split_utterances_cuts_sentences_and_the_first_clause():
    assert split_utterances("Sure, I can book that. What time works? Seven pm!") == [
        "Sure, I can book that.", "What time works?", "Seven pm!"]
    assert split_utterances("The weather in Boston is sunny, with a high of seventy. Anything else?") == [
        "The weather in Boston is sunny,", "with a high of seventy.", "Anything else?"]
    assert split_utterances("  ") == []
    assert split_utterances("no punctuation at all") == ["no punctuation at all"]


def test_stable_sentences_with_a_growing_prefix():
    stable = StableSentences()
    released = []
    for draft in ["Hello", "Hello there.", "Hello there. I can", "Hello there. I can help. What", "Hello there. I can help. What time?"]:
        released += stable.update(draft)
    assert released == ["Hello there.", "I can help."]
    assert stable.finish("Hello there. I can help. What time?") == ["What time?"]


def test_stable_sentences_with_diffusion_drafts_that_rewrite_everything():
    stable = StableSentences()
    drafts = ["Sure thing. Booked for seven.", "Sure. Booked for seven pm.", "Sure. Booked for seven pm."]
    released = [s for d in drafts for s in stable.update(d)]
    assert released == ["Sure."]  # the first sentence settled across two drafts
    assert stable.finish(drafts[-1]) == ["Booked for seven pm."]
    assert stable.released == ["Sure.", "Booked for seven pm."]


def test_coqui_backend_reports_what_is_missing(tmp_path):
    from voice.tts import CoquiSynthesizer, SynthesisError

    with pytest.raises(SynthesisError, match="Coqui TTS is not installed|config.json"):
        CoquiSynthesizer(str(tmp_path))


def test_missing_piper_voice_is_a_clear_error(tmp_path):
    from voice.tts import PiperSynthesizer, SynthesisError

    with pytest.raises(SynthesisError, match="cannot load Piper voice"):
        PiperSynthesizer(str(tmp_path / "nope.onnx"))
