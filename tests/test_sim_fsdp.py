"""FSDP's one timeline (harness/sim/step/fsdp.py): its bounds, its closed form where every
collective hides, and the data-parallel and model-parallel steps agreeing through it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.sim.step.fsdp import UnitPass, exposed_s, unit_timeline

seconds = st.floats(min_value=0.0, max_value=5.0, allow_nan=False)
units = st.lists(st.builds(UnitPass, seconds, seconds, seconds, seconds), min_size=1,
                 max_size=12)


def _compute(passes: list[UnitPass]) -> float:
    return sum(u.forward_s + u.backward_s for u in passes)


def _collectives(passes: list[UnitPass]) -> float:
    return sum(2 * u.gather_s + u.scatter_s for u in passes)


@settings(max_examples=200, deadline=None)
@given(units)
def test_a_pass_lasts_at_least_its_compute_and_its_one_stream_and_at_most_both(passes):
    """One worker and one communication stream: neither can finish before its own work,
    and the two in series bound it from above."""
    end = unit_timeline(passes)
    assert end >= _compute(passes) - 1e-9
    assert end >= _collectives(passes) - 1e-9
    assert end <= _compute(passes) + _collectives(passes) + 1e-9


@settings(max_examples=200, deadline=None)
@given(units, st.integers(0, 11), st.sampled_from(["gather_s", "scatter_s"]),
       st.floats(0.0, 3.0))
def test_a_slower_collective_never_shortens_the_pass(passes, which, field, extra):
    from dataclasses import replace

    i = which % len(passes)
    slower = [*passes[:i], replace(passes[i], **{field: getattr(passes[i], field) + extra}),
              *passes[i + 1:]]
    assert unit_timeline(slower) >= unit_timeline(passes) - 1e-9


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.floats(0.1, 5.0), st.floats(0.1, 5.0), st.floats(0.0, 1.0),
       st.floats(0.0, 1.0))
def test_where_every_collective_hides_only_the_first_gathers_and_last_scatter_show(
        n, forward, backward, gather_share, scatter_share):
    """Equal units whose gather fits under a forward and whose gather and reduce-scatter
    fit under a backward: the first gather, the last unit's gather again after the forward
    (resharded), and the last reduce-scatter are exposed, nothing else (2g + r)."""
    gather = gather_share * min(forward, backward / 2)
    scatter = scatter_share * (backward - gather)
    passes = [UnitPass(forward, backward, gather, scatter)] * n
    assert unit_timeline(passes) == pytest.approx(n * (forward + backward) + 2 * gather
                                                  + scatter, abs=1e-9)
    assert exposed_s(passes, 3) == pytest.approx(3 * (2 * gather + scatter), abs=1e-9)


def test_no_units_take_no_time():
    assert unit_timeline([]) == 0.0 and exposed_s([], 4) == 0.0


def test_fsdp_is_one_model_whether_the_step_is_data_parallel_or_a_layout():
    """Llama 3 8B under FSDP on 128 H100s, through the data-parallel step (the
    recommender's FSDP candidate, SimPy's ring all-gathers and reduce-scatters) and through
    the model-parallel step at zero=3 (its FSDP x TP candidates, each layer a unit, halves
    of placed all-reduces): the same timeline, within 2% of each other."""
    import json

    from click.testing import CliRunner

    from harness.cli import cli
    from harness.core.layout import Layout
    from harness.sim.model.structure import layered
    from harness.validate.layout_step import layout_step
    from workloads.precision import precision

    bf16 = precision("bf16")
    as_layout = layout_step("dgx_h100_ib", 128, layered("llama3_8b", bf16),
                            Layout(data=128, zero=3), 128, bf16, None,
                            fused_attention=True).step_time_s
    said = CliRunner().invoke(cli, ["simulate", "--topology", "preset:dgx_h100_ib,hosts=16",
                                    "--workers", "128", "--workload", "llama3_8b",
                                    "--strategy", "fsdp", "--precision", "bf16", "--json"])
    (row,) = json.loads(said.output)
    assert row["step_time_median_s"] == pytest.approx(as_layout, rel=0.02)
