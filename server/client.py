"""A Python client of the ``/ws`` protocol: stream a recording as if spoken, collect the events.

Used by the protocol tests and ``bench/load.py``; also a reference for other clients::

    result = asyncio.run(stream_file("ws://127.0.0.1:8765/ws", "samples/jfk.wav"))
    print(result.final_text, result.voice_to_voice_s)
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

FRAME_MS = 20


@dataclass
class SessionResult:
    """What a client saw during one session.

    Attributes:
        events: every JSON event, in arrival order, each with ``_t`` (client monotonic seconds).
        audio_bytes: reply audio received (binary messages).
        first_audio_t: arrival time of the first binary message (monotonic), or ``None``.
        speech_end_sent_t: when the sample at the first turn's ``speech_end_s`` was sent.
        close_code: the close code the server sent.
    """

    events: list[dict] = field(default_factory=list)
    audio_bytes: int = 0
    audio_messages: int = 0
    first_audio_t: float | None = None
    speech_end_sent_t: float | None = None
    close_code: int | None = None

    def of_type(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["type"] == kind]

    @property
    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    @property
    def final_text(self) -> str:
        return " ".join(e["text"] for e in self.of_type("transcript.final"))

    @property
    def voice_to_voice_s(self) -> float | None:
        """Client-side voice-to-voice of the first turn: sending the end of speech → first reply
        audio arriving."""
        if self.first_audio_t is None or self.speech_end_sent_t is None:
            return None
        return self.first_audio_t - self.speech_end_sent_t


def pcm16_of(path: str | Path, sample_rate_hz: int = 16000) -> bytes:
    """A mono recording at ``sample_rate_hz`` as PCM16 LE bytes (resampled with soxr if needed)."""
    import soxr

    data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    mono = data.mean(axis=1)
    if rate != sample_rate_hz:
        mono = soxr.resample(mono, rate, sample_rate_hz)
    return (np.clip(mono, -1, 1) * 32767).astype("<i2").tobytes()


async def stream_pcm(
    url: str,
    pcm: bytes,
    *,
    sample_rate_hz: int = 16000,
    start: dict | None = None,
    realtime: bool = True,
    tail_silence_s: float = 1.5,
    wait_reply_s: float = 60.0,
    headers: dict | None = None,
    ping_interval_s: float | None = 20,
) -> SessionResult:
    """Open a session, send ``pcm`` in 20 ms frames (real-time pace when ``realtime``), then
    silence, wait until the first turn's reply is over (``turn.trace`` or ``transcript.rejected``)
    or ``wait_reply_s`` passes, send ``session.end`` and read until the server closes."""
    result = SessionResult()
    frame_bytes = sample_rate_hz * FRAME_MS // 1000 * 2
    silence = bytes(int(tail_silence_s * sample_rate_hz) * 2)
    audio = pcm + silence
    sent_at: list[float] = []  # wall time of each frame
    turn_over = asyncio.Event()

    async with connect(url, additional_headers=headers, max_size=2**22, open_timeout=30, close_timeout=5,
                       ping_interval=ping_interval_s) as ws:
        await ws.send(json.dumps({"type": "session.start", "sample_rate": sample_rate_hz, "format": "pcm16",
                                  **(start or {})}))

        async def receive() -> None:
            try:
                await read_all()
            except ConnectionClosed:
                pass
            finally:
                turn_over.set()

        async def read_all() -> None:
            async for message in ws:
                now = time.monotonic()
                if isinstance(message, bytes):
                    result.audio_bytes += len(message)
                    result.audio_messages += 1
                    if result.first_audio_t is None:
                        result.first_audio_t = now
                    continue
                event = json.loads(message)
                event["_t"] = now
                result.events.append(event)
                if event["type"] == "speech.stopped" and result.speech_end_sent_t is None:
                    index = int(event["speech_end_s"] * 1000 / FRAME_MS)
                    if sent_at:
                        result.speech_end_sent_t = sent_at[min(index, len(sent_at) - 1)]
                if event["type"] in ("turn.trace", "transcript.rejected") or (
                        event["type"] == "error" and event.get("code") == "server_full"):
                    turn_over.set()

        receiver = asyncio.create_task(receive())
        started = time.monotonic()
        for i, offset in enumerate(range(0, len(audio), frame_bytes)):
            if realtime:
                delay = started + i * FRAME_MS / 1000 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            sent_at.append(time.monotonic())
            try:
                await ws.send(audio[offset : offset + frame_bytes])
            except Exception:  # noqa: BLE001 - the server closed; the receiver has the reason
                break
            if receiver.done():
                break
        try:
            await asyncio.wait_for(turn_over.wait(), wait_reply_s)
        except TimeoutError:
            pass
        try:
            await ws.send(json.dumps({"type": "session.end"}))
        except Exception:  # noqa: BLE001
            pass
        try:
            await asyncio.wait_for(receiver, 60)
        except TimeoutError:
            receiver.cancel()
        result.close_code = ws.close_code
    return result


async def stream_file(url: str, path: str | Path, **kwargs) -> SessionResult:
    """:func:`stream_pcm` of a recording at 16 kHz."""
    return await stream_pcm(url, pcm16_of(path), **kwargs)
