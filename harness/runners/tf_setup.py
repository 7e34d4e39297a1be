"""What every TF runner module shares, child side: threads, devices, strategies, step errors.

Kept apart so the synchronous loop (tf_runner), Keras fit (tf_fit) and the parameter server
(tf_ps) configure the process and build their strategies the same way without importing one
another: the intra/inter-op threads and logical CPU devices (set before TensorFlow's runtime
starts), the one_device / mirrored / central_storage, multi_worker_mirrored and TPU strategy
objects, and the one-line StepError a failed TF op in a step becomes.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from harness.core.case import Case
from workloads.operators import OpRecord

INTER_OP_THREADS = 2
LOGICAL_DEVICE_NOTE = ("replicas are logical CPU devices of one process that share the same "
                       "{cores} cores: the timing measures the strategy's overhead and the run "
                       "checks correctness, not scaling")
COLLECTIVES = ("RING", "NCCL", "AUTO")
#: What a strategy object says of itself for the row's ``extra`` (devices, collective, TPU
#: cores), and for one_device the model as operators (tf_runner).
StrategyDetails = dict[str, str | int | float | list[str] | list[OpRecord]]



def cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _configure(local_processes: int, logical_cpus: int = 1, threads: int | None = None
               ) -> int:
    """Threads (this machine's cores over its processes, unless given) and devices, before
    anything starts TF's runtime; returns intra-op threads.

    GPUs are hidden: stratbench's TF cases are CPU cases (replicas are processes or logical
    CPU devices), which keeps a run the same on a machine that happens to have a GPU.
    """
    threads = threads or max(1, cores() // max(1, local_processes))
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(INTER_OP_THREADS)
    tf.config.set_visible_devices([], "GPU")
    if logical_cpus > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(logical_cpus)])
    return threads


def _cross_device_ops(case: Case) -> Any:
    """MirroredStrategy's all-reduce: TF's default on CPUs (collective ring) unless chosen."""
    name = case.options.get("cross_device_ops", "default")
    if name == "default":
        return None
    if name == "reduction_to_one_device":
        return tf.distribute.ReductionToOneDevice()
    if name == "hierarchical_copy":
        if case.replicas % 2:
            # measured (tests/test_tf_reductions.py): with 3 devices the all-reduce silently
            # leaves out the third replica's value
            raise ValueError("hierarchical_copy needs an even number of replicas: TF's "
                             "HierarchicalCopyAllReduce drops a device when the count is odd")
        return tf.distribute.HierarchicalCopyAllReduce(num_packs=1)
    raise ValueError(f"unknown cross_device_ops {name!r} (choose from default, "
                     "reduction_to_one_device, hierarchical_copy)")


def _single_process_strategy(case: Case) -> tuple[Any, StrategyDetails]:
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:case.replicas]
    if case.strategy == "one_device":
        return tf.distribute.OneDeviceStrategy(devices[0]), {"devices": devices}
    details: StrategyDetails = {"devices": devices, "logical_cpu_devices": len(devices),
                                "note": LOGICAL_DEVICE_NOTE.format(cores=cores())}
    if case.strategy == "mirrored":
        strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=_cross_device_ops(case))
        ops = getattr(strategy.extended, "_cross_device_ops", None)  # what TF picked
        details["cross_device_ops"] = type(ops).__name__
    else:
        strategy = tf.distribute.experimental.CentralStorageStrategy(devices)
        details["parameter_device"] = devices[0]
    return strategy, details


def _collective_timeout(case: Case) -> float:
    """Seconds a collective waits for a peer before it fails (never forever)."""
    return float(case.options.get("collective_timeout_s", max(10.0, case.timeout_s / 2)))


def _patient_coordination(cluster: dict[str, list[str]], timeout_s: float) -> None:
    """Start TF's coordination service as MultiWorkerMirroredStrategy would (it then keeps
    ours), with a heartbeat deadline as long as a collective's: a worker's heartbeat queues
    behind the tables' first broadcast on a shaped link (recsys:L, 512 MB, 4 hosts at
    100 Mbit/s), and the default 10 s declared a live worker dead, which surfaced as
    Keras's "'NoneType' object has no attribute 'assign'" on its peers."""
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.eager import context

    if context.context().coordination_service is not None:
        return
    jobs = [job for job in ("chief", "worker") if job in cluster]
    context.context().configure_coordination_service(
        service_type="standalone", service_leader=f"/job:{jobs[0]}/replica:0/task:0",
        heartbeat_timeout_in_ms=int(timeout_s * 1000),
        coordinated_jobs=[coordination_config_pb2.CoordinatedJob(
            name=job, num_tasks=len(cluster[job])) for job in jobs])


def _multi_worker_strategy(case: Case) -> tuple[Any, StrategyDetails]:
    collective = str(case.options.get("collective", "RING")).upper()
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r} (choose from "
                         f"{', '.join(COLLECTIVES)})")
    timeout = _collective_timeout(case)
    _patient_coordination(json.loads(os.environ["TF_CONFIG"])["cluster"], timeout)
    impl = getattr(tf.distribute.experimental.CommunicationImplementation, collective)
    options = tf.distribute.experimental.CommunicationOptions(implementation=impl,
                                                              timeout_seconds=timeout)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    return strategy, {"collective": collective, "collective_timeout_s": timeout,
                      "workers": cluster["worker"]}


class TPUUnreachableError(RuntimeError):
    """The environment names a TPU that TPUClusterResolver cannot attach to."""


def _tpu_strategy() -> tuple[Any, StrategyDetails]:
    """Attach to the TPU the environment names: TPU_NAME (a Cloud TPU node or Colab's
    address), else the chips of this TPU VM ('local')."""
    name = os.environ.get("TPU_NAME", "" if "COLAB_TPU_ADDR" in os.environ else "local")
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)
        tf.config.experimental_connect_to_cluster(resolver)
        topology = tf.tpu.experimental.initialize_tpu_system(resolver)
    except Exception as exc:  # advertised, but not there: say which TPU and why
        raise TPUUnreachableError(f"TPU {name!r} is advertised by the environment but "
                                  f"could not be reached: {type(exc).__name__}: {exc}") from exc
    strategy = tf.distribute.TPUStrategy(resolver)
    return strategy, {"tpu": name, "tpu_cores": int(topology.num_tasks
                                                    * topology.num_tpus_per_task),
                      "note": "TPU matmuls use bfloat16 passes by default: the weights "
                              "differ from the CPU reference by more than float32 rounding"}


_BOILERPLATE = ("[[", "File ", "Detected at", "Graph execution error",
                "The error could be from a previous operation", "Restart your program",
                "The tasks have crashed")


class StepError(RuntimeError):
    """A TF op failed in a step; the message is the op error's telling line."""


@contextlib.contextmanager
def _step_errors(step: int) -> Iterator[None]:
    """TF's op errors bury what happened ('Collective has timed out during execution.',
    'The following tasks are unhealthy (stopped sending heartbeats): ...') among graph
    locations and boilerplate: lift it into one clear line."""
    try:
        yield
    except tf.errors.OpError as exc:
        lines = [ln.strip() for ln in str(exc.message).splitlines() if ln.strip()]
        telling = [ln for ln in lines if not ln.startswith(_BOILERPLATE)]
        what = " ".join(telling[:2] if telling and telling[0].endswith(":") else telling[:1])
        raise StepError(f"step {step}: {type(exc).__name__}: {what or exc.message}") from exc
