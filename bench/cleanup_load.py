"""Load test of the ``/cleanup`` websocket service: throughput and latency at several
concurrencies, batched on the shared LM versus one request at a time.

Each mode is a server in its own process (``quicksilver serve --port 0 --cleanup-batch N
--cleanup-workers W --cleanup-worker K``: batched, the default, N = 4 on W = 2 worker processes;
N = 8 on two threads of the server's process, the default before worker processes; one at a
time, N = 1 on one thread); all run at once and each level is measured on one, then at
once on the other, so a machine shared with other work loads both about alike (the load average
is recorded with each level). For each concurrency C, C clients on loopback each
hold one ``/cleanup`` connection and one request in flight (the next is sent when the answer
arrives), cycling through the Disfl-QA dev inputs, until ``--requests`` are answered. Latency is
measured at the client (request sent → ``cleanup.result`` received); throughput is answered
requests per second of wall time. A short warm-up precedes each level.

Run: ``python bench/cleanup_load.py [--concurrency 1 8 32] [--requests 300] [--out results.json]``.
Prints a table and writes the JSON results.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from websockets.asyncio.client import connect  # noqa: E402

from llm.data import load_disfl_qa  # noqa: E402
from load import ServerProcess, percentile  # noqa: E402

TARGET_RPS_AT_32 = 200
MODES = {"batched": (4, 2, "process"), "batched_threads": (8, 2, "thread"), "one_at_a_time": (1, 1, "thread")}
"""Mode → ``(--cleanup-batch, --cleanup-workers, --cleanup-worker)`` of the server; ``batched`` is
the default on a CPU."""


async def run_level(port: int, concurrency: int, requests: int, inputs: list[str]) -> dict:
    """``requests`` cleanups through ``concurrency`` connections; throughput and latency."""
    latencies_ms: list[float] = []
    errors: list[dict] = []
    counter = iter(range(requests))

    async def client(index: int) -> None:
        async with connect(f"ws://127.0.0.1:{port}/cleanup", ping_interval=None, open_timeout=30,
                           max_size=2**22) as ws:
            for n in counter:
                request_id = f"c{index}-{n}"
                sent = time.perf_counter()
                await ws.send(json.dumps({"type": "cleanup.request", "id": request_id,
                                          "text": inputs[n % len(inputs)]}))
                answer = json.loads(await asyncio.wait_for(ws.recv(), 120))
                if answer.get("type") != "cleanup.result" or answer.get("id") != request_id:
                    errors.append(answer)
                    continue
                latencies_ms.append((time.perf_counter() - sent) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(concurrency)))
    wall_s = time.perf_counter() - started
    return {
        "concurrency": concurrency,
        "requests": len(latencies_ms),
        "errors": len(errors),
        "wall_s": round(wall_s, 2),
        "throughput_rps": round(len(latencies_ms) / wall_s, 1),
        "latency_ms": {
            "p50": round(percentile(latencies_ms, 50), 1),
            "p99": round(percentile(latencies_ms, 99), 1),
            "mean": round(statistics.fmean(latencies_ms), 1),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests", type=int, default=300, help="answered requests per level (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=32, help="requests before each level (default: %(default)s)")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "cleanup_load.json"))
    args = parser.parse_args(argv)

    inputs = [pair.disfluent for pair in load_disfl_qa("dev")]
    results = {"inputs": "Disfl-QA dev (disfluent questions, file order)", "cpu_count": os.cpu_count(),
               "target": f">= {TARGET_RPS_AT_32} requests/s at concurrency 32 (batched)",
               "modes": {mode: {"cleanup_batch": MODES[mode][0], "cleanup_workers": MODES[mode][1],
                                "cleanup_worker": MODES[mode][2], "levels": []}
                         for mode in args.modes}}
    servers = {}
    try:
        for mode in args.modes:
            batch, workers, kind = MODES[mode]
            servers[mode] = ServerProcess(["--cleanup-batch", str(batch), "--cleanup-workers", str(workers),
                                           "--cleanup-worker", kind])
        for concurrency in args.concurrency:
            for mode, server in servers.items():
                asyncio.run(run_level(server.port, concurrency, args.warmup, inputs))
                level = asyncio.run(run_level(server.port, concurrency, args.requests, inputs))
                level["load_average_1min"] = round(os.getloadavg()[0], 2)
                results["modes"][mode]["levels"].append(level)
                print(f"{mode:>16}  C={concurrency:<3} {level['throughput_rps']:7.1f} req/s   "
                      f"p50 {level['latency_ms']['p50']:7.1f} ms   p99 {level['latency_ms']['p99']:7.1f} ms   "
                      f"errors {level['errors']}   load {level['load_average_1min']}", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    batched = {lv["concurrency"]: lv for lv in results["modes"].get("batched", {}).get("levels", [])}
    if 32 in batched:
        results["target_met"] = batched[32]["throughput_rps"] >= TARGET_RPS_AT_32
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
