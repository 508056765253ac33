"""Access to PortAudio through ``sounddevice``, with its failures turned into :class:`AudioDeviceError`.

``sounddevice`` raises ``OSError`` at import time when the PortAudio library is missing, and
``PortAudioError`` when there is no device; callers get one exception type with a message that
says what to do.
"""

from __future__ import annotations

from audio.errors import AudioDeviceError

PORTAUDIO_HINT = "install PortAudio (Debian/Ubuntu: apt-get install libportaudio2)"


def import_sounddevice():
    """Return the ``sounddevice`` module.

    Raises:
        AudioDeviceError: PortAudio (``libportaudio2``) is not installed.
    """
    try:
        import sounddevice
    except OSError as exc:  # "PortAudio library not found"
        raise AudioDeviceError(f"audio devices unavailable: {exc}; {PORTAUDIO_HINT}") from exc
    return sounddevice


def default_device(kind: str) -> dict:
    """Return ``sounddevice.query_devices(kind=kind)`` for ``kind`` ``"input"`` or ``"output"``.

    Raises:
        AudioDeviceError: PortAudio missing or no such device.
    """
    sd = import_sounddevice()
    try:
        info = sd.query_devices(kind=kind)
    except (sd.PortAudioError, ValueError) as exc:
        raise AudioDeviceError(f"no audio {kind} device found ({exc})") from exc
    if not info or info.get(f"max_{kind}_channels", 0) < 1:
        raise AudioDeviceError(f"no audio {kind} device found")
    return info
