"""A :class:`VoiceServer` on its own event loop in a background thread, for tests, the benchmark
and the browser test (which drives a synchronous Playwright)."""

from __future__ import annotations

import asyncio
import os
import threading

from server.app import ServerConfig, VoiceServer
from server.models import ModelOptions, load_pipeline


def test_model_options() -> ModelOptions:
    """The shipped models; ``QUICKSILVER_TEST_LLM_MODEL`` may name another LM checkpoint folder."""
    return ModelOptions(llm_model=os.environ.get("QUICKSILVER_TEST_LLM_MODEL") or None)


class ServerThread:
    """Runs a server until :meth:`stop`; ``url`` is ``http://127.0.0.1:<port>``.

    Use :meth:`call` to run a coroutine function on the server's loop (to inspect its tasks).
    """

    def __init__(self, config: ServerConfig = ServerConfig(port=0), pipeline=None) -> None:
        self.config = config
        self.pipeline = pipeline or load_pipeline(test_model_options())
        self.loop = asyncio.new_event_loop()
        self.server = VoiceServer(self.pipeline, config)
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="quicksilver-test-server", daemon=True)
        self._error: BaseException | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.server.start())
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.server.close())
        self.loop.close()

    def start(self) -> "ServerThread":
        self._thread.start()
        if not self._ready.wait(60) or self._error is not None:
            raise RuntimeError(f"the test server did not start: {self._error!r}")
        return self

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def call(self, coro_fn, *args, timeout_s: float = 10.0):
        """Run ``coro_fn(*args)`` on the server loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro_fn(*args), self.loop).result(timeout_s)

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
