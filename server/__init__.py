"""The websocket voice server: ``quicksilver serve``, the ``/ws`` protocol and the browser client.

- :mod:`server.protocol` — the protocol's messages, parsing and order rules, without I/O.
- :mod:`server.models` — the models every session shares (loaded once per process).
- :mod:`server.session` — one ``/ws`` connection driving one voice pipeline session.
- :mod:`server.http` — plain GETs through the handshake hook: static client, ``/healthz``, ``/metrics``.
- :mod:`server.cleanup_service` — ``/cleanup``: transcript cleanup as a service, live-caption sentences.
- :mod:`server.mqtt` — the MQTT event bus: session events out, cleanup requests in.
- :mod:`server.app` — the server: limits, authentication, startup and shutdown.
"""
