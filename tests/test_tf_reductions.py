"""Property tests: TensorFlow's cross-replica reductions equal numpy's.

MirroredStrategy over logical CPU devices, `strategy.reduce` (SUM/MEAN, over replicas and
optionally a batch axis), the replica-context all-reduce, and the cross-device ops
`ReductionToOneDevice` and `HierarchicalCopyAllReduce` (which the runners may pick), for random
shapes, dtypes (float32, float64, int32) and replica counts 2-4.

Logical devices can be configured only before TensorFlow's runtime starts, so the properties
run in a fresh pytest process with 4 logical CPUs (the module's child half, selected by
STRATBENCH_TF_REDUCTIONS_CHILD=1); the parent half is one test that runs it and fails with
its output when any property fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

CHILD_ENV = "STRATBENCH_TF_REDUCTIONS_CHILD"
LOGICAL_CPUS = 4

if os.environ.get(CHILD_ENV) != "1":
    @pytest.mark.long
    def test_tf_reductions_equal_numpy_in_a_fresh_process_with_4_logical_cpus() -> None:
        env = {**os.environ, CHILD_ENV: "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
        proc = subprocess.run(
            # --noconftest: the suite's end-of-session check for leftover case processes
            # looks machine-wide and would flag other runs, not this child's
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
             "--noconftest", str(Path(__file__).resolve())],
            env=env, capture_output=True, text=True, timeout=600,
            cwd=Path(__file__).resolve().parents[1], check=False,
        )
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-8000:]
        passed = re.search(r"(\d+) passed", proc.stdout)
        assert passed and int(passed.group(1)) == 4, out[-3000:]
        assert "1 xfailed" in proc.stdout, out[-3000:]  # the known HierarchicalCopy defect

else:
    import numpy as np
    import tensorflow as tf
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    _cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        _cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(LOGICAL_CPUS)])
    DEVICES = [d.name for d in tf.config.list_logical_devices("CPU")]
    ReduceOp = tf.distribute.ReduceOp
    BOUND = {np.float32: 1e3, np.float64: 1e3, np.int32: 1e6}
    PROPS = settings(max_examples=25, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.too_slow])
    _strategies: dict[tuple[int, str], tf.distribute.Strategy] = {}

    def _ops(name: str) -> tf.distribute.CrossDeviceOps | None:
        if name == "reduction_to_one_device":
            return tf.distribute.ReductionToOneDevice()
        if name == "hierarchical_copy":
            return tf.distribute.HierarchicalCopyAllReduce(num_packs=1)
        return None  # TF's choice on CPUs: CollectiveAllReduce (ring)

    def mirrored(n: int, ops: str = "default") -> tf.distribute.Strategy:
        """One strategy per (replicas, ops), made once. Strategies over different device
        sets in one process collide on collective group key 1 ('joining a group with size 3,
        but that group has size 2'), so each gets its own key range through the class's
        test-only `_collective_key_base`."""
        if (n, ops) not in _strategies:
            tf.distribute.MirroredStrategy._collective_key_base = 1000 * len(_strategies)
            _strategies[n, ops] = tf.distribute.MirroredStrategy(DEVICES[:n],
                                                                 cross_device_ops=_ops(ops))
        return _strategies[n, ops]

    @st.composite
    def replica_arrays(draw: st.DrawFn, dtypes: tuple[type, ...] = (np.float32, np.float64,
                                                                    np.int32),
                       counts: tuple[int, ...] = (2, 3, 4)) -> list[np.ndarray]:
        n = draw(st.sampled_from(counts))
        dtype = draw(st.sampled_from(dtypes))
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=5))
        bound = BOUND[dtype]
        if dtype is np.int32:
            elements = st.integers(-int(bound), int(bound))
        else:
            elements = st.floats(-bound, bound, allow_nan=False, allow_infinity=False,
                                 width=32 if dtype is np.float32 else 64)
        return [draw(hnp.arrays(dtype, shape, elements=elements)) for _ in range(n)]

    def per_replica(strategy: tf.distribute.Strategy, arrays: list[np.ndarray]) -> object:
        return strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(arrays[ctx.replica_id_in_sync_group]))

    def expected(op: tf.distribute.ReduceOp, arrays: list[np.ndarray],
                 axis: int | None = None) -> np.ndarray:
        wide = [a.astype(np.float64) for a in arrays]
        stacked = np.stack(wide) if axis is None else np.concatenate(wide, axis=axis)
        reduce_axis = 0 if axis is None else axis
        if op == ReduceOp.SUM:
            return np.sum(stacked, axis=reduce_axis)
        return np.mean(stacked, axis=reduce_axis)

    def assert_equal(got: object, arrays: list[np.ndarray], op: tf.distribute.ReduceOp,
                     axis: int | None = None) -> None:
        value = np.asarray(got.numpy() if hasattr(got, "numpy") else got)
        dtype = arrays[0].dtype
        want = expected(op, arrays, axis)
        assert value.shape == want.shape, (value.shape, want.shape)
        if op == ReduceOp.SUM:
            assert value.dtype == dtype, (value.dtype, dtype)
        if dtype == np.int32 and op == ReduceOp.SUM:
            np.testing.assert_array_equal(value, want.astype(np.int64))
            return
        # worst-case rounding of `terms` additions of numbers bounded by BOUND
        terms = len(arrays) * (arrays[0].shape[axis] if axis is not None else 1)
        eps = np.finfo(np.float32 if dtype == np.float32 else np.float64).eps
        np.testing.assert_allclose(value, want, rtol=1e-6,
                                   atol=terms * terms * BOUND[dtype.type] * eps)

    @PROPS
    @given(arrays=replica_arrays(), op=st.sampled_from([ReduceOp.SUM, ReduceOp.MEAN]),
           batch_axis=st.booleans())
    def test_strategy_reduce_equals_numpy(arrays, op, batch_axis):
        axis = 0 if batch_axis and arrays[0].ndim else None
        strategy = mirrored(len(arrays))
        got = strategy.reduce(op, per_replica(strategy, arrays), axis=axis)
        assert_equal(got, arrays, op, axis)

    def _all_reduce(strategy: tf.distribute.Strategy, op: tf.distribute.ReduceOp,
                    arrays: list[np.ndarray]) -> list[object]:
        result = strategy.run(lambda x: tf.distribute.get_replica_context().all_reduce(op, x),
                              args=(per_replica(strategy, arrays),))
        return list(strategy.experimental_local_results(result))

    @PROPS
    @given(arrays=replica_arrays(), op=st.sampled_from([ReduceOp.SUM, ReduceOp.MEAN]),
           ops=st.sampled_from(["default", "reduction_to_one_device"]))
    def test_all_reduce_gives_every_replica_the_numpy_reduction(arrays, op, ops):
        results = _all_reduce(mirrored(len(arrays), ops), op, arrays)
        assert len(results) == len(arrays)
        for got in results:
            assert_equal(got, arrays, op)

    @PROPS
    @given(arrays=replica_arrays(counts=(2, 4)),
           op=st.sampled_from([ReduceOp.SUM, ReduceOp.MEAN]))
    def test_hierarchical_copy_all_reduce_equals_numpy_on_even_replica_counts(arrays, op):
        for got in _all_reduce(mirrored(len(arrays), "hierarchical_copy"), op, arrays):
            assert_equal(got, arrays, op)

    @PROPS
    @given(arrays=replica_arrays(), op=st.sampled_from([ReduceOp.SUM, ReduceOp.MEAN]),
           ops=st.sampled_from(["reduction_to_one_device", "hierarchical_copy"]))
    def test_cross_device_ops_reduce_and_batch_reduce_to_one_device(arrays, op, ops):
        cross = _ops(ops)
        assert cross is not None
        strategy = mirrored(len(arrays))
        value = per_replica(strategy, arrays)
        assert_equal(cross.reduce(op, value, destinations=DEVICES[0]), arrays, op)
        twice = [a * 2 for a in arrays] if arrays[0].dtype != np.int32 else arrays
        pairs = [(value, DEVICES[0]), (per_replica(strategy, twice), DEVICES[-1])]
        first, second = cross.batch_reduce(op, pairs)
        assert_equal(first, arrays, op)
        assert_equal(second, twice, op)

    @pytest.mark.xfail(strict=True, reason=(
        "TF 2.21's HierarchicalCopyAllReduce assumes a DGX-1 (two halves of n//2 devices): "
        "with 3 replicas its all-reduce leaves out the third replica's value (1+10+100 "
        "gives 11). Strict: this test starts failing the day TF fixes it."))
    def test_hierarchical_copy_all_reduce_on_three_replicas():
        arrays = [np.full((2,), 10.0 ** i, np.float32) for i in range(3)]
        for got in _all_reduce(mirrored(3, "hierarchical_copy"), ReduceOp.SUM, arrays):
            np.testing.assert_array_equal(got.numpy(), [111.0, 111.0])
