"""Cleanup workers in child processes: one copy of the LM each, off the server's GIL.

On a CPU a small denoiser's forward pass is many short kernels with Python between them;
two threads of one process contend for the GIL and for the intra-op thread pool, so two
single-threaded *processes* get more out of two cores (``bench/cleanup_load.py``). The
server's :class:`server.models.BatchingLanguageModel` hands each batch to a
:class:`CleanupProcess` as it would to an in-process model.

The child is started with the ``spawn`` method (the server runs threads, which ``fork``
must not copy), loads the LM with :func:`llm.load_backend`, and answers
``("cleanup_batch", texts, effort)`` messages over a :func:`multiprocessing.Pipe`.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from collections.abc import Iterator, Sequence

from llm.backend import LanguageModel, LanguageModelError, Turn

log = logging.getLogger(__name__)

#: Exception types a child's error is raised as in the parent; any other becomes RuntimeError.
_ERRORS = {"ValueError": ValueError, "TypeError": TypeError}


class WorkerError(LanguageModelError):
    """A cleanup worker process failed to load its model or exited mid-batch."""


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
    conn.send(("ready", None, None))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if message is None:
            return
        _, texts, effort = message
        try:
            conn.send(("ok", lm.cleanup_batch(texts, effort), None))
        except Exception as exc:  # noqa: BLE001 - raised again in the parent
            conn.send(("error", type(exc).__name__, str(exc)))


class CleanupProcess(LanguageModel):
    """Batched cleanup (:meth:`cleanup_batch`) on a copy of the LM in a child process.

    The child starts at once and loads in the background; the first call waits for it. A
    child that dies is reported as :class:`WorkerError` to the batch it was running (never a
    hang: the parent polls the child's liveness while it waits) and started again on the
    next call. Calls are serialised (one batch in flight per child).

    Args:
        load_kwargs: keyword arguments of :func:`llm.load_backend` (``kind``, ``model``,
            ``device``, ``quantize``, ...), picklable.
        threads: PyTorch intra-op threads of the child (1: one core per worker).
        name: process name (shown by ``ps``).

    Only cleanups run here; replies and drafts stay on the server's own LM.

    Attributes:
        batches: batches answered so far (by this child and the ones before it).
    """

    name = "local"

    def __init__(self, load_kwargs: dict, threads: int = 1, name: str = "quicksilver-cleanup") -> None:
        self.load_kwargs = dict(load_kwargs)
        self.threads = threads
        self.process_name = name
        self._lock = threading.Lock()
        self._process = None
        self._conn = None
        self._ready = False
        self.batches = 0
        self._start()

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, self.load_kwargs, self.threads),
                                        name=self.process_name, daemon=True)
        self._process.start()
        child.close()
        self._ready = False

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

    def _fail(self, message: str) -> WorkerError:
        """Stop the child (the next call starts another) and describe why."""
        self._stop()
        return WorkerError(message)

    def _receive(self) -> tuple:
        while not self._conn.poll(0.5):
            if not self._process.is_alive():
                raise self._fail(f"cleanup worker process exited (exit code {self._process.exitcode})")
        try:
            return self._conn.recv()
        except (EOFError, OSError) as exc:
            raise self._fail(f"cleanup worker process closed its pipe: {exc}") from exc

    def _ensure_ready(self) -> None:
        if self._process is None:
            self._start()
        if self._ready:
            return
        status, kind, message = self._receive()
        if status != "ready":
            raise self._fail(f"cleanup worker could not load the LM: {kind}: {message}")
        self._ready = True

    def wait_ready(self) -> None:
        """Block until the child has loaded its LM.

        Raises:
            WorkerError: the child failed to load it or exited.
        """
        with self._lock:
            self._ensure_ready()

    def cleanup_batch(self, texts: Sequence[str], reasoning_effort: str = "low") -> list[str]:
        """Cleaned forms of ``texts`` (see :meth:`llm.tasks.CanvasTasks.cleanup_batch`), computed in the child.

        Raises:
            ValueError: the child's model rejected the input (same message).
            WorkerError: the child died or could not load its LM.
        """
        with self._lock:
            self._ensure_ready()
            try:
                self._conn.send(("cleanup_batch", list(texts), reasoning_effort))
            except (BrokenPipeError, OSError) as exc:
                raise self._fail(f"cleanup worker process is gone: {exc}") from exc
            status, payload, message = self._receive()
        if status == "ok":
            self.batches += 1
            return payload
        raise _ERRORS.get(payload, WorkerError)(message if payload in _ERRORS else f"{payload}: {message}")

    def cleanup(self, transcript: str, reasoning_effort: str = "low") -> str:
        return self.cleanup_batch([transcript], reasoning_effort)[0]

    def cleanup_drafts(self, transcript: str, reasoning_effort: str = "low") -> Iterator[str]:
        yield self.cleanup(transcript, reasoning_effort)

    def reply_drafts(self, history: Sequence[Turn], user_text: str, reasoning_effort: str = "low") -> Iterator[str]:
        raise NotImplementedError("a cleanup worker process answers cleanups only")

    @property
    def pid(self) -> int | None:
        """The child's process id (``None`` before a restart)."""
        return self._process.pid if self._process is not None else None

    def close(self) -> None:
        """Stop the child (it exits when its pipe closes; killed after 5 s)."""
        with self._lock:
            self._stop()
