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
