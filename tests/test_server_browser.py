"""The browser client in a real Chromium (Debian ``chromium``, driven by Playwright) against the
running server with the real models: the fake microphone plays samples/jfk.wav; the page must show
the transcript, the cleaned transcript and the reply, play reply audio and draw the waterfall.
A screenshot is saved to ``test-artifacts/browser-client.png``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile

from server.app import ServerConfig
from server.testing import ServerThread
from voice.metrics import word_error_rate

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
JFK = ROOT / "samples" / "jfk.wav"
JFK_TEXT = json.loads((ROOT / "samples" / "references.json").read_text())["jfk.wav"]["text"]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"

if not Path(CHROMIUM).exists():  # pragma: no cover - .ci/run installs it
    pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium", allow_module_level=True)


@pytest.fixture(scope="module")
def server():
    with ServerThread(ServerConfig(port=0)) as running:
        yield running


@pytest.fixture(scope="module")
def microphone_wav(tmp_path_factory) -> Path:
    """jfk.wav with 1 s of silence before and 20 s after, so Chromium's fake microphone (which
    loops its file) says it once and then is quiet while the reply plays."""
    data, rate = soundfile.read(str(JFK), dtype="int16")
    path = tmp_path_factory.mktemp("mic") / "jfk_then_silence.wav"
    silence = np.zeros(rate, dtype=np.int16)
    soundfile.write(str(path), np.concatenate([silence, data, np.tile(silence, 20)]), rate, subtype="PCM_16")
    return path


def launch(playwright, microphone_wav: Path, *extra: str):
    return playwright.chromium.launch(
        executable_path=CHROMIUM, headless=True,
        args=["--no-sandbox", "--disable-background-networking", "--disable-gpu", "--use-fake-device-for-media-stream",
              f"--use-file-for-fake-audio-capture={microphone_wav}", *extra],
    )


@pytest.fixture(scope="module")
def playwright():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as running:
        yield running


@pytest.fixture(scope="module")
def browser(playwright, microphone_wav):
    browser = launch(playwright, microphone_wav, "--use-fake-ui-for-media-stream",
                     "--autoplay-policy=no-user-gesture-required")
    yield browser
    browser.close()


def test_browser_client_talks_to_the_server(server, browser):
    page = browser.new_page(viewport={"width": 1200, "height": 900}, bypass_csp=True)  # for wait_for_function
    console: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda error: console.append(f"pageerror: {error}"))
    page.goto(server.url + "/?min_silence_ms=1300", timeout=15_000)
    page.wait_for_function("!document.getElementById('start').disabled", timeout=10_000)
    page.click("#start")
    try:
        page.wait_for_function("document.getElementById('final').textContent.trim().length > 0", timeout=40_000)
        page.wait_for_function("document.getElementById('cleaned').textContent.trim().length > 0", timeout=30_000)
        page.wait_for_function("document.getElementById('reply').textContent.trim().length > 0 && "
                               "document.getElementById('reply').className === ''", timeout=60_000)
        page.wait_for_function("Number(document.getElementById('played-samples').textContent) > 4000", timeout=30_000)
        page.wait_for_function("Number(document.getElementById('waterfall').dataset.bars || 0) >= 4", timeout=30_000)
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "browser-client.png"), full_page=True)
        (ARTIFACTS / "browser-console.log").write_text("\n".join(console))
    final = page.text_content("#final")
    cleaned, reply = page.text_content("#cleaned"), page.text_content("#reply")
    # the cleanup panel and a typed turn
    page.fill("#cleanup-text", "so um I want uh a table for two")
    page.click("#cleanup-run")
    page.wait_for_function("/\\(\\d+(\\.\\d+)? ms\\)$/.test(document.getElementById('cleanup-result').textContent)", timeout=30_000)
    page.fill("#typed-text", "What can you help me with?")
    page.click("#typed button")
    page.wait_for_function("window.quicksilver.replies >= 2", timeout=30_000)
    page.screenshot(path=str(ARTIFACTS / "browser-client-typed-and-cleanup.png"), full_page=True)
    wer = word_error_rate(JFK_TEXT, final)
    assert wer <= 0.20, (wer, final)
    assert page.text_content("#p50") != "–"
    assert not [line for line in console if line.startswith(("error", "pageerror"))], console
    print(f"\nbrowser: final {final!r} (WER {wer:.1%}); cleaned {cleaned!r}; reply {reply!r}; "
          f"cleanup panel {page.text_content('#cleanup-result')!r}; played {page.text_content('#played-samples')} samples; "
          f"p50 voice-to-voice {page.text_content('#p50')}")
    page.close()


def test_refused_microphone_is_explained(server, playwright, microphone_wav):
    browser = launch(playwright, microphone_wav, "--deny-permission-prompts")
    try:
        page = browser.new_page(bypass_csp=True)
        page.goto(server.url + "/", timeout=15_000)
        page.wait_for_function("!document.getElementById('start').disabled", timeout=10_000)
        page.click("#start")
        page.wait_for_function("document.getElementById('messages').textContent.includes('permission')", timeout=15_000)
        assert "refused" in page.text_content("#messages")
        assert page.text_content("#start") == "Start"
    finally:
        browser.close()


def test_lost_connection_is_reported_and_the_page_reconnects(server, playwright, microphone_wav):
    first = ServerThread(ServerConfig(port=0), pipeline=server.pipeline).start()
    port = first.port
    browser = launch(playwright, microphone_wav, "--use-fake-ui-for-media-stream")
    second = None
    try:
        page = browser.new_page(bypass_csp=True)
        page.goto(first.url + "/", timeout=15_000)
        page.wait_for_function("!document.getElementById('start').disabled", timeout=10_000)
        page.click("#start")
        page.wait_for_function("document.getElementById('status').textContent.startsWith('listening')", timeout=15_000)
        first.stop()  # the server goes away
        page.wait_for_function("document.getElementById('messages').textContent.includes('Connection lost')", timeout=15_000)
        second = ServerThread(ServerConfig(port=port), pipeline=server.pipeline).start()
        page.wait_for_function("document.getElementById('messages').textContent.includes('Reconnected')", timeout=20_000)
        page.wait_for_function("document.getElementById('status').textContent.startsWith('listening')", timeout=10_000)
    finally:
        first.stop()
        if second is not None:
            second.stop()
        browser.close()
