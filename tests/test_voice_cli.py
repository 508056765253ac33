"""``quicksilver run`` / ``quicksilver mic``: output for a person or as JSON, exit codes, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest_voice import ROOT, sample


def quicksilver(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "quicksilver.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_run_transcribes_raw_pcm_as_json_lines():
    done = quicksilver("run", str(sample("goforward_16k_s16le.raw")), "--raw-rate", "16000", "--no-reply", "--json")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    types = [e["type"] for e in events]
    assert types[0] == "speech_started" and "final" in types and types[-1] == "trace"
    final = next(e for e in events if e["type"] == "final")
    assert final["text"].lower().startswith("go forward")


@pytest.mark.slow
def test_run_prints_each_turn_and_writes_the_reply(tmp_path):
    out = tmp_path / "reply.wav"
    done = quicksilver("run", str(sample("goforward_16k_s16le.raw")), "--raw-rate", "16000", "--out", str(out),
                       timeout=600)  # loads torch and the LM: ≈18 s idle, minutes on a saturated 2-core machine
    assert done.returncode == 0, done.stderr
    for label in ("heard:", "cleaned:", "reply:", "latency:", "voice-to-voice", "reply audio:"):
        assert label in done.stdout
    assert out.stat().st_size > 44


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda d: d / "missing.wav", "no such file"),
        (lambda d: (d / "zero.wav").write_bytes(b"") or d / "zero.wav", "empty (0 bytes)"),
        (lambda d: (d / "notes.mp3").write_text("not audio") or d / "notes.mp3", "error:"),
        (lambda d: sample("goforward_16k_s16le.raw"), "--raw-rate"),
        (lambda d: d, "is a directory"),
    ],
    ids=["missing", "zero-length", "not-audio", "raw-without-rate", "directory"],
)
def test_bad_input_exits_1_with_a_message_and_no_traceback(tmp_path, make, message):
    done = quicksilver("run", str(make(tmp_path)), "--no-reply", timeout=60)
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_raw_rate_of_zero_is_a_command_line_error():
    done = quicksilver("run", str(sample("goforward_16k_s16le.raw")), "--raw-rate", "0", "--no-reply", timeout=60)
    assert done.returncode == 2
    assert "--raw-rate: expected a sample rate in Hz above 0" in done.stderr and "Traceback" not in done.stderr


def test_noise_prints_no_speech_and_exits_0():
    done = quicksilver("run", str(sample("empty_header_only.wav")), "--no-reply")
    assert done.returncode == 0 and "no speech detected" in done.stdout


def test_mic_without_audio_device_exits_4_with_a_message():
    done = quicksilver("mic", timeout=60)
    assert done.returncode == 4
    assert "quicksilver mic` needs a microphone" in done.stderr and "Traceback" not in done.stderr


def test_a_model_that_cannot_load_exits_3(tmp_path):
    done = quicksilver("run", str(sample("jfk.wav")), "--no-reply", "--asr-model", str(tmp_path / "no-model"), timeout=60)
    assert done.returncode == 3
    assert "a model failed to load" in done.stderr and "Traceback" not in done.stderr
