"""``quicksilver run`` and ``quicksilver mic``: the voice pipeline on a recording or the microphone.

Exit codes: 0 done (also when the recording holds no speech), 1 unreadable or unsupported input,
2 bad command line, 3 a model failed to load, 4 no audio device / PortAudio, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from pathlib import Path

from llm.cli import EXIT_MODEL, add_llm_options, backend_from_args
from server.mqtt import add_mqtt_options, publishing, settings_from_args

EXIT_INPUT, EXIT_DEVICE = 1, 4


def register(subparsers) -> None:
    """Add the ``run`` and ``mic`` commands to the ``quicksilver`` parser."""
    run = subparsers.add_parser(
        "run",
        help="run the voice pipeline on a recording",
        description="Play a recording into the pipeline as if it were spoken: VAD → ASR → LM cleanup → "
        "LM reply → TTS. Prints each turn's transcript, cleaned transcript, reply and latencies.",
    )
    run.add_argument("file", help="WAV, FLAC, MP3, AIFF, OGG, … or headerless PCM16 with --raw-rate")
    run.add_argument("--out", default="reply.wav", help="WAV file for the reply audio (default: %(default)s)")
    run.add_argument("--realtime", action="store_true",
                     help="feed the file at real-time pace and play replies in real time (barge-in on); "
                     "default: as fast as possible, each reply finished before the recording continues")
    run.add_argument("--raw-rate", type=_positive_hz, metavar="HZ", help="sample rate of a headerless PCM16 LE mono file")
    run.add_argument("--channel", type=int, metavar="N", help="use channel N of a multi-channel file (default: average)")
    run.add_argument("--no-reply", action="store_true", help="transcribe only (no LM, no TTS)")
    _add_common(run)
    run.set_defaults(func=run_command)

    mic = subparsers.add_parser(
        "mic", help="talk to the assistant through the microphone and speaker",
        description="Live demo: microphone → pipeline → speaker, with barge-in. Needs PortAudio (libportaudio2). "
        "Use headphones: there is no echo cancellation, so over loudspeakers the assistant hears its own reply "
        "and interrupts itself.",
    )
    _add_common(mic)
    mic.set_defaults(func=mic_command)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object per pipeline event")
    p.add_argument("--reasoning-effort", choices=("low", "medium", "high"), default="low",
                   help="LM sampler effort for cleanup and reply (default: %(default)s)")
    add_llm_options(p)
    add_mqtt_options(p)
    p.add_argument("--asr-model", help="Whisper CTranslate2 folder or size name (default: bundled tiny.en)")
    p.add_argument("--tts-voice", help="Piper .onnx voice (default: bundled en_US-joe-medium)")
    p.add_argument("--coqui-model", metavar="DIR", help="use Coqui TTS with this local model folder instead of Piper")
    p.add_argument("--no-cleanup", action="store_true", help="skip LM transcript cleanup")
    p.add_argument("--min-silence-ms", type=int, default=700, help="endpoint hangover in ms (default: %(default)s)")
    p.add_argument("--complete-silence-ms", type=int, default=400,
                   help="shorter hangover after a pause whose transcript reads as a finished turn, live "
                        "sessions only; 0 = always --min-silence-ms (default: %(default)s)")
    p.add_argument("--vad-threshold", type=float, default=0.5, help="Silero speech probability threshold")
    p.add_argument("--trace-exporter", choices=("none", "console", "otlp"), default="none",
                   help="export OpenTelemetry spans per turn (default: %(default)s)")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _config(args, turn_taking: str, reply: bool):
    from audio.vad import VadConfig
    from voice.asr import AsrConfig
    from voice.pipeline import PipelineConfig

    if args.min_silence_ms < 100 or not 0.0 < args.vad_threshold < 1.0 or args.complete_silence_ms < 0:
        raise ValueError("--min-silence-ms must be ≥ 100, --complete-silence-ms ≥ 0 and --vad-threshold in (0, 1)")
    return PipelineConfig(
        vad=VadConfig(threshold=args.vad_threshold, min_silence_ms=args.min_silence_ms,
                      complete_silence_ms=args.complete_silence_ms or None),
        asr=AsrConfig(model=args.asr_model),
        turn_taking=turn_taking,
        reply=reply,
        cleanup=not args.no_cleanup,
        reasoning_effort=args.reasoning_effort,
    )


def _load_pipeline(args, config):
    """Load ASR, TTS and LM; returns the pipeline or raises ``_ModelLoadError``."""
    from voice.asr import WhisperRecognizer
    from voice.pipeline import VoicePipeline
    from voice.tracing import make_tracer
    from voice.tts import CoquiSynthesizer, PiperSynthesizer

    try:
        _say("loading speech recognition …")
        recognizer = WhisperRecognizer(config.asr)
        lm = synthesizer = None
        if config.reply:
            _say("loading speech synthesis …")
            synthesizer = CoquiSynthesizer(args.coqui_model) if args.coqui_model else PiperSynthesizer(args.tts_voice)
            _say(f"loading language model ({args.llm}) …")
            lm = backend_from_args(args)
        tracer = make_tracer(args.trace_exporter) if args.trace_exporter != "none" else None
        pipeline = VoicePipeline(lm, synthesizer, recognizer, config, tracer)
        pipeline.warm_up()
    except Exception as exc:  # noqa: BLE001 - any load failure is reported the same way
        raise _ModelLoadError(f"{type(exc).__name__}: {exc}") from exc
    return pipeline


def _positive_hz(value: str) -> int:
    """argparse type of ``--raw-rate``: a whole number of Hz above 0."""
    try:
        hz = int(value)
    except ValueError:
        hz = 0
    if hz <= 0:
        raise argparse.ArgumentTypeError(f"expected a sample rate in Hz above 0, e.g. 16000 (got {value!r})")
    return hz


class _ModelLoadError(Exception):
    pass


async def _run_session(session, args, kind: str):
    """``session.run()``, publishing its events on MQTT when ``--mqtt`` is given (a broker that is
    down or goes away never stops the session; the published and dropped counts are printed)."""
    settings = settings_from_args(args)
    if settings is None:
        return await session.run()
    session_id = f"{kind}-{uuid.uuid4().hex[:8]}"
    _say(f"mqtt: publishing to {settings.url} as session {session_id}")
    async with publishing(session, settings, session_id) as bus:
        traces = await session.run()
    _say(bus.summary())
    return traces


def run_command(args) -> int:
    """``quicksilver run FILE``."""
    from audio.errors import AudioError
    from audio.decode import iter_decoded_blocks
    from audio.sinks import WavFileSink
    from audio.sources import FileSource

    path = Path(args.file)
    try:
        next(iter_decoded_blocks(path, raw_rate_hz=args.raw_rate, channel=args.channel), None)  # fail fast on bad input
        config = _config(args, "barge_in" if args.realtime else "wait", reply=not args.no_reply)
        settings_from_args(args)  # a bad --mqtt URL fails before the models load
        pipeline = _load_pipeline(args, config)
    except AudioError as exc:
        _say(f"error: {exc}")
        return EXIT_INPUT
    except ValueError as exc:
        _say(f"error: {exc}")
        return 2
    except _ModelLoadError as exc:
        _say(f"error: a model failed to load: {exc}")
        return EXIT_MODEL
    source = FileSource(path, realtime=args.realtime, raw_rate_hz=args.raw_rate,
                        tail_silence_ms=config.vad.min_silence_ms + 200, channel=args.channel)
    sink = WavFileSink(args.out, pipeline.synthesizer.sample_rate_hz, realtime=args.realtime) if config.reply else None
    session = pipeline.session(source, sink)
    report = TurnReport(json_lines=args.json)
    session.subscribe(report.on_event)
    _say(f"{'playing' if args.realtime else 'processing'} {path} …")
    try:
        traces = asyncio.run(_run_session(session, args, "run"))
    except AudioError as exc:
        _say(f"error: {exc}")
        return EXIT_INPUT
    if not args.json:
        if not traces:
            print(f"no speech detected in {path}")
        elif sink is not None:
            print(f"reply audio: {args.out} ({sink.samples_written / sink.sample_rate_hz:.1f} s)")
        if traces and not args.realtime:
            print("(the recording was processed faster than real time, each reply finished before it went on; "
                  "--realtime gives the latencies a live speaker would see)")
    return 0


def mic_command(args) -> int:
    """``quicksilver mic``: microphone → pipeline → speaker, barge-in on."""
    from audio.device import default_device
    from audio.errors import AudioDeviceError
    from audio.sinks import SpeakerSink
    from audio.sources import MicrophoneSource

    try:
        default_device("input")
        default_device("output")
    except AudioDeviceError as exc:
        _say(f"error: {exc}. `quicksilver mic` needs a microphone and a speaker; "
             "to try the pipeline without them: quicksilver run samples/jfk.wav")
        return EXIT_DEVICE
    try:
        settings_from_args(args)
    except ValueError as exc:
        _say(f"error: {exc}")
        return 2
    try:
        pipeline = _load_pipeline(args, _config(args, "barge_in", reply=True))
        sink = SpeakerSink(pipeline.synthesizer.sample_rate_hz)
    except AudioDeviceError as exc:
        _say(f"error: {exc}")
        return EXIT_DEVICE
    except _ModelLoadError as exc:
        _say(f"error: a model failed to load: {exc}")
        return EXIT_MODEL
    session = pipeline.session(MicrophoneSource(), sink)
    session.subscribe(TurnReport(json_lines=args.json).on_event)
    _say("listening — speak; Ctrl-C to stop")
    try:
        asyncio.run(_run_session(session, args, "mic"))
    except AudioDeviceError as exc:
        _say(f"error: {exc}")
        return EXIT_DEVICE
    return 0


class TurnReport:
    """Prints events for a person (one block per turn with a latency table) or as JSON lines."""

    def __init__(self, json_lines: bool = False, out=None) -> None:
        self.json_lines = json_lines
        self.out = out or sys.stdout

    def on_event(self, event) -> None:
        from voice.events import event_to_dict

        if self.json_lines:
            print(json.dumps(event_to_dict(event), ensure_ascii=False, default=str), file=self.out, flush=True)
            return
        kind = event.type
        line = {
            "final": lambda: f"\nturn {event.turn_id}\n  heard:    {event.text}",
            "rejected": lambda: f"\n(ignored a sound: {event.reason})",
            "cleaned": lambda: f"  cleaned:  {event.text}",
            "reply": lambda: f"  reply:    {event.text}",
            "interrupted": lambda: f"  (interrupted: you spoke over the reply of turn {event.turn_id})",
            "error": lambda: f"  error in {event.stage}: {event.message}",
            "trace": lambda: latency_table(event.trace),
        }.get(kind)
        if line is not None:
            print(line(), file=self.out, flush=True)


LATENCY_ROWS = (
    ("voice-to-voice", "voice_to_voice_s", "end of speech → first reply audio"),
    ("endpointing", "endpoint_delay_s", "end of speech → endpoint (VAD hangover)"),
    ("asr final", "endpoint_to_asr_final_s", "endpoint → final transcript (<0: ready before)"),
    ("cleanup", "cleanup_s", "LM transcript cleanup"),
    ("llm first draft", "llm_first_draft_s", "LM reply, first draft"),
    ("llm reply", "llm_s", "LM reply, complete"),
    ("first audio", "reply_to_first_audio_s", "first sentence → first audio"),
    ("tts + playback", "tts_s", "synthesis and playback"),
)


def latency_table(trace: dict) -> str:
    """The latency rows of one turn's trace (``TurnTrace.to_dict()``), in milliseconds."""
    durations = trace["durations"]
    rows = ["  latency:"]
    for label, key, meaning in LATENCY_ROWS:
        value = durations.get(key)
        if value is not None:
            rows.append(f"    {label:<16}{value * 1000:8.0f} ms   {meaning}")
    return "\n".join(rows)
