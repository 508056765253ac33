// Quicksilver browser client: microphone → /ws (docs/protocol.md) → transcripts, reply, audio.
import { drawWaterfall, median } from "./waterfall.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const token = params.get("token");
const wsUrl = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws${token ? `?token=${encodeURIComponent(token)}` : ""}`;

const state = {
  ws: null, running: false, audioContext: null, micStream: null, capture: null, player: null,
  retries: 0, replies: 0, voiceToVoice: [], finalized: new Set(), cleanupId: 0, wantSession: false,
};
window.quicksilver = state; // for debugging and the browser test

function message(text, kind = "info") {
  const p = document.createElement("p");
  p.textContent = text;
  p.className = kind;
  $("messages").prepend(p);
  while ($("messages").children.length > 4) $("messages").lastChild.remove();
}

function status(text) { $("status").textContent = text; }

// -- connection ---------------------------------------------------------------------------

function connect() {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(wsUrl);
    ws.binaryType = "arraybuffer";
    ws.onopen = () => { state.ws = ws; state.retries = 0; status("connected"); resolve(ws); };
    ws.onerror = () => reject(new Error("cannot reach the server"));
    ws.onmessage = (e) => (typeof e.data === "string" ? onEvent(JSON.parse(e.data)) : onAudio(e.data));
    ws.onclose = (e) => onClose(ws, e);
  });
}

function onClose(ws, e) {
  if (state.ws !== ws) return;
  state.ws = null;
  if (e.code === 1000 && !state.wantSession) { status("disconnected"); return; }
  const why = e.code === 1013 ? "the server is full" : e.code === 1009 ? "a message was too big" : `code ${e.code}`;
  message(`Connection lost (${why}); reconnecting…`, "error");
  scheduleReconnect();
}

function scheduleReconnect() {
  const delay = Math.min(10000, 500 * 2 ** state.retries++);
  status(`reconnecting in ${(delay / 1000).toFixed(1)} s`);
  setTimeout(async () => {
    try {
      await connect();
      if (state.wantSession) startSession();
      message("Reconnected.");
    } catch { scheduleReconnect(); }
  }, delay);
}

function send(obj) {
  if (state.ws && state.ws.readyState === WebSocket.OPEN) { state.ws.send(JSON.stringify(obj)); return true; }
  message("Not connected to the server.", "error");
  return false;
}

function startSession() {
  // Optional page parameters: ?effort=medium&min_silence_ms=1000&token=…
  const voice = {};
  if (params.get("min_silence_ms")) voice.min_silence_ms = Number(params.get("min_silence_ms"));
  send({ type: "session.start", sample_rate: 16000, format: "pcm16", channels: 1,
         reasoning_effort: params.get("effort") || "low", voice });
}

// -- events -------------------------------------------------------------------------------

function onEvent(ev) {
  switch (ev.type) {
    case "session.started": state.finalized.clear(); status(`listening (session ${ev.session_id})`); break;
    case "speech.started": $("interim").textContent = "…"; stopPlayback(); break;
    case "transcript.interim": if (!state.finalized.has(ev.turn_id)) $("interim").textContent = ev.text; break;
    case "speech.stopped": break;
    case "transcript.final": state.finalized.add(ev.turn_id); $("interim").textContent = ""; $("final").textContent = ev.text; $("cleaned").textContent = ""; break;
    case "transcript.rejected": $("interim").textContent = `(ignored: ${ev.reason})`; break;
    case "transcript.cleaned": $("cleaned").textContent = ev.text; break;
    case "reply.draft":
      $("reply").textContent = ev.text; $("reply").className = "drafting";
      $("draft-step").textContent = `(draft ${ev.index + 1})`; break;
    case "reply.text": $("reply").textContent = ev.text; $("reply").className = ""; state.replies++; break;
    case "audio.start": ensurePlayer().then(() => state.player.port.postMessage({ type: "rate", sampleRate: ev.sample_rate })); break;
    case "audio.end": break;
    case "interrupted": stopPlayback(); $("reply").textContent += " [interrupted]"; break;
    case "turn.trace": onTrace(ev.trace); break;
    case "cleanup.result": $("cleanup-result").textContent = `${ev.text}  (${ev.latency_ms} ms)`; break;
    case "error": message(`Server error (${ev.code}): ${ev.message}`, "error"); break;
    case "session.ended": status("session ended"); break;
  }
}

function onTrace(trace) {
  const bars = drawWaterfall($("waterfall"), trace);
  const v2v = trace.durations?.voice_to_voice_s;
  if (v2v != null) state.voiceToVoice.push(v2v);
  const p50 = median(state.voiceToVoice);
  $("p50").textContent = p50 == null ? "–" : `${Math.round(p50 * 1000)} ms`;
  $("turn-count").textContent = state.voiceToVoice.length;
  return bars;
}

// -- audio --------------------------------------------------------------------------------

async function ensureAudio() {
  if (!state.audioContext) {
    state.audioContext = new AudioContext();
    await state.audioContext.audioWorklet.addModule("/static/audio-worklets.js");
  }
  if (state.audioContext.state === "suspended") await state.audioContext.resume();
  return state.audioContext;
}

async function ensurePlayer() {
  const ctx = await ensureAudio();
  if (!state.player) {
    state.player = new AudioWorkletNode(ctx, "pcm16-player", { outputChannelCount: [1] });
    state.player.port.onmessage = (e) => {
      $("played-samples").textContent = e.data.played;
      $("buffered-ms").textContent = e.data.bufferedMs;
    };
    state.player.connect(ctx.destination);
  }
  return state.player;
}

function onAudio(buffer) {
  if (state.player) state.player.port.postMessage({ type: "pcm", buffer }, [buffer]);
}

function stopPlayback() { if (state.player) state.player.port.postMessage({ type: "flush" }); }

async function startMicrophone() {
  const ctx = await ensureAudio();
  await ensurePlayer();
  try {
    state.micStream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
    });
  } catch (err) {
    const refused = err.name === "NotAllowedError" || err.name === "SecurityError";
    throw new Error(refused
      ? "Microphone permission was refused. Allow the microphone for this page (the icon in the address bar) and press Start again; you can still type below."
      : `No microphone available (${err.name}: ${err.message}).`);
  }
  const source = ctx.createMediaStreamSource(state.micStream);
  state.capture = new AudioWorkletNode(ctx, "pcm16-capture", { numberOfInputs: 1, numberOfOutputs: 0 });
  state.capture.port.onmessage = (e) => {
    if (state.running && state.ws && state.ws.readyState === WebSocket.OPEN) state.ws.send(e.data);
  };
  source.connect(state.capture);
}

function stopMicrophone() {
  if (state.capture) { state.capture.port.postMessage("stop"); state.capture.disconnect(); state.capture = null; }
  if (state.micStream) { state.micStream.getTracks().forEach((t) => t.stop()); state.micStream = null; }
}

// -- controls -----------------------------------------------------------------------------

async function start() {
  $("start").disabled = true;
  try {
    if (!state.ws) await connect();
    await startMicrophone();
    state.running = true; state.wantSession = true;
    startSession();
    $("start").textContent = "Stop"; $("start").classList.add("running");
  } catch (err) {
    message(err.message, "error");
    status("stopped");
  } finally {
    $("start").disabled = false;
  }
}

function stop() {
  state.running = false; state.wantSession = false;
  stopMicrophone();
  send({ type: "session.end" });
  $("start").textContent = "Start"; $("start").classList.remove("running");
  status("stopping…");
}

$("start").addEventListener("click", () => (state.running ? stop() : start()));
$("stop-reply").addEventListener("click", () => { stopPlayback(); if (state.running) send({ type: "response.cancel" }); });
$("typed").addEventListener("submit", async (e) => {
  e.preventDefault();
  const text = $("typed-text").value.trim();
  if (!text) return;
  if (!state.running) { message("Press Start first: typed turns belong to a session."); return; }
  await ensurePlayer();
  if (send({ type: "input.text", text })) { $("final").textContent = `⌨ ${text}`; $("cleaned").textContent = ""; $("typed-text").value = ""; }
});
$("cleanup-run").addEventListener("click", async () => {
  const text = $("cleanup-text").value.trim();
  if (!text) return;
  try { if (!state.ws) await connect(); } catch (err) { message(err.message, "error"); return; }
  $("cleanup-result").textContent = "…";
  send({ type: "cleanup.request", id: `c${++state.cleanupId}`, text, reasoning_effort: "low" });
});

if (!window.isSecureContext || !navigator.mediaDevices) {
  message("This page needs a secure context (https or http://127.0.0.1) for the microphone.", "error");
}
if (!window.AudioWorkletNode) message("This browser has no AudioWorklet; use a current Chromium or Firefox.", "error");
$("start").disabled = false;
status("ready — press Start and speak");
