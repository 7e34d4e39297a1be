"""Docs that cannot drift: what a command prints is what docs/ says it prints."""

from __future__ import annotations

from pathlib import Path

from harness.docs import reference, validation

ROOT = Path(__file__).resolve().parent.parent


def test_the_command_reference_is_what_the_commands_help_prints():
    """Regenerate with `python -m harness.docs.reference > docs/COMMANDS.md`."""
    assert (ROOT / "docs" / "COMMANDS.md").read_text() == reference.render()


def test_the_readme_is_a_few_minutes_read():
    assert len((ROOT / "README.md").read_text().splitlines()) < 200


def test_the_validation_tables_are_what_their_commands_print(device_comparison, layout_picks):
    """Regenerate with `python -m harness.docs.validation > docs/VALIDATION.md` after a change
    that moves a figure; each section is its command's output."""
    assert (ROOT / "docs" / "VALIDATION.md").read_text() == validation.render(
        device_comparison=device_comparison, layout_picks=layout_picks)
