"""What ``trunner <command> --help`` promises matches what the command does."""

from __future__ import annotations

import argparse
import importlib.metadata

import pytest

import trunner
from trunner import cli


def _subcommand(name: str) -> argparse.ArgumentParser:
    parser = cli._parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[name]
            return sub
    raise AssertionError("no subcommands")


def test_dashboard_group_help_says_it_narrows_what_is_found() -> None:
    # Without --group the dashboard shows every group it finds on Redis; --group narrows.
    group = next(a for a in _subcommand("dashboard")._actions if "--group" in a.option_strings)
    assert group.help is not None
    assert "show only this group" in group.help
    assert "default: every group found" in group.help


def test_version_prints_the_installed_version(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.8.7")
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    printed = capsys.readouterr().out
    assert printed.startswith("trunner 9.8.7 (Python 3.")
    assert printed.endswith(")\n")


def test_version_without_the_distribution_is_the_packages_own(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"trunner {trunner.__version__} (Python ")


def test_times_are_shown_by_one_guarded_function() -> None:
    """The command's time formatting crashed on a time no calendar holds (a pause mark of
    twenty digits: OSError, Value too large); the dashboard's copy was guarded."""
    from trunner._util import utc_text  # noqa: PLC0415
    from trunner.dashboard import _pages as _app  # noqa: PLC0415

    assert vars(cli)["_when"] is utc_text
    assert vars(_app)["_when"] is utc_text
    assert utc_text(99999999999999999999 / 1000) == "?"
    assert utc_text(float("inf")) == utc_text(float("nan")) == utc_text(None) == utc_text(0) == "-"
    assert utc_text(86400.5) == "1970-01-02 00:00:00"
