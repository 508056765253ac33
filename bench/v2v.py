"""Voice-to-voice latency benchmark: the clean samples played in real time through the pipeline.

Each recording is fed at real-time pace (``FileSource(realtime=True)``) and the reply "plays" in
real time (``WavFileSink(realtime=True)``), so every timestamp is what a live user would see.
Printed and written as JSON: p50/p95 of

- voice-to-voice: true end of speech → first reply audio (includes the VAD hangover),
- endpoint delay: true end of speech → endpoint (the hangover: ``complete_silence_ms`` when the
  transcript at the pause read as a finished turn, else ``min_silence_ms``),
- endpoint → ASR final (negative: the final was ready before the endpoint confirmed),
- first sentence to TTS → first audio,

and the real-time factors (processing time / audio time) of the ASR final decodes and of TTS.

    python bench/v2v.py                       # 3 rounds over the clean samples
    python bench/v2v.py --rounds 1 --json-out /tmp/v2v.json
    python bench/v2v.py --sweep-hangover      # VAD hangover vs. turns and WER (no LM)
    python bench/v2v.py --complete-silence-ms 0   # no early endpoint: always the full hangover
    python bench/v2v.py --sweep-early-endpoint --samples silero_en_60s.wav jfk.wav …   # where it splits

Not a test: figures depend on the machine (the issue's target: p50 ≤ 600 ms on a 2-core CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llm.cli import add_llm_options, backend_from_args  # noqa: E402

CLEAN = ["jfk.wav", "english_one_two_three.wav", "goforward_16k_s16le.raw", "LDC93S1_8k_mono.wav"]


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile ``q`` in [0, 100]; ``None`` for no values."""
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summarize(values: list[float]) -> dict:
    return {"n": len(values), "p50": percentile(values, 50), "p95": percentile(values, 95),
            "mean": statistics.fmean(values) if values else None}


async def play(pipeline, name: str, raw_rate_hz: int | None, out_dir: Path):
    from audio.sinks import WavFileSink
    from audio.sources import FileSource

    source = FileSource(ROOT / "samples" / name, realtime=True, raw_rate_hz=raw_rate_hz,
                        tail_silence_ms=pipeline.config.vad.min_silence_ms + 1500)
    sink = WavFileSink(out_dir / f"{Path(name).stem}.reply.wav", pipeline.synthesizer.sample_rate_hz, realtime=True)
    return await pipeline.session(source, sink).run()


def run_benchmark(args) -> dict:
    from voice.pipeline import PipelineConfig, VoicePipeline
    from voice.asr import WhisperRecognizer
    from voice.tts import PiperSynthesizer
    from audio.vad import VadConfig

    refs = json.loads((ROOT / "samples" / "references.json").read_text())
    config = PipelineConfig(turn_taking="barge_in", reasoning_effort=args.reasoning_effort,
                            cleanup=not args.no_cleanup, vad=VadConfig(min_silence_ms=args.min_silence_ms,
                                                                       complete_silence_ms=args.complete_silence_ms or None))
    started = time.perf_counter()
    pipeline = VoicePipeline(backend_from_args(args),
                             PiperSynthesizer(), WhisperRecognizer(config.asr), config)
    pipeline.warm_up()
    load_s = time.perf_counter() - started
    load_before = os.getloadavg()
    traces = []
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            for name in args.samples:
                for trace in asyncio.run(play(pipeline, name, refs[name].get("raw_rate_hz"), Path(tmp))):
                    d = trace.durations()
                    traces.append({"round": round_index, "sample": name, **trace.to_dict()})
                    v2v = d["voice_to_voice_s"]
                    print(f"round {round_index} {name:28} turn {trace.turn_id}: voice-to-voice "
                          f"{'—' if v2v is None else f'{v2v * 1000:.0f} ms'}, hangover {trace.hangover_s * 1000:.0f} ms"
                          f"{', speculative' if trace.speculative else ''}{' (interrupted)' if trace.interrupted else ''}",
                          file=sys.stderr)

    def collect(key):
        return [t["durations"][key] for t in traces if t["durations"][key] is not None]

    asr_audio = sum(t["asr_audio_s"] for t in traces)
    tts_audio = sum(t["tts_audio_s"] for t in traces)
    return {
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": _cpus(),
                    "load_average_1_5_15_min": {"before": load_before, "after": os.getloadavg()}},
        "settings": {"rounds": args.rounds, "samples": args.samples, "llm": args.llm, "reasoning_effort": args.reasoning_effort,
                     "cleanup": not args.no_cleanup, "min_silence_ms": args.min_silence_ms,
                     "complete_silence_ms": args.complete_silence_ms, "pause_ms": config.vad.pause_ms, "model_load_s": load_s},
        "voice_to_voice_s": summarize(collect("voice_to_voice_s")),
        "endpoint_delay_s": summarize(collect("endpoint_delay_s")),
        "asr_s": summarize(collect("asr_s")),
        "speculative_turns": sum(t["speculative"] for t in traces),
        "endpoint_to_asr_final_s": summarize(collect("endpoint_to_asr_final_s")),
        "reply_to_first_audio_s": summarize(collect("reply_to_first_audio_s")),
        "cleanup_s": summarize(collect("cleanup_s")),
        "llm_s": summarize(collect("llm_s")),
        "asr_rtf": sum(t["asr_decode_s"] for t in traces) / asr_audio if asr_audio else None,
        "tts_rtf": sum(t["tts_synth_s"] for t in traces) / tts_audio if tts_audio else None,
        "turns": traces,
    }


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


def sweep_hangover(args) -> dict:
    """VAD hangover vs. number of utterances and WER of the concatenated finals (ASR only)."""
    from audio.sources import FileSource
    from audio.vad import VadConfig
    from voice.asr import WhisperRecognizer
    from voice.events import FinalTranscript
    from voice.metrics import word_error_rate
    from voice.pipeline import PipelineConfig, VoicePipeline

    refs = json.loads((ROOT / "samples" / "references.json").read_text())
    recognizer = WhisperRecognizer()
    rows = []
    for ms in (300, 500, 700, 900, 1200):
        config = PipelineConfig(reply=False, turn_taking="wait", interims=False, vad=VadConfig(min_silence_ms=ms))
        for name in args.samples:
            source = FileSource(ROOT / "samples" / name, raw_rate_hz=refs[name].get("raw_rate_hz"), tail_silence_ms=ms + 200)
            session = VoicePipeline(None, None, recognizer, config).session(source)
            finals = []
            session.subscribe(lambda e: finals.append(e.text) if isinstance(e, FinalTranscript) else None)
            traces = asyncio.run(session.run())
            text = " ".join(finals)
            rows.append({"min_silence_ms": ms, "sample": name, "utterances": len(traces),
                         "wer": word_error_rate(refs[name]["text"], text), "text": text})
            print(f"{ms:5d} ms  {name:28} utterances {len(traces)}  WER {rows[-1]['wer']:.2f}  {text}", file=sys.stderr)
    return {"hangover_sweep": rows}


def sweep_early_endpoint(args) -> dict:
    """Early-endpoint hangover (``complete_silence_ms``) vs. where the utterances are cut: the
    detector run over each sample, the transcript decoded at every pause as the pipeline does, and
    the resulting utterances' finals (ASR only, not paced, so decodes never arrive late)."""
    import numpy as np

    from audio.decode import decode_file
    from audio.frames import AudioFrame
    from audio.vad import EndpointDetector, SpeechEnd, SpeechPause, VadConfig
    from voice.asr import WhisperRecognizer, rejection_reason
    from voice.endpointing import reads_as_complete

    refs = json.loads((ROOT / "samples" / "references.json").read_text())
    recognizer = WhisperRecognizer()
    rows = []
    for ms in (None, 300, 400, 500):
        for name in args.samples:
            ref = refs.get(name, {})
            audio = decode_file(ROOT / "samples" / name, raw_rate_hz=ref.get("raw_rate_hz") if isinstance(ref, dict) else None)
            audio = np.concatenate([audio, np.zeros(2 * 16000, np.int16)])
            detector = EndpointDetector(VadConfig(complete_silence_ms=ms))
            cuts = []
            for i in range(0, len(audio), 512):
                for event in detector.process(AudioFrame(audio[i : i + 512], 16000, i / 16000)):
                    if isinstance(event, SpeechPause):
                        hyp = recognizer.decode(audio[int(event.start_s * 16000) : i + 512])
                        if rejection_reason(hyp) is None and reads_as_complete(hyp.text):
                            detector.end_early(event.speech_end_s)
                    elif isinstance(event, SpeechEnd):
                        hyp = recognizer.decode(audio[int(event.start_s * 16000) : int(event.end_s * 16000)])
                        cuts.append({"hangover_ms": round(event.hangover_s * 1000), "text": hyp.text})
            rows.append({"complete_silence_ms": ms, "sample": name, "utterances": len(cuts), "cuts": cuts})
            print(f"{ms or '—':>5} ms  {name:28} utterances {len(cuts)}  " + " | ".join(
                f"[{c['hangover_ms']}] {c['text']}" for c in cuts), file=sys.stderr)
    return {"early_endpoint_sweep": rows}


def print_summary(result: dict) -> None:
    def ms(v):
        return "—" if v is None else f"{v * 1000:7.0f} ms"

    print(f"{'metric':28}{'p50':>12}{'p95':>12}{'n':>5}")
    for key, label in (("voice_to_voice_s", "voice-to-voice"), ("endpoint_delay_s", "speech end → endpoint"),
                       ("asr_s", "ASR final decode"), ("endpoint_to_asr_final_s", "endpoint → ASR final"),
                       ("reply_to_first_audio_s", "reply text → first audio"), ("cleanup_s", "LM cleanup"), ("llm_s", "LM reply")):
        s = result[key]
        print(f"{label:28}{ms(s['p50']):>12}{ms(s['p95']):>12}{s['n']:>5}")
    print(f"ASR real-time factor {result['asr_rtf']:.3f}   TTS real-time factor {result['tts_rtf']:.3f}   "
          f"speculative turns {result['speculative_turns']}/{result['voice_to_voice_s']['n']}   "
          f"load average {result['machine']['load_average_1_5_15_min']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--samples", nargs="+", default=CLEAN)
    p.add_argument("--json-out", default=str(ROOT / "bench" / "results" / "v2v.json"))
    p.add_argument("--reasoning-effort", default="low", choices=("low", "medium", "high"))
    p.add_argument("--no-cleanup", action="store_true")
    p.add_argument("--min-silence-ms", type=int, default=700)
    p.add_argument("--complete-silence-ms", type=int, default=400, help="0 = no early endpoint")
    add_llm_options(p)
    p.add_argument("--sweep-hangover", action="store_true", help="VAD hangover sweep (ASR only, no LM)")
    p.add_argument("--sweep-early-endpoint", action="store_true",
                   help="complete_silence_ms sweep: where utterances are cut (ASR only, no LM)")
    args = p.parse_args(argv)
    sweep = args.sweep_hangover or args.sweep_early_endpoint
    if args.sweep_early_endpoint:
        result = sweep_early_endpoint(args)
    else:
        result = sweep_hangover(args) if args.sweep_hangover else run_benchmark(args)
    if not sweep:
        print_summary(result)
    out = Path(args.json_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
