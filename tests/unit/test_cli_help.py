"""What ``trunner <command> --help`` promises matches what the command does."""

from __future__ import annotations

import argparse

from trunner import cli


def _subcommand(name: str) -> argparse.ArgumentParser:
    parser = cli._parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[name]
            return sub
    raise AssertionError("no subcommands")


def test_dashboard_group_help_does_not_promise_every_group() -> None:
    # The dashboard never lists groups from Redis: without --group it refuses to start
    # (serve_dashboard_command raises "name the groups to show").
    help_text = _subcommand("dashboard").format_help()
    assert "default: all" not in help_text
    group = next(a for a in _subcommand("dashboard")._actions if "--group" in a.option_strings)
    assert group.help is not None
    assert "at least one" in group.help


def test_times_are_shown_by_one_guarded_function() -> None:
    """The command's time formatting crashed on a time no calendar holds (a pause mark of
    twenty digits: OSError, Value too large); the dashboard's copy was guarded."""
    from trunner._util import utc_text  # noqa: PLC0415
    from trunner.dashboard import _app  # noqa: PLC0415

    assert vars(cli)["_when"] is utc_text
    assert vars(_app)["_when"] is utc_text
    assert utc_text(99999999999999999999 / 1000) == "?"
    assert utc_text(float("inf")) == utc_text(float("nan")) == utc_text(None) == utc_text(0) == "-"
    assert utc_text(86400.5) == "1970-01-02 00:00:00"
