"""``quicksilver serve``: the websocket voice server and its browser client.

Exit codes: 0 stopped, 2 bad command line, 3 a model failed to load, 5 the address is in use.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from llm.cli import EXIT_MODEL, add_llm_options
from server.mqtt import add_mqtt_options, settings_from_args

EXIT_ADDRESS = 5


def register(subparsers) -> None:
    """Add the ``serve`` command to the ``quicksilver`` parser."""
    from server.models import CLEANUP_WORKER_CHOICES

    p = subparsers.add_parser(
        "serve", help="run the websocket voice server and browser client",
        description="Serve voice sessions over websockets (/ws, protocol in docs/protocol.md) and the "
        "browser client (/), with /healthz and /metrics. Binds loopback by default.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=8765, help="port (default: %(default)s; 0 = any free port)")
    p.add_argument("--max-sessions", type=int, default=16, help="open sessions at most (default: %(default)s)")
    p.add_argument("--idle-timeout", type=float, default=60.0, metavar="S",
                   help="close a session after S seconds without traffic (default: %(default)s)")
    p.add_argument("--max-interim-sessions", type=int, default=1, metavar="N",
                   help="send interim transcripts only while at most N sessions are open (default: %(default)s)")
    p.add_argument("--token", default=os.environ.get("QUICKSILVER_TOKEN"),
                   help="shared secret required on /ws and /metrics (default: $QUICKSILVER_TOKEN)")
    p.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="accept websocket connections from this browser origin too (repeatable)")
    p.add_argument("--cleanup-batch", type=int, default=4, metavar="N",
                   help="run at most N waiting cleanups as one batch on the LM (1 = one at a time; "
                   "default: %(default)s)")
    p.add_argument("--cleanup-workers", type=int, default=2, metavar="N",
                   help="run up to N cleanup batches at once, each on its own copy of the LM "
                   "(default: %(default)s)")
    p.add_argument("--cleanup-worker", choices=CLEANUP_WORKER_CHOICES, default="auto",
                   help="where those copies run: a process each, or threads of the server's process "
                   "(default: auto = processes for the local LM on the CPU)")
    add_llm_options(p)
    add_mqtt_options(p)
    p.add_argument("--asr-model", help="Whisper CTranslate2 folder or size name (default: bundled tiny.en)")
    p.add_argument("--tts-voice", help="Piper .onnx voice (default: bundled en_US-joe-medium)")
    p.set_defaults(func=serve_command)


def serve_command(args) -> int:
    from server.app import ServerConfig, VoiceServer
    from server.models import ModelOptions, load_pipeline
    from server.session import SessionLimits

    limits = [("--max-sessions", args.max_sessions, args.max_sessions >= 1, "≥ 1"),
              ("--max-interim-sessions", args.max_interim_sessions, args.max_interim_sessions >= 0, "≥ 0"),
              ("--idle-timeout", args.idle_timeout, args.idle_timeout > 0, "> 0"),
              ("--port", args.port, 0 <= args.port < 65536, "in [0, 65535]"),
              ("--cleanup-batch", args.cleanup_batch, args.cleanup_batch >= 1, "≥ 1"),
              ("--cleanup-workers", args.cleanup_workers, args.cleanup_workers >= 1, "≥ 1")]
    bad = [f"{flag} must be {rule}, not {value}" for flag, value, ok, rule in limits if not ok]
    if bad:
        print(f"quicksilver serve: error: {'; '.join(bad)}", file=sys.stderr)
        return 2
    try:
        mqtt = settings_from_args(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("loading models …", file=sys.stderr, flush=True)
    try:
        pipeline = load_pipeline(ModelOptions(args.llm, args.llm_model, args.llm_base_url, args.device,
                                              args.llm_quantize, args.asr_model, args.tts_voice, args.cleanup_batch,
                                              args.cleanup_workers, args.cleanup_worker))
    except Exception as exc:  # noqa: BLE001 - any load failure is reported the same way
        print(f"error: a model failed to load: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_MODEL
    config = ServerConfig(host=args.host, port=args.port, max_sessions=args.max_sessions, token=args.token or None,
                          max_interim_sessions=args.max_interim_sessions,
                          allowed_origins=tuple(args.allow_origin), limits=SessionLimits(idle_timeout_s=args.idle_timeout),
                          mqtt=mqtt)

    async def main() -> None:
        server = VoiceServer(pipeline, config)
        await server.start()
        # SIGTERM (a service manager's stop) ends the server as Ctrl-C does: connections get a
        # close frame (1001 going away) before the process exits
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
        print(f"serving on http://{args.host}:{server.port}/ (websocket: ws://{args.host}:{server.port}/ws, "
              f"cleanup: ws://{args.host}:{server.port}/cleanup)", file=sys.stderr, flush=True)
        if mqtt is not None:
            print(f"MQTT: {mqtt.url} (events under {mqtt.prefix}/<session>/, cleanup on "
                  "quicksilver/cleanup/request)", file=sys.stderr, flush=True)
        await server.serve_forever()

    try:
        asyncio.run(main())
    except asyncio.CancelledError:
        print("stopped (SIGTERM)", file=sys.stderr)
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return EXIT_ADDRESS
    finally:
        pipeline.close()  # batches in flight finish, worker threads and processes end
    return 0
