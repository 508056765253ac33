"""Audio in and out: frames, file decoding, sources, sinks and voice activity detection.

``audio`` knows nothing of speech recognition, language models or the server. Everything
downstream of a source sees :class:`audio.frames.AudioFrame` objects: mono PCM16 at 16 kHz
with a stream timestamp.
"""

from audio.errors import AudioDecodeError, AudioDeviceError, AudioError, UnsupportedAudioFormatError
from audio.frames import PIPELINE_RATE_HZ, AudioFrame

__all__ = [
    "AudioDecodeError",
    "AudioDeviceError",
    "AudioError",
    "AudioFrame",
    "PIPELINE_RATE_HZ",
    "UnsupportedAudioFormatError",
]
