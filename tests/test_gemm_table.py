"""The GEMM kernel constants the system files carry are the fit on OpenXLA's table."""

import json
from importlib import resources

import pytest

from harness.sim.systems.preset import load_preset
from harness.validate import gemm_table


@pytest.fixture(scope="module")
def fit():
    return gemm_table.fit()


def test_the_checked_in_table_is_the_published_one_with_its_source():
    data = json.loads(resources.files("harness.validate.published")
                      .joinpath(gemm_table.TABLE).read_text())
    assert len(data["entries"]) == 375 and data["source"]["commit"]
    shapes = gemm_table.table()
    assert {(s.b, s.m, s.n, s.k) for s in shapes} == {
        (b, m, n, k) for b in (1, 2, 4) for m in (256, 512, 1024, 2048, 4096)
        for n in (256, 512, 1024, 2048, 4096) for k in (256, 512, 1024, 2048, 4096)}
    peak = load_preset(gemm_table.SYSTEM).device.peak("bf16")
    assert all(s.flops_per_s < peak for s in shapes)  # no entry beyond the datasheet


def test_the_system_files_carry_the_fit(fit):
    for name in ("dgx_h100_ib", "hgx_h200"):
        device = load_preset(name).device
        assert device.gemm_fixed_s == pytest.approx(fit.fixed_s, abs=0.05e-6), name
        assert device.gemm_k_overhead == pytest.approx(fit.k_overhead, abs=0.5), name


def test_the_two_constants_are_what_brings_the_formula_to_the_table(fit):
    with_constants = sorted(abs(e) for e in fit.errors)
    without = sorted(abs(e) for e in fit.errors_without)
    assert with_constants[len(with_constants) // 2] < 0.06
    assert without[len(without) // 2] > 5 * with_constants[len(with_constants) // 2]
    assert 0.5 < fit.efficiency < 0.9  # the main loop's rate, before the tiles' overhead


def test_the_command_prints_the_fit_and_the_files(fit):
    text = gemm_table.format_fit(fit)
    assert "gemm_fixed 5.0 us, gemm_k_overhead 105" in text
    assert "dgx_h100_ib" in text and "median |error|" in text
