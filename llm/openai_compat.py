"""``OpenAICompatibleLM``: any ``/v1/chat/completions`` endpoint, streamed over SSE.

Speaks the OpenAI Chat Completions wire format (``stream: true``, ``data: {...}`` lines
ending with ``data: [DONE]``), which Inception's Mercury 2 API, SGLang (serving
LLaDA 2) and vLLM all serve. ``reasoning_effort`` is passed through unchanged.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence

from llm.backend import LanguageModel, LanguageModelError, Turn, check_text
from llm.chat import CLEANUP_INSTRUCTION, REPLY_SYSTEM
from llm.effort import sampler_settings
from llm.rules import rule_cleanup
from llm.faithful import is_faithful

#: Inception Labs' OpenAI-compatible endpoint (Mercury 2).
DEFAULT_BASE_URL = "https://api.inceptionlabs.ai/v1"
#: Environment variables searched, in order, for the API key.
API_KEY_ENV = ("QUICKSILVER_LLM_API_KEY", "INCEPTION_API_KEY", "OPENAI_API_KEY")


class OpenAICompatibleLM(LanguageModel):
    """Cleanup and replies from an OpenAI-compatible chat-completions server.

    Args:
        base_url: e.g. ``http://127.0.0.1:30000/v1``; default ``$QUICKSILVER_LLM_BASE_URL``
            or Inception's API.
        model: model name sent in each request (``mercury-2`` by default).
        api_key: bearer token; default the first set of :data:`API_KEY_ENV`. None: no header.
        timeout_s: connect and read timeout of each request, in seconds.
        max_tokens: ``max_tokens`` of each request.

    Errors: every HTTP status >= 400, an unreachable server, a timeout or a malformed
    stream raises :class:`llm.backend.LanguageModelError` with the status and the
    server's own message.
    """

    name = "openai"

    def __init__(self, base_url: str | None = None, model: str = "mercury-2", api_key: str | None = None,
                 timeout_s: float = 30.0, max_tokens: int = 256) -> None:
        self.base_url = (base_url or os.environ.get("QUICKSILVER_LLM_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.model = model
        self.api_key = api_key or next((os.environ[k] for k in API_KEY_ENV if os.environ.get(k)), None)
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens

    @property
    def url(self) -> str:
        """The chat-completions URL requests go to."""
        return f"{self.base_url}/chat/completions"

    def stream_chat(self, messages: list[dict], reasoning_effort: str = "low") -> Iterator[str]:
        """POST ``messages`` with ``stream: true``; yield the accumulated reply after every delta.

        Raises:
            LanguageModelError: HTTP error, unreachable server, timeout, malformed stream.
        """
        sampler_settings(reasoning_effort)
        body = {"model": self.model, "messages": messages, "stream": True,
                "reasoning_effort": reasoning_effort, "max_tokens": self.max_tokens}
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            response = urllib.request.urlopen(request, timeout=self.timeout_s)
        except urllib.error.HTTPError as exc:
            raise LanguageModelError(f"HTTP {exc.code} from {self.url}: {_error_message(exc)}") from None
        except urllib.error.URLError as exc:
            raise LanguageModelError(f"cannot reach {self.url}: {exc.reason}") from None
        except (socket.timeout, TimeoutError):
            raise LanguageModelError(f"no response from {self.url} within {self.timeout_s:g} s") from None
        text = ""
        try:
            with response:
                for raw in response:
                    line = raw.decode("utf-8", "replace").strip()
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    try:
                        chunk = json.loads(data)
                    except json.JSONDecodeError:
                        raise LanguageModelError(f"malformed stream chunk from {self.url}: {data[:200]!r}") from None
                    if "error" in chunk:
                        raise LanguageModelError(f"error from {self.url}: {_message_of(chunk['error'])}")
                    for choice in chunk.get("choices", []):
                        delta = (choice.get("delta") or {}).get("content") or ""
                        if delta:
                            text += delta
                            yield text
        except (socket.timeout, TimeoutError):
            raise LanguageModelError(f"stream from {self.url} stalled for {self.timeout_s:g} s") from None

    def cleanup_drafts(self, transcript: str, reasoning_effort: str = "low") -> Iterator[str]:
        """Drafts of the cleaned transcript; the last one falls back to rules if unfaithful."""
        text = check_text(transcript, "transcript")
        last = None
        for draft in self.stream_chat(
            [{"role": "user", "content": CLEANUP_INSTRUCTION.format(text=text)}], reasoning_effort
        ):
            if last is not None:
                yield last
            last = draft
        last = " ".join((last or "").split())
        yield last if last and is_faithful(text, last) else (rule_cleanup(text) or text)

    def reply_drafts(self, history: Sequence[Turn], user_text: str, reasoning_effort: str = "low") -> Iterator[str]:
        """Drafts (growing prefixes) of the reply."""
        user = check_text(user_text, "user_text")
        messages = [{"role": "system", "content": REPLY_SYSTEM}]
        messages += [{"role": t.role, "content": t.text} for t in history]
        messages.append({"role": "user", "content": user})
        produced = False
        for draft in self.stream_chat(messages, reasoning_effort):
            produced = True
            yield draft
        if not produced:
            raise LanguageModelError(f"{self.url} returned an empty reply")


def _message_of(error) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        payload = exc.read().decode("utf-8", "replace")
    except OSError:
        return exc.reason or ""
    try:
        return _message_of(json.loads(payload).get("error", payload))
    except (json.JSONDecodeError, AttributeError):
        return payload[:300] or str(exc.reason)
