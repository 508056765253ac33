"""The voice assistant: streaming ASR, TTS, and the pipeline that joins audio to the language model.

``voice`` joins ``audio`` (frames, sources, sinks, VAD) and ``llm`` (the backend interface). The
server and the CLI drive :class:`voice.pipeline.VoicePipeline` and subscribe to its events.
"""
