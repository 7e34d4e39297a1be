"""Docs that cannot drift: what a command prints is what docs/ says it prints."""

from __future__ import annotations

from pathlib import Path

from harness.docs import reference, systems, validation

ROOT = Path(__file__).resolve().parent.parent


def test_the_command_reference_is_what_the_commands_help_prints():
    """Regenerate with `python -m harness.docs.reference > docs/COMMANDS.md`."""
    assert (ROOT / "docs" / "COMMANDS.md").read_text() == reference.render()


def test_a_verb_reached_alone_first_keeps_its_short_help_option():
    """click keeps a command's help option from the first context that asks for it: a verb
    invoked alone (as a test's CliRunner does) before the reference is written must still
    take -h (a CI run's order once lost it for `bench`)."""
    from click.testing import CliRunner

    from harness.commands import bench

    assert CliRunner().invoke(bench.command, ["-h"]).exit_code == 0
    assert (ROOT / "docs" / "COMMANDS.md").read_text() == reference.render()


def test_the_grammar_systems_strategies_and_stacks_are_what_their_records_say():
    """Regenerate with `python -m harness.docs.systems > docs/SYSTEMS.md`."""
    assert (ROOT / "docs" / "SYSTEMS.md").read_text() == systems.render()


def test_the_readme_is_a_few_minutes_read():
    assert len((ROOT / "README.md").read_text().splitlines()) < 200


def test_the_validation_tables_are_what_their_commands_print(device_comparison, layout_picks,
                                                            emulated_validations):
    """Regenerate with `python -m harness.docs.validation > docs/VALIDATION.md` after a change
    that moves a figure; each section is its command's output."""
    assert (ROOT / "docs" / "VALIDATION.md").read_text() == validation.render(
        device_comparison=device_comparison, layout_picks=layout_picks,
        emulated=emulated_validations)


def test_the_simulator_doc_is_a_reference_and_docs_hold_no_dated_history():
    """docs/ says what is; what changed when is CHANGELOG.md's (a dataset's folder name, such
    as validation/2026-11-24, is a name, not history)."""
    import re

    assert len((ROOT / "docs" / "SIMULATOR.md").read_text().splitlines()) < 600
    dated = re.compile(r"(?<![\w/-])20\d\d-\d\d-\d\d(?![\w/-])")
    for doc in sorted((ROOT / "docs").glob("*.md")):
        found = [line for line in doc.read_text().splitlines() if dated.search(line)]
        assert found == [], (doc.name, found[:3])


def test_the_validation_tables_outside_the_checkout_are_a_one_line_error(tmp_path):
    """The campaigns are read from the checkout's validation/: run elsewhere, the command
    says where to run it, in one line, and exits 2."""
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "harness.docs.validation"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "repository's root" in proc.stderr, proc.stderr
