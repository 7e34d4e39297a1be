"""Property tests: gloo's collectives and the parameter server's aggregate are right.

Four gloo ranks live for the whole module; subgroups give world sizes 2-4, and hypothesis
sends each rank its inputs through a queue, so each example costs milliseconds, not a spawn.
"""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.launch.ports import free_ports

RANKS = 4
DTYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "int64": np.int64}


def _rank_main(rank: int, port: int, tasks: Any, results: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=RANKS)
    groups = {n: dist.new_group(list(range(n))) for n in (2, 3, 4)}
    while True:
        task = tasks.get()
        if task is None:
            break
        op, world, array = task
        if rank >= world:
            continue
        group, x = groups[world], torch.from_numpy(array)
        if op == "all_reduce":
            dist.all_reduce(x, group=group)
            out = x.numpy()
        elif op == "reduce_scatter":
            chunk = torch.empty_like(x.reshape(world, -1)[0])
            dist.reduce_scatter(chunk, list(x.reshape(world, -1).clone().unbind(0)), group=group)
            out = chunk.numpy()
        else:  # all_gather
            parts = [torch.empty_like(x) for _ in range(world)]
            dist.all_gather(parts, x, group=group)
            out = torch.stack(parts).numpy()
        results.put((rank, out))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def gloo():
    ctx = mp.get_context("spawn")
    (port,) = free_ports(1)
    tasks = [ctx.Queue() for _ in range(RANKS)]
    results = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(r, port, tasks[r], results), daemon=True)
             for r in range(RANKS)]
    for p in procs:
        p.start()

    def run(op: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
        world = len(arrays)
        for r in range(RANKS):
            tasks[r].put((op, world, arrays[r] if r < world else None))
        got = dict(results.get(timeout=60) for _ in range(world))
        return [got[r] for r in range(world)]

    yield run
    for t in tasks:
        t.put(None)
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()


def _arrays(draw: Any, world: int, divisible: bool) -> list[np.ndarray]:
    dtype = DTYPES[draw(st.sampled_from(sorted(DTYPES)))]
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    if divisible:
        shape = (shape[0] * world, *shape[1:])
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return [rng.integers(-1000, 1000, size=shape).astype(dtype) for _ in range(world)]
    return [rng.standard_normal(shape).astype(dtype) for _ in range(world)]


@st.composite
def collective_inputs(draw: Any, divisible: bool = False) -> list[np.ndarray]:
    world = draw(st.integers(2, RANKS))
    return _arrays(draw, world, divisible)


def _close(a: np.ndarray, b: np.ndarray) -> None:
    if np.issubdtype(a.dtype, np.integer):
        np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-5 if a.dtype == np.float32 else 1e-12,
                                   atol=1e-5 if a.dtype == np.float32 else 1e-12)


@pytest.mark.long
@settings(max_examples=30, deadline=None)
@given(collective_inputs())
def test_all_reduce_equals_numpy_sum(gloo, arrays):
    expected = np.sum(np.stack(arrays), axis=0)
    for out in gloo("all_reduce", arrays):
        _close(out, expected)


@settings(max_examples=30, deadline=None)
@given(collective_inputs(divisible=True))
def test_reduce_scatter_equals_numpy_sum_split(gloo, arrays):
    world = len(arrays)
    total = np.sum(np.stack([a.reshape(world, -1) for a in arrays]), axis=0)
    for rank, out in enumerate(gloo("reduce_scatter", arrays)):
        _close(out, total[rank])


@settings(max_examples=30, deadline=None)
@given(collective_inputs())
def test_all_gather_equals_numpy_stack(gloo, arrays):
    expected = np.stack(arrays)
    for out in gloo("all_gather", arrays):
        _close(out, expected)


@settings(max_examples=40, deadline=None)
@given(workers=st.integers(1, 5), rows=st.integers(1, 20), dim=st.integers(1, 4),
       seed=st.integers(0, 2**31), synchronous=st.booleans())
def test_parameter_server_aggregate_is_the_mean_of_pushed_gradients(workers, rows, dim, seed,
                                                                    synchronous):
    import torch

    from harness.runners.torch_ps import LEARNING_RATE, ShardServer

    rng = np.random.default_rng(seed)
    dense0 = rng.standard_normal((rows, dim)).astype(np.float32)
    table0 = rng.standard_normal((rows, dim)).astype(np.float32)
    server = ShardServer({"dense": torch.tensor(dense0), "table": torch.tensor(table0)},
                         {"table"}, workers, synchronous=synchronous)
    dense_grads = [rng.standard_normal((rows, dim)).astype(np.float32) for _ in range(workers)]
    touched = [np.unique(rng.integers(0, rows, size=3)) for _ in range(workers)]
    row_grads = [rng.standard_normal((len(t), dim)).astype(np.float32) for t in touched]
    futures = [server.push(w, [("dense", None, torch.tensor(dense_grads[w])),
                                ("table", torch.tensor(touched[w]), torch.tensor(row_grads[w]))])
               for w in range(workers)]
    assert all(f.done() for f in futures)
    scale = 1.0 / workers if synchronous else 1.0
    dense_expected = dense0 - LEARNING_RATE * scale * np.sum(dense_grads, axis=0)
    table_expected = table0.copy()
    for t, g in zip(touched, row_grads, strict=True):
        np.add.at(table_expected, t, -LEARNING_RATE * scale * g)
    np.testing.assert_allclose(server.params["dense"].numpy(), dense_expected, rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(server.params["table"].numpy(), table_expected, rtol=1e-5,
                               atol=1e-6)
    # a pull after the first one carries exactly the rows touched since
    server.pull(0)
    future = server.push(0, [("table", torch.tensor([0]), torch.ones((1, dim)))])
    if synchronous and workers > 1:
        assert not future.done()  # waits for the other workers of the step
    else:
        _, updates = server.pull(0)
        assert [(n, r.tolist()) for n, r, _ in updates if r is not None] == [("table", [0])]



def test_a_parameter_server_counts_the_pushes_and_rows_each_pull_spans():
    """What settles how many rows a pull carries (one union of how many pushes): after a
    worker's first pull (everything), each pull records the updates applied since that
    worker's last and the distinct table rows it carries; dense tensors are not rows."""
    import torch

    from harness.runners.torch_ps import ShardServer

    server = ShardServer({"dense": torch.zeros(2), "table": torch.zeros((10, 2))}, {"table"},
                         2, synchronous=False)
    server.pull(0)
    server.pull(1)
    for worker, rows in ((1, [1, 2]), (1, [2, 3]), (0, [3])):
        server.push(worker, [("dense", None, torch.ones(2)),
                             ("table", torch.tensor(rows), torch.ones((len(rows), 2)))])
    server.pull(0)  # three pushes since, rows {1, 2, 3}
    server.pull(1)  # the same three
    server.push(0, [("table", torch.tensor([5]), torch.ones((1, 2)))])
    server.pull(0)  # one push, one row
    stats = server.stats()
    assert server.pull_spans == [3, 3, 1] and server.pull_rows == [3, 3, 1]
    assert stats["pull_span_mean"] == pytest.approx(7 / 3)
    assert stats["pull_rows_mean"] == pytest.approx(7 / 3)
