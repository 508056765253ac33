"""OpenAICompatibleLM against a local HTTP server speaking the OpenAI chat-completions
wire format (SSE streaming) on 127.0.0.1."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from llm.backend import LanguageModelError, Turn
from llm.openai_compat import OpenAICompatibleLM


class FakeCompletions(BaseHTTPRequestHandler):
    """``POST /v1/chat/completions``; behaviour chosen by the model name."""

    requests: list = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        try:
            self._serve()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            pass

    def _serve(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeCompletions.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        model = body["model"]
        if model == "unauthorized":
            return self._json(401, {"error": {"message": "Invalid API key", "type": "invalid_request_error"}})
        if model == "server-error":
            return self._json(500, {"error": {"message": "overloaded"}})
        if model == "slow":
            time.sleep(3)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if model == "garbage":
            self.wfile.write(b"data: {not json\n\n")
            return
        last = body["messages"][-1]["content"]
        words = ["Sure,", " I", " can", " help", " with", " that."]
        if "Transcript:" in last:
            words = ["I", " want", " a", " table", " for", " two."]
        for w in words:
            chunk = {"id": "c1", "object": "chat.completion.chunk", "model": model,
                     "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")

    def _json(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeCompletions)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_streaming_reply_and_passthrough(server, monkeypatch):
    monkeypatch.setenv("QUICKSILVER_LLM_API_KEY", "sk-test")
    FakeCompletions.requests.clear()
    lm = OpenAICompatibleLM(base_url=server, model="mercury-2")
    drafts = list(lm.reply_drafts([Turn("assistant", "Hello!")], "book a table", "medium"))
    assert drafts == ["Sure,", "Sure, I", "Sure, I can", "Sure, I can help", "Sure, I can help with",
                      "Sure, I can help with that."]
    req = FakeCompletions.requests[-1]
    assert req["path"] == "/v1/chat/completions"
    assert req["auth"] == "Bearer sk-test"
    assert req["body"]["stream"] is True and req["body"]["reasoning_effort"] == "medium"
    assert [m["role"] for m in req["body"]["messages"]] == ["system", "assistant", "user"]


def test_cleanup_keeps_faithful_output(server):
    lm = OpenAICompatibleLM(base_url=server, model="mercury-2", api_key="k")
    assert lm.cleanup("um I want uh a table for for two") == "I want a table for two."


async def test_async_stream(server):
    lm = OpenAICompatibleLM(base_url=server, model="mercury-2", api_key="k")
    drafts = [d async for d in lm.astream_respond([], "hi")]
    assert drafts[-1] == "Sure, I can help with that."
    assert await lm.arespond([], "hi") == "Sure, I can help with that."


@pytest.mark.parametrize("model, match", [
    ("unauthorized", "HTTP 401 .*Invalid API key"),
    ("server-error", "HTTP 500 .*overloaded"),
    ("garbage", "malformed stream chunk"),
])
def test_http_failures_are_clear_errors(server, model, match):
    lm = OpenAICompatibleLM(base_url=server, model=model, api_key="k")
    with pytest.raises(LanguageModelError, match=match):
        lm.respond([], "hello")


def test_timeout_is_a_clear_error(server):
    lm = OpenAICompatibleLM(base_url=server, model="slow", api_key="k", timeout_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(LanguageModelError, match="within 0.5 s|stalled"):
        lm.respond([], "hello")
    assert time.monotonic() - t0 < 5.0  # no hang (the server answers only after 3 s, so the raise is the timeout)


def test_unreachable_server_is_a_clear_error():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    lm = OpenAICompatibleLM(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", timeout_s=2)
    with pytest.raises(LanguageModelError, match="cannot reach"):
        lm.respond([], "hello")


def test_bad_input_rejected_before_any_request(server):
    lm = OpenAICompatibleLM(base_url=server, api_key="k")
    with pytest.raises(ValueError, match="empty"):
        lm.cleanup("   ")
    with pytest.raises(ValueError, match="reasoning_effort"):
        lm.respond([], "hi", "turbo")
