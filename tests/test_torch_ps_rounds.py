"""A synchronous parameter-server round applies one update per tensor, whatever order the
workers' pushes arrived in (arrival order used to decide the weights' rounding)."""

from __future__ import annotations

import itertools

import lazy

torch = lazy.module("torch")  # imported by the first test that uses it, not at collection


def test_a_round_adds_the_pushes_in_worker_order_whatever_their_arrival():
    g = torch.Generator().manual_seed(0)  # skipped here where torch is not installed
    from harness.runners.torch_ps import _summed

    pushes = [(w, [("dense", None, torch.randn(1000, generator=g) * 10 ** w),
                   ("table", torch.tensor([w, 7]), torch.randn(2, 4, generator=g))])
              for w in range(4)]
    results = [_summed(list(order)) for order in itertools.permutations(pushes)]
    first = dict((name, (rows, values)) for name, rows, values in results[0])
    expected = pushes[0][1][0][2].clone()
    for w in range(1, 4):
        expected += pushes[w][1][0][2]
    assert torch.equal(first["dense"][1], expected)  # worker order, bit for bit
    assert first["table"][0].tolist() == [0, 7, 1, 7, 2, 7, 3, 7]
    for other in results[1:]:
        again = {name: (rows, values) for name, rows, values in other}
        assert torch.equal(again["dense"][1], first["dense"][1])
        assert torch.equal(again["table"][1], first["table"][1])
