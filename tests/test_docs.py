"""Docs that cannot drift: what a command prints is what docs/ says it prints."""

from __future__ import annotations

from pathlib import Path

from harness.commands.reference import render

ROOT = Path(__file__).resolve().parent.parent


def test_the_command_reference_is_what_the_commands_help_prints():
    """Regenerate with `python -m harness.commands.reference > docs/COMMANDS.md`."""
    assert (ROOT / "docs" / "COMMANDS.md").read_text() == render()


def test_the_readme_is_a_few_minutes_read():
    assert len((ROOT / "README.md").read_text().splitlines()) < 200
