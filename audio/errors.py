"""Exceptions raised by ``audio``; catch by meaning.

::

    AudioError                       any audio problem
    ├── AudioDecodeError             a file could not be read (missing, truncated, corrupt)
    │   └── UnsupportedAudioFormatError   readable bytes, but not an audio format we decode
    └── AudioDeviceError             no PortAudio library, no device, or the device refused the stream
"""

from __future__ import annotations


class AudioError(Exception):
    """Base class of every error raised by the ``audio`` package."""


class AudioDecodeError(AudioError):
    """An audio file could not be decoded (missing, truncated, corrupt or empty of streams)."""


class UnsupportedAudioFormatError(AudioDecodeError):
    """The file is not in an audio format that soundfile or PyAV can decode."""


class AudioDeviceError(AudioError):
    """Audio device I/O is unavailable: PortAudio missing, no device, or the stream was refused."""
