"""Cleanup workers in child processes: one copy of the LM each, off the server's GIL.

On a CPU a small denoiser's forward pass is many short kernels with Python between them;
two threads of one process contend for the GIL and for the intra-op thread pool, so two
single-threaded *processes* get more out of two cores (``bench/cleanup_load.py``). The
server's :class:`server.models.BatchingLanguageModel` hands each batch to a
:class:`CleanupProcess` as it would to an in-process model.

The child is started with the ``spawn`` method (the server runs threads, which ``fork``
must not copy), loads the LM with :func:`llm.load_backend`, and answers
``("cleanup_batch", texts, effort)`` messages over a :func:`multiprocessing.Pipe`. While it
works on a batch it sends a heartbeat every :data:`HEARTBEAT_S`, so the parent tells a long
batch (``high`` effort on long texts: tens of seconds) from a child that stopped.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.util  # its exit handler is registered before ours (below)
import threading
import time
from collections.abc import Sequence

from llm.backend import LanguageModelError

log = logging.getLogger(__name__)

#: Seconds between the child's heartbeats while it works on a batch.
HEARTBEAT_S = 1.0
#: A busy child silent this long (stopped, frozen) is killed and its batch failed.
SILENCE_LIMIT_S = 15.0
#: Longest wait for a child to load its LM.
LOAD_LIMIT_S = 180.0
#: Exception types a child's error is raised as in the parent; any other becomes WorkerError.
_ERRORS = {"ValueError": ValueError, "TypeError": TypeError}


_exiting = False


@atexit.register
def _note_exit() -> None:
    # registered after multiprocessing's own exit handler, so it runs before that handler
    # terminates the children: a child ended by the exit is not restarted
    global _exiting
    _exiting = True


class WorkerError(LanguageModelError):
    """A cleanup worker process failed to load its model, died or stopped answering mid-batch."""


def _serve(conn, load_kwargs: dict, threads: int) -> None:
    """The child's loop: load the LM, say ``ready``, then answer batches until the pipe closes."""
    import torch

    torch.set_num_threads(threads)
    from llm.backend import load_backend

    try:
        lm = load_backend(**load_kwargs)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send(("error", type(exc).__name__, str(exc)))
        return
    sending, busy = threading.Lock(), threading.Event()

    def send(message: tuple) -> None:
        with sending:
            busy.clear()  # no heartbeat after an answer: the parent reads nothing until its next batch
            conn.send(message)

    def heartbeat() -> None:
        while True:
            busy.wait()
            time.sleep(HEARTBEAT_S)
            with sending:
                if busy.is_set():
                    conn.send(("alive", None, None))

    threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()
    send(("ready", None, None))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if message is None:
            return
        _, texts, effort = message
        busy.set()
        try:
            result = ("ok", lm.cleanup_batch(texts, effort), None)
        except Exception as exc:  # noqa: BLE001 - raised again in the parent
            result = ("error", type(exc).__name__, str(exc))
        send(result)


class CleanupProcess:
    """Batched cleanup (:meth:`cleanup_batch`) on a copy of the LM in a child process: a cleanup
    worker of :class:`server.models.BatchingLanguageModel` (cleanups only, no replies or drafts).

    The child starts at once and loads in the background; the first call waits for it.
    Failures never hang a caller:

    - a child that exits or stops sending heartbeats (:data:`SILENCE_LIMIT_S`, e.g. stopped by
      ``SIGSTOP``) mid-batch fails that batch with :class:`WorkerError`, is killed, and a new
      child starts loading at once;
    - a child found dead between batches is replaced before the batch is sent, so the batch
      waits for the load rather than failing;
    - a child that cannot load its LM (or takes over :data:`LOAD_LIMIT_S`) raises
      :class:`WorkerError` saying why.

    Calls are serialised (one batch in flight per child).

    Args:
        load_kwargs: keyword arguments of :func:`llm.load_backend` (``kind``, ``model``,
            ``device``, ``quantize``, ``runtime``), picklable.
        threads: PyTorch intra-op threads of the child (1: one core per worker).
        name: process name (shown by ``ps``).
        silence_limit_s: seconds without a heartbeat after which a busy child is killed.

    Attributes:
        batches: batches answered so far (by this child and the ones before it).
        restarts: children started after the first.
    """

    def __init__(self, load_kwargs: dict, threads: int = 1, name: str = "quicksilver-cleanup",
                 silence_limit_s: float = SILENCE_LIMIT_S) -> None:
        self.load_kwargs = dict(load_kwargs)
        self.silence_limit_s = silence_limit_s
        self.threads = threads
        self.process_name = name
        self.batches = 0
        self.restarts = -1
        self._lock = threading.Lock()
        self._process = None
        self._conn = None
        self._ready = False
        self._closing = False
        self._start()

    # -- the child's life ------------------------------------------------------------
    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, self.load_kwargs, self.threads),
                                        name=self.process_name, daemon=True)
        self._process.start()
        child.close()
        self._ready = False
        self.restarts += 1

    def _stop(self) -> None:
        """End the child: close the pipe (it exits), join it, kill it after 5 s."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            self._conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self._conn.close()
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join(5)

    def _fail(self, message: str, restart: bool = True) -> WorkerError:
        """Kill the child, start the next one loading (``restart``), and describe why."""
        if self._process is not None and self._process.is_alive():
            self._process.kill()
        self._stop()
        if restart and not (self._closing or _exiting):
            self._start()
        return WorkerError(message)

    def _receive(self, limit_s: float, what: str) -> tuple:
        """The child's next message other than a heartbeat; ``limit_s`` of silence fails it."""
        last = time.monotonic()
        while True:
            if self._conn.poll(0.25):
                try:
                    message = self._conn.recv()
                except (EOFError, OSError) as exc:
                    raise self._fail(f"cleanup worker process exited {what} (its pipe closed: {exc!r})") from exc
                if message[0] != "alive":
                    return message
                last = time.monotonic()
            elif not self._process.is_alive():
                raise self._fail(f"cleanup worker process exited {what} (exit code {self._process.exitcode})")
            elif time.monotonic() - last > limit_s:
                raise self._fail(f"cleanup worker process stopped answering {what} (silent for {limit_s:.0f} s); "
                                 "it was killed and is being restarted")

    def _ensure_ready(self) -> None:
        if self._closing or _exiting:
            raise WorkerError("the cleanup worker is closed")
        if self._process is None or (self._ready and not self._process.is_alive()):
            self._stop()  # died between batches: replace it before sending
            self._start()
        if self._ready:
            return
        status, kind, message = self._receive(LOAD_LIMIT_S, "while loading")
        if status != "ready":
            raise self._fail(f"cleanup worker could not load the LM: {kind}: {message}", restart=False)
        self._ready = True

    def wait_ready(self) -> None:
        """Block until the child has loaded its LM.

        Raises:
            WorkerError: the child failed to load it or exited.
        """
        with self._lock:
            self._ensure_ready()

    # -- cleanups ----------------------------------------------------------------------
    def cleanup_batch(self, texts: Sequence[str], reasoning_effort: str = "low") -> list[str]:
        """Cleaned forms of ``texts`` (see :meth:`llm.tasks.CanvasTasks.cleanup_batch`), computed in the child.

        Raises:
            ValueError: the child's model rejected the input (same message).
            WorkerError: the child died or stopped answering during this batch, or could not load its LM.
        """
        message = ("cleanup_batch", list(texts), reasoning_effort)
        with self._lock:
            self._ensure_ready()
            try:
                self._conn.send(message)
            except (BrokenPipeError, OSError):
                # died after the liveness check and before reading: the batch was never taken
                self._stop()
                self._ensure_ready()
                self._conn.send(message)
            status, payload, text = self._receive(self.silence_limit_s, "during a batch")
        if status == "ok":
            self.batches += 1
            return payload
        raise _ERRORS.get(payload, WorkerError)(text if payload in _ERRORS else f"{payload}: {text}")

    def cleanup(self, transcript: str, reasoning_effort: str = "low") -> str:
        """One cleaned transcript: :meth:`cleanup_batch` of a batch of one."""
        return self.cleanup_batch([transcript], reasoning_effort)[0]

    @property
    def pid(self) -> int | None:
        """The child's process id (``None`` while none runs)."""
        return self._process.pid if self._process is not None else None

    def close(self) -> None:
        """Stop the child after the batch in flight, if any (it exits when its pipe closes; killed
        after 5 s). No child is started afterwards; calls raise :class:`WorkerError`."""
        self._closing = True
        with self._lock:
            self._stop()
