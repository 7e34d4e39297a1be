"""The manifest: fields present without frameworks, probes fail softly."""

from __future__ import annotations

import subprocess

from harness.run import environment


def test_manifest_without_frameworks_has_the_machine():
    m = environment.collect(frameworks=False)
    assert m["cpu"]["logical_cores"] >= m["cpu"]["usable_cores"] >= 1
    assert m["cpu"]["model"]
    assert m["memory_bytes"] > 2**28
    assert m["versions"]["pandas"]
    assert "frameworks" not in m


def test_git_commit_is_the_checkout_head():
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return  # not a git checkout (e.g. an sdist): nothing to compare
    assert environment.git_commit()["commit"] == head.stdout.strip()


def test_unknown_probe_reports_unavailable_not_a_crash():
    result = environment.probe_framework("no_such_framework", timeout=60)
    assert result["available"] is False
    assert "probe failed" in result["reason"]


def test_nvidia_smi_absent_or_parsed():
    gpus = environment.nvidia_smi_gpus()
    assert isinstance(gpus, list)
    for gpu in gpus:
        assert gpu["name"] and gpu["memory_bytes"]


def test_a_probe_is_kept_across_commands_in_the_cache_folder_until_the_devices_change(
        tmp_path, monkeypatch):
    monkeypatch.setenv(environment.PROBE_CACHE_ENV, str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    calls = []

    def probe(name, timeout):
        calls.append(name)
        return {"available": True, "version": f"probe {len(calls)}"}

    monkeypatch.setattr(environment, "_probe", probe)

    def command():  # a new command: nothing kept in its process yet
        monkeypatch.setattr(environment, "_FOUND", {})
        return environment.probe_framework("torch")

    assert command() == command() == {"available": True, "version": "probe 1"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # other devices visible: probed again
    assert command()["version"] == "probe 2" and calls == ["torch", "torch"]
    monkeypatch.delenv(environment.PROBE_CACHE_ENV)  # no folder: each command probes
    command()
    assert len(calls) == 3
