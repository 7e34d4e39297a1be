"""The environment manifest: what machine, software and commit a result came from.

Results are only comparable across machines and nights when each run says where it ran.
Framework probes (TensorFlow, torch) run in child processes with a timeout: importing
TensorFlow is slow and noisy, a broken install must not break `stratbench env`, and the
parent process must stay free of both frameworks (DESIGN.md's boundaries).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, TypedDict

import psutil

MANIFEST_VERSION = 1
PROBE_TIMEOUT_S = 120.0

# TPU VMs and Colab advertise a TPU through these variables or device files.
TPU_ENV_VARS = ("TPU_NAME", "COLAB_TPU_ADDR", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES")
TPU_DEVICE_GLOBS = ("accel*", "vfio/[0-9]*")


class Gpu(TypedDict, total=False):
    """A GPU as the driver (nvidia-smi) or a framework's probe sees it."""

    index: int
    name: str
    memory_bytes: int | None
    driver: str
    device_name: str | None  # TensorFlow's details
    compute_capability: list[int] | None
    capability: str  # torch's "major.minor"


class TpuHints(TypedDict, total=False):
    """Signs of a TPU (``tpu_hints``); the manifest adds the TPUs TensorFlow lists."""

    present: bool
    env: dict[str, str]
    devices: list[str]
    tensorflow: list[str]


#: the project's commit and whether the tree was dirty, from where it was read (``from`` is a
#: keyword: the functional form)
GitCommit = TypedDict("GitCommit", {"commit": str | None, "dirty": bool | None, "from": str})


class FrameworkProbe(TypedDict, total=False):
    """What ``python -m harness.probes NAME`` prints of a framework (or why it is not
    ``available``: None where it was not probed)."""

    available: bool | None
    reason: str
    version: str
    gpus: list[Gpu]
    # TensorFlow
    keras_version: str | None
    keras_implementation: str
    built_with_cuda: bool
    tpus: list[str]
    cpus: list[str]
    # torch
    cuda: str | None
    threads: int
    distributed: bool
    backends: dict[str, bool]
    nccl_version: str | None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    """The marketing name of the CPU (platform.processor() is often empty on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def nvidia_smi_gpus() -> list[Gpu]:
    """GPUs as the driver sees them, independent of any framework's CUDA build."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus: list[Gpu] = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        mem_mib = parts[2].split()[0]
        gpus.append({
            "index": int(parts[0]), "name": parts[1],
            "memory_bytes": int(float(mem_mib) * 2**20) if mem_mib.replace(".", "").isdigit()
            else None,
            "driver": parts[3],
        })
    return gpus


def tpu_hints() -> TpuHints:
    """Signs of a TPU visible without initialising one (TPUStrategy needs a real one)."""
    env = {k: os.environ[k] for k in TPU_ENV_VARS if k in os.environ}
    devices = sorted(str(p) for g in TPU_DEVICE_GLOBS for p in Path("/dev").glob(g))
    return {"present": bool(env or devices), "env": env, "devices": devices}


def git_commit() -> GitCommit:
    """The project's commit, from the source tree of this package or the working directory."""
    here = Path(__file__).resolve().parent.parent
    for where in (here, Path.cwd()):
        try:
            commit = subprocess.run(
                ["git", "-C", str(where), "rev-parse", "HEAD"],
                capture_output=True, text=True, timeout=10, check=True,
            ).stdout.strip()
            dirty = subprocess.run(
                ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True, text=True, timeout=10, check=True,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        return {"commit": commit, "dirty": bool(dirty), "from": str(where)}
    return {"commit": os.environ.get("STRATBENCH_COMMIT"), "dirty": None, "from": "env"}


def probe_framework(name: str, timeout: float = PROBE_TIMEOUT_S) -> FrameworkProbe:
    """Run `harness.probes <name>` in a child and return its JSON, or why it could not. An
    answer found is kept for the process (a framework's versions and devices cannot change
    under a running command, and each probe imports the framework: seconds), and across
    commands in ``$STRATBENCH_PROBE_CACHE`` where that names a folder; a failure is probed
    again next time."""
    if name not in _FOUND:
        cached = _cache_file(name)
        result = _read_cached(cached) or _probe(name, timeout)
        if not result.get("available"):
            return result
        _FOUND[name] = result
        if cached is not None and not cached.is_file():
            _write_cached(cached, result)
    return copy.deepcopy(_FOUND[name])


_FOUND: dict[str, FrameworkProbe] = {}
#: a folder where probes are kept across commands (many commands in one session: a test run,
#: a nightly job); unset, each command probes for itself
PROBE_CACHE_ENV = "STRATBENCH_PROBE_CACHE"
# what else moves a probe's answer: the devices a process may see, the Keras it loads
_PROBE_ENV = ("CUDA_VISIBLE_DEVICES", "TPU_NAME", "TF_USE_LEGACY_KERAS")


def _cache_file(name: str) -> Path | None:
    """Where ``name``'s probe is kept: one file per interpreter, installed version and
    device environment, so a reinstalled framework or other visible devices probe again."""
    folder = os.environ.get(PROBE_CACHE_ENV)
    if not folder:
        return None
    try:
        # TF's Keras is a distribution of its own
        dists = (name, "keras") if name == "tensorflow" else (name,)
        installed = [metadata.version(d) for d in dists]
    except metadata.PackageNotFoundError:
        return None
    key = json.dumps([name, installed, sys.executable,
                      [os.environ.get(k) for k in _PROBE_ENV]])
    return Path(folder) / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def _read_cached(path: Path | None) -> FrameworkProbe | None:
    try:
        return json.loads(path.read_text()) if path is not None else None
    except (OSError, ValueError):
        return None


def _write_cached(path: Path, result: FrameworkProbe) -> None:
    """Written whole under a temporary name, then renamed: a reader never sees half."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f".{path.name}.{os.getpid()}")
        part.write_text(json.dumps(result))
        os.replace(part, path)
    except OSError:
        pass  # a cache that cannot be written is only slower


def _probe(name: str, timeout: float) -> FrameworkProbe:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "harness.probes", name],
            capture_output=True, text=True, timeout=timeout, env=env,
        )
    except subprocess.TimeoutExpired:
        return {"available": False, "reason": f"probe timed out after {timeout:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"available": False, "reason": f"probe failed: {tail}"}
    result: FrameworkProbe = json.loads(lines[-1])
    return result


FRAMEWORK_PROBES = {"tf": "tensorflow", "torch": "torch"}


def collect(frameworks: bool | tuple[str, ...] = True) -> dict[str, Any]:
    """The full manifest. `frameworks=False` skips the slow TF/torch probes; a tuple such as
    ("torch",) probes only the frameworks a run uses."""
    vm = psutil.virtual_memory()
    manifest: dict[str, Any] = {
        "manifest_version": MANIFEST_VERSION,
        "collected_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu": {
            "model": cpu_model(),
            "arch": platform.machine(),
            "physical_cores": psutil.cpu_count(logical=False),
            "logical_cores": psutil.cpu_count(logical=True),
            "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else psutil.cpu_count(logical=True),
        },
        "memory_bytes": vm.total,
        "os": {"system": platform.system(), "release": platform.release(),
               "platform": platform.platform()},
        "python": {"version": platform.python_version(),
                   "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "versions": {dist: _version(dist) for dist in (
            "stratbench", "tensorflow", "tensorflow-cpu", "keras", "tf-keras", "torch",
            "simpy", "pandas", "numpy", "pyarrow", "scipy")},
        "gpus": {"nvidia_smi": nvidia_smi_gpus()},
        "tpu": tpu_hints(),
        "git": git_commit(),
        "privileges": {"root": os.geteuid() == 0 if hasattr(os, "geteuid") else False,
                       "ip": shutil.which("ip"), "tc": shutil.which("tc")},
    }
    if frameworks:
        wanted = tuple(FRAMEWORK_PROBES) if isinstance(frameworks, bool) else frameworks
        skipped: FrameworkProbe = {"available": None,
                                   "reason": "not probed: this run does not use it"}
        tf = probe_framework("tensorflow") if "tf" in wanted else skipped.copy()
        torch = probe_framework("torch") if "torch" in wanted else skipped.copy()
        manifest["frameworks"] = {"tensorflow": tf, "torch": torch}
        manifest["gpus"]["tensorflow"] = tf.get("gpus", [])
        manifest["gpus"]["torch"] = torch.get("gpus", [])
        manifest["tpu"]["tensorflow"] = tf.get("tpus", [])
        manifest["keras_implementation"] = tf.get("keras_implementation")
    return manifest


def fingerprint(manifest: dict[str, Any]) -> str:
    """A short hash of the machine (CPU, cores, memory, GPUs): rows with the same one are
    comparable as history; software versions are left out on purpose, since a regression
    from an upgrade is exactly what history should show."""
    import hashlib

    machine = {"cpu": manifest["cpu"], "memory_bytes": manifest["memory_bytes"],
               "gpus": manifest["gpus"].get("nvidia_smi", []), "host": manifest["host"]}
    return hashlib.sha256(json.dumps(machine, sort_keys=True).encode()).hexdigest()[:12]
