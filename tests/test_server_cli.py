"""``quicksilver serve``: the command is registered, refuses bad limits before loading models, and
stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedOK

import quicksilver

ROOT = Path(__file__).resolve().parent.parent


def test_serve_is_registered_with_its_options(capsys):
    parser = quicksilver.build_parser()
    args = parser.parse_args(["serve", "--port", "0", "--token", "t", "--allow-origin", "http://a.example",
                              "--max-sessions", "4", "--idle-timeout", "30", "--max-interim-sessions", "2"])
    assert (args.host, args.port, args.token, args.allow_origin, args.max_sessions) == (
        "127.0.0.1", 0, "t", ["http://a.example"], 4)


def test_bad_limits_exit_2_without_loading_models_naming_each_bad_flag(capsys):
    assert quicksilver.main(["serve", "--max-sessions", "0"]) == 2
    assert capsys.readouterr().err == "quicksilver serve: error: --max-sessions must be ≥ 1, not 0\n"
    assert quicksilver.main(["serve", "--cleanup-batch", "0", "--cleanup-workers", "-1"]) == 2
    assert capsys.readouterr().err == ("quicksilver serve: error: --cleanup-batch must be ≥ 1, not 0; "
                                       "--cleanup-workers must be ≥ 1, not -1\n")


def _children(pid: int) -> set[int]:
    """Process ids whose parent is ``pid`` (from /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[1] == str(pid):
                found.add(int(entry))
    return found


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("worker", ["process", "thread"])
def test_sigterm_with_cleanups_in_flight_closes_with_going_away_and_exits_cleanly(worker):
    """A service manager's stop while batches run: the open /cleanup connection gets close code
    1001, the server exits 0 without a traceback or an abort (batches in flight finish, worker
    threads are joined, no worker process is restarted), and its worker processes end with it."""
    server = subprocess.Popen([sys.executable, str(ROOT / "quicksilver.py"), "serve", "--port", "0",
                               "--cleanup-worker", worker], stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        port, deadline = None, time.monotonic() + 180
        while port is None and time.monotonic() < deadline:
            line = server.stderr.readline()
            assert line, "the server exited before serving"
            match = re.search(r"serving on http://127\.0\.0\.1:(\d+)/", line)
            port = int(match.group(1)) if match else None
        workers = _children(server.pid)
        if worker == "process":
            assert len(workers) >= 2  # two cleanup workers (and multiprocessing's resource tracker)

        async def session() -> int:
            async with connect(f"ws://127.0.0.1:{port}/cleanup", open_timeout=30, ping_interval=None) as ws:
                await ws.send(json.dumps({"type": "cleanup.request", "id": "a", "text": "um hello there"}))
                assert json.loads(await asyncio.wait_for(ws.recv(), 60))["text"] == "Hello there."
                for n in range(20):
                    await ws.send(json.dumps({"type": "cleanup.request", "id": f"m{n}", "reasoning_effort": "medium",
                                              "text": "so um I was thinking that uh we could go to the the park"}))
                await asyncio.sleep(0.3)
                server.send_signal(signal.SIGTERM)
                with pytest.raises(ConnectionClosedOK):
                    while True:  # answers that made it out before the close, then the close
                        await asyncio.wait_for(ws.recv(), 30)
                return ws.close_code

        assert asyncio.run(session()) == 1001
        assert server.wait(60) == 0
        stderr = server.stderr.read()
        assert "stopped (SIGTERM)" in stderr
        assert "Traceback" not in stderr and "terminate called" not in stderr, stderr
        deadline = time.monotonic() + 15
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in workers if _running(pid)]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
