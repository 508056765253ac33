"""audio.vad: streaming Silero VAD and endpointing on real recordings."""

from __future__ import annotations

import numpy as np
import pytest

from audio.decode import decode_file
from audio.frames import AudioFrame
from audio.vad import WINDOW_SAMPLES, EndpointDetector, SileroVAD, SpeechEnd, SpeechPause, SpeechStart, VadConfig
from conftest_voice import sample


def run_detector(name: str, config: VadConfig = VadConfig(), frame_samples: int = 320, **decode_kwargs):
    samples = decode_file(sample(name), **decode_kwargs)
    samples = np.concatenate([samples, np.zeros(16000, np.int16)])  # 1 s of silence: a natural endpoint
    detector = EndpointDetector(config)
    events = []
    for i in range(0, len(samples), frame_samples):
        events += detector.process(AudioFrame(samples[i : i + frame_samples], 16000, i / 16000))
    return events + detector.flush()


def test_streaming_vad_matches_faster_whisper_batch_vad():
    """Window by window with carried state = faster-whisper's whole-array Silero call."""
    from faster_whisper.vad import get_vad_model

    audio = decode_file(sample("jfk.wav"))[: 200 * WINDOW_SAMPLES].astype(np.float32) / 32768
    batch = get_vad_model()(audio).reshape(-1)
    vad = SileroVAD()
    stream = np.array([vad(audio[i : i + WINDOW_SAMPLES]) for i in range(0, len(audio), WINDOW_SAMPLES)])
    np.testing.assert_allclose(stream, batch, atol=1e-4)
    assert stream.max() > 0.9 and stream.min() < 0.1


def test_jfk_endpoints():
    events = run_detector("jfk.wav")
    starts = [e for e in events if isinstance(e, SpeechStart)]
    ends = [e for e in events if isinstance(e, SpeechEnd)]
    assert len(starts) == len(ends) == 3  # the 1.1 s rhetorical pauses split it at 700 ms
    assert starts[0].start_s < 0.5
    assert abs(ends[-1].speech_end_s - 10.5) < 0.2  # speech ends ≈ 10.5 s of 11 s
    for end in ends:
        assert not end.forced
        assert end.speech_end_s < end.end_s <= end.detected_s
        assert abs(end.hangover_s - 0.7) < 0.04  # hangover = min_silence_ms, ± one window


@pytest.mark.parametrize("min_silence_ms,utterances", [(300, 4), (700, 3), (1200, 1)])
def test_hangover_decides_where_jfk_splits(min_silence_ms, utterances):
    events = run_detector("jfk.wav", VadConfig(min_silence_ms=min_silence_ms))
    assert sum(isinstance(e, SpeechEnd) for e in events) == utterances


def test_every_end_is_announced_by_a_pause_with_the_same_cut():
    events = run_detector("english_one_two_three.wav")
    ends = [e for e in events if isinstance(e, SpeechEnd)]
    pauses = {e.end_s for e in events if isinstance(e, SpeechPause)}
    assert len(ends) == 1 and ends[0].end_s in pauses


@pytest.mark.parametrize("name", ["LDC93S1_8k_mono.wav", "hotwords.mp3", "stereo_diarization.wav"])
def test_one_utterance_per_short_sample(name):
    events = run_detector(name)
    assert [type(e) for e in events if not isinstance(e, SpeechPause)] == [SpeechStart, SpeechEnd]


def test_kitchen_noise_has_no_speech():
    assert run_detector("noise_doing_the_dishes.wav") == []


def test_speech_at_the_very_end_is_closed_by_flush():
    samples = decode_file(sample("goforward_16k_s16le.raw"), raw_rate_hz=16000)[: int(2.0 * 16000)]
    detector = EndpointDetector()
    events = [e for i in range(0, len(samples), 512) for e in detector.process(AudioFrame(samples[i : i + 512], 16000, i / 16000))]
    tail = detector.flush()
    assert isinstance(events[0], SpeechStart) and len(tail) == 1 and tail[0].forced


def test_long_speech_is_cut_at_max_speech():
    events = run_detector("silero_en_60s.wav", VadConfig(max_speech_s=5.0))
    ends = [e for e in events if isinstance(e, SpeechEnd)]
    starts = [e for e in events if isinstance(e, SpeechStart)]
    assert any(e.forced for e in ends)
    for s, e in zip(starts, ends):
        assert e.speech_end_s - s.start_s <= 5.0 + 0.04


def test_frames_at_another_rate_are_refused():
    with pytest.raises(ValueError, match="16000 Hz"):
        EndpointDetector().process(AudioFrame(np.zeros(160, np.int16), 8000))


def test_onset_after_minutes_of_noise_is_not_late():
    """Silero's state drifts on long non-speech; the detector resets it (STATE_RESET_S)."""
    noise = decode_file(sample("noise_doing_the_dishes.wav"))
    command = decode_file(sample("goforward_16k_s16le.raw"), raw_rate_hz=16000)
    fresh = [e for e in run_detector_on(command) if isinstance(e, SpeechStart)][0].start_s
    lead = 2 * len(noise) + 16000
    audio = np.concatenate([noise, noise, np.zeros(16000, np.int16), command])
    after_noise = [e for e in run_detector_on(audio) if isinstance(e, SpeechStart)][0].start_s - lead / 16000
    assert abs(after_noise - fresh) < 0.07  # within two windows of a fresh detector


def run_detector_on(samples, config: VadConfig = VadConfig()):
    detector = EndpointDetector(config)
    return [e for i in range(0, len(samples), 512) for e in detector.process(AudioFrame(samples[i : i + 512], 16000, i / 16000))]
