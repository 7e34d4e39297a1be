"""Framework probes, run as `python -m harness.probes tensorflow|torch` in a child process.

Prints one JSON line. Kept apart from environment.py so the parent never imports a framework.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the child imports nothing of the parent's
    from harness.run.environment import FrameworkProbe, Gpu


def probe_tensorflow() -> FrameworkProbe:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import tensorflow as tf
    except ImportError as exc:
        return {"available": False, "reason": f"not installed ({exc}); "
                "pip install 'stratbench[tf]'"}
    gpus: list[Gpu] = []
    for dev in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(dev)
        gpus.append({"name": dev.name, "device_name": details.get("device_name"),
                     "compute_capability": details.get("compute_capability")})
    tpus = [d.name for d in tf.config.list_physical_devices("TPU")]
    keras_module = type(tf.keras.Model).__module__ if hasattr(tf, "keras") else ""
    try:
        import keras
        keras_version = keras.__version__
    except ImportError:
        keras_version = None
    legacy = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
    impl = "tf_keras" if legacy or keras_module.startswith("tf_keras") else "keras3"
    return {"available": True, "version": tf.__version__, "keras_version": keras_version,
            "keras_implementation": impl, "built_with_cuda": tf.test.is_built_with_cuda(),
            "gpus": gpus, "tpus": tpus,
            "cpus": [d.name for d in tf.config.list_physical_devices("CPU")]}


def probe_torch() -> FrameworkProbe:
    try:
        import torch
    except ImportError as exc:
        return {"available": False, "reason": f"not installed ({exc}); "
                "pip install 'stratbench[torch]'"}
    import torch.distributed as dist

    gpus: list[Gpu] = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": props.name, "memory_bytes": props.total_memory,
                         "capability": f"{props.major}.{props.minor}"})
    backends = {b: getattr(dist, f"is_{b}_available", lambda: False)()
                for b in ("gloo", "nccl", "mpi")}
    return {"available": True, "version": torch.__version__, "cuda": torch.version.cuda,
            "gpus": gpus, "threads": torch.get_num_threads(),
            "distributed": dist.is_available(), "backends": backends,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version()))
            if backends["nccl"] else None}


PROBES = {"tensorflow": probe_tensorflow, "torch": probe_torch}

if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    if name not in PROBES:
        print(f"usage: python -m harness.probes {{{','.join(PROBES)}}}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(PROBES[name]()))
