"""The schema documents itself, and the docs stay equal to it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from results import schema

DESIGN_COLUMNS = (
    "run_id", "case_id", "source", "framework", "strategy", "workload", "size", "cluster",
    "replicas", "status", "reason", "step_time_median_s", "step_time_ci95_low_s",
    "step_time_ci95_high_s", "throughput_samples_s", "scaling_efficiency", "max_weight_diff",
)


def test_schema_has_every_column_design_md_requires():
    assert set(DESIGN_COLUMNS) <= set(schema.COLUMN_NAMES)


def test_row_dataclass_and_column_table_agree():
    assert {f.name for f in dataclasses.fields(schema.ResultRow)} == set(schema.COLUMN_NAMES)
    assert all(c.meaning and c.dtype for c in schema.COLUMNS)


def test_docs_results_md_is_generated_from_the_schema():
    doc = (Path(__file__).parent.parent / "docs" / "RESULTS.md").read_text()
    assert schema.markdown_table() in doc, "regenerate: python -m results.schema > table"
