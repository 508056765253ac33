"""Load test of ``quicksilver serve``: N concurrent clients on loopback, each streaming a real
recording in real time; voice-to-voice latency, errors, server CPU and memory for each N.

The server runs as its own process (``quicksilver serve --port 0``), so its CPU time and RSS are
read from ``/proc/<pid>``. Each client streams the sample as 20 ms PCM16 frames at real-time pace,
then silence, and waits for its reply; clients start within ``--spread`` seconds of each other
(seeded random offsets). Voice-to-voice is measured at the client: from sending the sample at
the end of speech (the ``speech.stopped`` event's ``speech_end_s``) to the first reply audio
message; the server's own trace figure is reported beside it, and the part after the endpoint
(voice-to-voice less the hangover, which is a setting: 1.3 s here) as ``after_endpoint``.

Run: ``python bench/load.py [--clients 1 2 4 8] [--sample samples/jfk.wav] [--out results.json]``.
Prints a table and the JSON results; reports the largest N whose p95 voice-to-voice ≤ 1.5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from server.client import pcm16_of, stream_pcm  # noqa: E402

TARGET_P95_S = 1.5
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in [0, 100])."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


class ServerProcess:
    """``quicksilver serve`` in a child process, with CPU and RSS readings from /proc."""

    def __init__(self, extra_args: list[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "quicksilver.py"), "serve", "--port", "0", "--max-sessions", "64", *extra_args],
            cwd=ROOT, stderr=subprocess.PIPE, text=True,
        )
        self.port = None
        deadline = time.monotonic() + 300
        for line in self.process.stderr:
            match = re.search(r"serving on http://[^:]+:(\d+)/", line)
            if match:
                self.port = int(match.group(1))
                break
            if time.monotonic() > deadline:
                break
        if self.port is None:
            self.process.kill()
            raise RuntimeError("the server did not start")
        threading.Thread(target=lambda: [None for _ in self.process.stderr], daemon=True).start()  # drain logs
        self.peak_rss_mb = 0.0
        self._sampling = False

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime

    def rss_mb(self) -> float:
        match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{self.process.pid}/status").read_text())
        return int(match.group(1)) / 1024 if match else 0.0

    async def sample_rss(self) -> None:
        while True:
            self.peak_rss_mb = max(self.peak_rss_mb, self.rss_mb())
            await asyncio.sleep(0.2)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


async def run_level(server: ServerProcess, n: int, pcm: bytes, spread_s: float, seed: int, start: dict) -> dict:
    url = f"ws://127.0.0.1:{server.port}/ws"
    offsets = sorted(random.Random(seed + n).uniform(0, spread_s) for _ in range(n))

    async def client(offset: float):
        await asyncio.sleep(offset)
        return await stream_pcm(url, pcm, start=start, wait_reply_s=60)

    sampler = asyncio.create_task(server.sample_rss())
    server.peak_rss_mb = 0.0
    cpu0, wall0 = server.cpu_s(), time.monotonic()
    results = await asyncio.gather(*(client(o) for o in offsets), return_exceptions=True)
    cpu_s, wall_s = server.cpu_s() - cpu0, time.monotonic() - wall0
    sampler.cancel()

    v2v_client, v2v_server, errors, stages = [], [], [], {}
    for r in results:
        if isinstance(r, BaseException):
            errors.append(f"{type(r).__name__}: {r}")
            continue
        errors += [f"{e['code']}: {e['message']}" for e in r.of_type("error")]
        if r.voice_to_voice_s is None:
            errors.append("no reply audio")
        else:
            v2v_client.append(r.voice_to_voice_s)
        traces = r.of_type("turn.trace")
        for trace in traces:
            durations = trace["trace"]["durations"]
            for key, value in durations.items():
                if value is not None and key.endswith("_s"):
                    stages.setdefault(key, []).append(value)
            if durations.get("voice_to_voice_s") is not None and durations.get("endpoint_delay_s") is not None:
                stages.setdefault("after_endpoint_s", []).append(durations["voice_to_voice_s"] - durations["endpoint_delay_s"])
        if traces and traces[0]["trace"]["durations"].get("voice_to_voice_s") is not None:
            v2v_server.append(traces[0]["trace"]["durations"]["voice_to_voice_s"])
    return {
        "clients": n,
        "replies": len(v2v_client),
        "errors": errors,
        "v2v_client_p50_s": percentile(v2v_client, 50),
        "v2v_client_p95_s": percentile(v2v_client, 95),
        "v2v_server_p50_s": percentile(v2v_server, 50),
        "v2v_server_p95_s": percentile(v2v_server, 95),
        "v2v_client_s": [round(v, 3) for v in v2v_client],
        "after_endpoint_p50_s": percentile(stages.get("after_endpoint_s", []), 50),
        "after_endpoint_p95_s": percentile(stages.get("after_endpoint_s", []), 95),
        "stage_p50_s": {key: round(percentile(values, 50), 3) for key, values in stages.items()},
        "server_cpu_cores": round(cpu_s / wall_s, 2),
        "server_peak_rss_mb": round(server.peak_rss_mb, 1),
        "wall_s": round(wall_s, 1),
    }


def fmt(value: float | None) -> str:
    return "   –  " if value is None else f"{value * 1000:6.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8], help="N values (default: 1 2 4 8)")
    parser.add_argument("--sample", default=str(ROOT / "samples" / "jfk.wav"), help="recording each client streams")
    parser.add_argument("--spread", type=float, default=2.0, help="clients start within this many seconds")
    parser.add_argument("--min-silence-ms", type=int, default=1300,
                        help="endpoint hangover sent in session.start (default: %(default)s, so that jfk.wav, "
                        "with its 1.1 s pauses, is one utterance; 0 = the server's 700 ms)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the JSON results to this file too")
    parser.add_argument("--server-arg", action="append", default=[], help="extra argument for quicksilver serve")
    args = parser.parse_args(argv)

    pcm = pcm16_of(args.sample)
    start = {"voice": {"min_silence_ms": args.min_silence_ms}} if args.min_silence_ms else {}
    print(f"starting quicksilver serve … ({os.cpu_count()} CPU cores)", file=sys.stderr, flush=True)
    server = ServerProcess(args.server_arg)
    levels = []
    try:
        print(f"{'N':>3} {'replies':>7} {'errors':>6} {'v2v p50':>8} {'v2v p95':>8} {'srv p50':>8} {'srv p95':>8} "
              f"{'after ep p95':>12} {'CPU cores':>9} {'RSS MB':>7}   (ms; v2v at the client, srv = server trace)")
        for n in args.clients:
            level = asyncio.run(run_level(server, n, pcm, args.spread, args.seed, start))
            levels.append(level)
            print(f"{n:>3} {level['replies']:>7} {len(level['errors']):>6} {fmt(level['v2v_client_p50_s']):>8} "
                  f"{fmt(level['v2v_client_p95_s']):>8} {fmt(level['v2v_server_p50_s']):>8} "
                  f"{fmt(level['v2v_server_p95_s']):>8} {fmt(level['after_endpoint_p95_s']):>12} {level['server_cpu_cores']:>9} {level['server_peak_rss_mb']:>7}",
                  flush=True)
    finally:
        server.stop()
    within = [lv["clients"] for lv in levels if not lv["errors"] and lv["v2v_client_p95_s"] is not None
              and lv["v2v_client_p95_s"] <= TARGET_P95_S]
    summary = {
        "sample": Path(args.sample).name,
        "cpu_cores": os.cpu_count(),
        "target_p95_s": TARGET_P95_S,
        "largest_n_within_target": max(within) if within else None,
        "levels": levels,
    }
    print(f"largest N with p95 voice-to-voice ≤ {TARGET_P95_S} s and no errors: {summary['largest_n_within_target']}")
    print(json.dumps(summary, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
