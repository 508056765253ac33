// AudioWorklet processors (one module, loaded with audioWorklet.addModule).
//
// "pcm16-capture": microphone → 16 kHz PCM16 frames of 20 ms, posted to the main thread as
//   ArrayBuffers. Downsampling: a one-pole-pair low-pass (cut below 8 kHz) then linear
//   interpolation at the 16 kHz sample times.
// "pcm16-player": reply audio (PCM16 at the server's rate) → the audio output, through a ring
//   buffer that waits for JITTER_MS of audio before it starts (a jitter buffer). It counts the
//   samples it actually wrote to its output and reports them, so the page can prove that reply
//   audio reached the audio output.

const TARGET_RATE = 16000;
const FRAME_SAMPLES = 320; // 20 ms at 16 kHz

class Pcm16Capture extends AudioWorkletProcessor {
  constructor() {
    super();
    this.step = sampleRate / TARGET_RATE; // input samples per output sample
    this.position = 0; // fractional read position into the current input stream
    this.previous = 0; // last filtered sample of the previous block
    this.lp1 = 0; this.lp2 = 0;
    // Two cascaded one-pole low-passes at ~7 kHz (only needed when downsampling).
    this.alpha = this.step > 1 ? 1 - Math.exp(-2 * Math.PI * 7000 / sampleRate) : 1;
    this.frame = new Int16Array(FRAME_SAMPLES);
    this.filled = 0;
    this.running = true;
    this.port.onmessage = (e) => { if (e.data === "stop") this.running = false; };
  }

  process(inputs) {
    const input = inputs[0];
    if (!this.running) return false;
    if (!input || input.length === 0) return true;
    const channel = input[0];
    const n = channel.length;
    const filtered = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      this.lp1 += this.alpha * (channel[i] - this.lp1);
      this.lp2 += this.alpha * (this.lp1 - this.lp2);
      filtered[i] = this.lp2;
    }
    // position is relative to this block; index -1 means this.previous.
    while (this.position < n - 1 + 1e-9) {
      const i = Math.floor(this.position);
      const frac = this.position - i;
      const a = i < 0 ? this.previous : filtered[i];
      const b = filtered[Math.min(i + 1, n - 1)];
      const v = Math.max(-1, Math.min(1, a + (b - a) * frac));
      this.frame[this.filled++] = Math.round(v * 32767);
      if (this.filled === FRAME_SAMPLES) {
        const out = this.frame.slice(0);
        this.port.postMessage(out.buffer, [out.buffer]);
        this.filled = 0;
      }
      this.position += this.step;
    }
    this.position -= n;
    this.previous = filtered[n - 1];
    return true;
  }
}

const JITTER_MS = 150;

class Pcm16Player extends AudioWorkletProcessor {
  constructor() {
    super();
    this.ring = new Float32Array(sampleRate * 60); // 60 s at the output rate
    this.read = 0; this.write = 0; // absolute counters
    this.step = 1; // input rate / output rate
    this.frac = 0; this.last = 0;
    this.playing = false;
    this.played = 0; // samples (at the input rate) written to the output
    this.reportAt = 0;
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  onMessage(msg) {
    if (msg.type === "rate") { this.step = msg.sampleRate / sampleRate; return; }
    if (msg.type === "flush") { this.read = this.write; this.playing = false; this.report(); return; }
    if (msg.type === "pcm") {
      const pcm = new Int16Array(msg.buffer);
      // Resample input-rate samples into the ring at the output rate (linear interpolation).
      for (let i = 0; i < pcm.length; i++) {
        const x = pcm[i] / 32768;
        while (this.frac < 1) {
          this.ring[this.write % this.ring.length] = this.last + (x - this.last) * this.frac;
          this.write++;
          this.frac += this.step;
        }
        this.frac -= 1;
        this.last = x;
      }
    }
  }

  report() {
    this.port.postMessage({ played: Math.round(this.played), bufferedMs: Math.round((this.write - this.read) / sampleRate * 1000) });
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    const available = this.write - this.read;
    if (!this.playing && available >= sampleRate * JITTER_MS / 1000) this.playing = true;
    if (this.playing) {
      const n = Math.min(out.length, available);
      for (let i = 0; i < n; i++) out[i] = this.ring[(this.read + i) % this.ring.length];
      this.read += n;
      this.played += n * this.step;
      if (n < out.length) this.playing = false; // underrun: wait for the jitter buffer again
    }
    for (let c = 1; c < outputs[0].length; c++) outputs[0][c].set(out);
    if (currentTime >= this.reportAt) { this.report(); this.reportAt = currentTime + 0.1; }
    return true;
  }
}

registerProcessor("pcm16-capture", Pcm16Capture);
registerProcessor("pcm16-player", Pcm16Player);
