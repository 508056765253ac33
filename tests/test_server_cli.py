"""``quicksilver serve``: the command is registered and refuses bad limits before loading models."""

from __future__ import annotations

import quicksilver


def test_serve_is_registered_with_its_options(capsys):
    parser = quicksilver.build_parser()
    args = parser.parse_args(["serve", "--port", "0", "--token", "t", "--allow-origin", "http://a.example",
                              "--max-sessions", "4", "--idle-timeout", "30", "--max-interim-sessions", "2"])
    assert (args.host, args.port, args.token, args.allow_origin, args.max_sessions) == (
        "127.0.0.1", 0, "t", ["http://a.example"], 4)


def test_bad_limits_exit_2_without_loading_models(capsys):
    assert quicksilver.main(["serve", "--max-sessions", "0"]) == 2
    assert "--max-sessions" in capsys.readouterr().err
