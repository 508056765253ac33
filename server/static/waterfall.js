// Per-turn latency waterfall drawn from `turn.trace` events (docs/protocol.md), as SVG.
// One row per stage; each bar spans the stage's start and end, measured from the end of speech.

const STAGES = [
  ["endpoint", "speech_end", "endpoint", "#90a4ae"],
  ["ASR", "asr_start", "asr_final", "#42a5f5"],
  ["cleanup", "cleanup_start", "cleanup_done", "#ab47bc"],
  ["LLM", "llm_start", "reply_done", "#ef6c00"],
  ["TTS", "tts_start", "first_tts_audio", "#26a69a"],
  ["voice-to-voice", "speech_end", "first_tts_audio", "#c62828"],
];

export function median(values) {
  if (!values.length) return null;
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Draw `trace` (TurnTrace.to_dict()) into the <svg> element; returns the number of bars. */
export function drawWaterfall(svg, trace) {
  const ns = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  const marks = STAGES.flatMap(([, a, b]) => [trace[a], trace[b]]).filter((t) => t != null);
  if (!marks.length) return 0;
  const origin = trace.speech_end ?? Math.min(...marks);
  const span = Math.max(0.5, Math.max(...marks) - origin);
  const width = svg.clientWidth || 800, labelW = 120, rowH = 28, scale = (width - labelW - 70) / span;
  let bars = 0;
  const add = (tag, attrs, text) => {
    const el = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text != null) el.textContent = text;
    svg.appendChild(el);
    return el;
  };
  STAGES.forEach(([label, a, b, color], row) => {
    const y = 8 + row * rowH;
    add("text", { x: 4, y: y + 15 }, label);
    const t0 = trace[a], t1 = trace[b];
    if (t0 == null || t1 == null) return;
    const x = labelW + Math.max(0, (t0 - origin) * scale);
    const w = Math.max(2, (t1 - t0) * scale);
    add("rect", { x, y, width: w, height: rowH - 8, fill: color, rx: 3, class: "bar", "data-stage": label });
    add("text", { x: x + w + 4, y: y + 15 }, `${Math.round((t1 - t0) * 1000)} ms`);
    bars++;
  });
  add("text", { x: labelW, y: 8 + STAGES.length * rowH + 10 }, `turn ${trace.turn_id}${trace.interrupted ? " (interrupted)" : ""} · 0 = end of speech`);
  svg.setAttribute("height", 8 + STAGES.length * rowH + 20);
  svg.dataset.bars = bars;
  return bars;
}
