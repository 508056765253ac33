"""audio.decode: every sample format to 16 kHz mono PCM16; bad input gives a clear error."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import soundfile

from audio.decode import decode_file, iter_decoded_blocks
from audio.errors import AudioDecodeError, UnsupportedAudioFormatError
from conftest_voice import sample

# (file, decode kwargs, duration in s from MANIFEST.tsv)
FORMATS = [
    ("jfk.wav", {}, 11.000),
    ("english_one_two_three.wav", {}, 2.745),  # 44.1 kHz
    ("LDC93S1_8k_mono.wav", {}, 2.925),  # 8 kHz
    ("stereo_diarization.wav", {}, 5.000),  # stereo
    ("hotwords.mp3", {}, 4.048),  # MP3 44.1 kHz stereo (PyAV)
    ("chinese.flac", {}, 0.956),  # FLAC 48 kHz
    ("french.aiff", {}, 2.533),  # AIFF
    ("goforward_16k_s16le.raw", {"raw_rate_hz": 16000}, 2.786),  # headerless PCM16
]


@pytest.mark.parametrize("name,kwargs,duration_s", FORMATS, ids=[f[0] for f in FORMATS])
def test_decodes_to_16k_mono_int16_with_the_right_duration(name, kwargs, duration_s):
    samples = decode_file(sample(name), **kwargs)
    assert samples.dtype == np.int16 and samples.ndim == 1
    tolerance_s = 0.06 if name.endswith(".mp3") else 0.01  # MP3 encoder delay/padding
    assert abs(len(samples) / 16000 - duration_s) < tolerance_s
    rms = np.sqrt(np.mean(samples.astype(np.float64) ** 2))
    assert rms > 100, "decoded audio is (near) silent"


def test_stereo_downmix_is_the_mean_of_the_channels():
    left = decode_file(sample("stereo_diarization.wav"), channel=0).astype(np.int32)
    right = decode_file(sample("stereo_diarization.wav"), channel=1).astype(np.int32)
    mixed = decode_file(sample("stereo_diarization.wav")).astype(np.int32)
    assert np.max(np.abs(mixed - (left + right) / 2)) <= 1.0
    assert not np.array_equal(left, right)


def test_resampling_keeps_a_tone_at_its_frequency(tmp_path):
    rate, freq = 44100, 440.0
    t = np.arange(rate) / rate
    soundfile.write(tmp_path / "tone.wav", 0.5 * np.sin(2 * np.pi * freq * t), rate, subtype="PCM_16")
    samples = decode_file(tmp_path / "tone.wav").astype(np.float64)
    assert abs(len(samples) - 16000) <= 1
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    peak_hz = np.argmax(spectrum) * 16000 / len(samples)
    assert abs(peak_hz - freq) < 2.0
    assert abs(np.max(np.abs(samples)) / 32768 - 0.5) < 0.01  # amplitude kept


def test_clipped_audio_stays_in_range(tmp_path):
    loud = np.clip(decode_file(sample("jfk.wav")).astype(np.float64) * 20 / 32768, -1, 1)
    soundfile.write(tmp_path / "clipped.wav", loud, 16000, subtype="FLOAT")
    samples = decode_file(tmp_path / "clipped.wav")
    assert samples.min() >= -32768 and samples.max() <= 32767
    assert np.mean(np.abs(samples) >= 32000) > 0.05  # really clipped


def test_header_only_wav_decodes_to_zero_samples():
    assert len(decode_file(sample("empty_header_only.wav"))) == 0


def test_zero_byte_file_is_a_clear_error(tmp_path):
    (tmp_path / "zero.wav").write_bytes(b"")
    with pytest.raises(AudioDecodeError, match="empty"):
        decode_file(tmp_path / "zero.wav")


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(AudioDecodeError, match="no such file"):
        decode_file(tmp_path / "nope.wav")


def test_directory_and_device_are_clear_errors(tmp_path):
    with pytest.raises(AudioDecodeError, match="is a directory"):
        decode_file(tmp_path)
    with pytest.raises(AudioDecodeError, match="not a regular file"):
        decode_file("/dev/null")


def test_text_file_is_an_unsupported_format(tmp_path):
    (tmp_path / "notes.wav").write_text("this is not audio\n" * 20)
    with pytest.raises(UnsupportedAudioFormatError, match="not a readable audio file"):
        decode_file(tmp_path / "notes.wav")


def test_raw_pcm_needs_an_explicit_rate():
    with pytest.raises(UnsupportedAudioFormatError, match="--raw-rate"):
        decode_file(sample("goforward_16k_s16le.raw"))


def test_raw_pcm_with_an_odd_byte_count_drops_the_torn_sample(tmp_path):
    data = sample("goforward_16k_s16le.raw").read_bytes()[:3201]
    (tmp_path / "torn.raw").write_bytes(data)
    assert len(decode_file(tmp_path / "torn.raw", raw_rate_hz=16000)) == 1600


def test_raw_pcm_at_8k_is_resampled(tmp_path):
    samples = decode_file(sample("goforward_16k_s16le.raw"), raw_rate_hz=8000)
    assert abs(len(samples) - 2 * 44580) <= 2  # read as 8 kHz: twice as many 16 kHz samples


def test_truncated_wav_decodes_what_is_there(tmp_path):
    data = sample("jfk.wav").read_bytes()
    header_bytes = len(data) - 2 * 176000  # 11 s of 16 kHz PCM16 after the header
    (tmp_path / "cut.wav").write_bytes(data[: header_bytes + 2 * 16000])  # header + 1 s
    samples = decode_file(tmp_path / "cut.wav")
    assert abs(len(samples) - 16000) <= 1
    np.testing.assert_array_equal(samples, decode_file(sample("jfk.wav"))[:16000])


def test_truncated_header_is_a_clear_error(tmp_path):
    (tmp_path / "stub.wav").write_bytes(sample("jfk.wav").read_bytes()[:30])
    with pytest.raises(UnsupportedAudioFormatError):
        decode_file(tmp_path / "stub.wav")


def test_truncated_mp3_decodes_what_is_there(tmp_path):
    (tmp_path / "cut.mp3").write_bytes(sample("hotwords.mp3").read_bytes()[:16000])
    samples = decode_file(tmp_path / "cut.mp3")
    assert 0.5 < len(samples) / 16000 < 2.0  # 16 kB of a 65 kB / 4 s file


def test_bad_channel_is_a_clear_error():
    with pytest.raises(AudioDecodeError, match="channel 2 requested, the file has 2"):
        decode_file(sample("stereo_diarization.wav"), channel=2)


def test_ten_minute_file_decodes_in_bounded_memory(tmp_path):
    path = tmp_path / "long.wav"
    noise = decode_file(sample("noise_doing_the_dishes.wav"))
    with soundfile.SoundFile(path, "w", samplerate=16000, channels=1, subtype="PCM_16") as f:
        for _ in range(7):  # 7 × 95 s ≈ 11 min, 21 MB of PCM
            f.write(noise)
    tracemalloc.start()
    total = 0
    for block in iter_decoded_blocks(path):
        total += len(block)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert total / 16000 > 600
    assert peak < 2_000_000, f"peak {peak} bytes: decoding is not streamed"
