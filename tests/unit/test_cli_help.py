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
