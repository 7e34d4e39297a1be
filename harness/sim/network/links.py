"""A SimPy network of links shared by flows (the detailed engine's and async PS's network).

``send(links, nbytes)`` returns an event that fires when the last byte has left; every flow
start or finish re-computes the max-min fair rates of the flows in flight. Starts and
finishes at the same instant are batched into one re-computation.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass

import simpy

from harness.sim.network.flow import DONE, maxmin_rates_plain


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes (for the benchmark)."""

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


@dataclass
class _Flow:
    links: tuple[int, ...]
    size: float
    remaining: float
    done: simpy.Event
    rate: float = 0.0


class FluidNetwork:
    """Links with capacities (bytes/s) shared max-min fairly by the flows crossing them."""

    def __init__(self, env: simpy.Environment, capacity: Sequence[float]) -> None:
        self.env = env
        self.capacity = [float(c) for c in capacity]
        self.flows: list[_Flow] = []
        self.link_bytes = [0.0] * len(self.capacity)
        self._last = env.now
        self._generation = 0
        self._pending = False

    def send(self, links: Sequence[int], nbytes: float) -> simpy.Event:
        """Start a flow now; the event fires when its last byte has left."""
        done = self.env.event()
        if nbytes <= 0 or not links:
            done.succeed()
            return done
        self._advance()
        self.flows.append(_Flow(tuple(links), nbytes, nbytes, done))
        for link in links:
            self.link_bytes[link] += nbytes
        self._dirty()
        return done

    def deliver(self, links: Sequence[int], nbytes: float, latency: float
                ) -> Generator[simpy.Event, None, None]:
        """A message over ``links``: its bytes share the links with every other flow, and it
        arrives ``latency`` after its last byte leaves (the path's propagation and switch
        delays, paid once per message, not per byte). Run it as a process or ``yield from``."""
        yield self.send(links, nbytes)
        yield self.env.timeout(latency)

    def _advance(self) -> None:
        dt = self.env.now - self._last
        if dt > 0:
            for f in self.flows:
                f.remaining -= f.rate * dt
        self._last = self.env.now

    def _dirty(self) -> None:
        self._generation += 1  # the timer set for the old rates is now stale
        if not self._pending:
            self._pending = True
            wake = self.env.timeout(0)
            wake.callbacks.append(self._recompute)

    def _recompute(self, _event: simpy.Event) -> None:
        self._pending = False
        self._advance()
        if not self.flows:
            return
        rates = maxmin_rates_plain([f.links for f in self.flows], self.capacity)
        for f, r in zip(self.flows, rates, strict=True):
            f.rate = r
        dt = min(f.remaining / f.rate for f in self.flows)
        generation = self._generation
        timer = self.env.timeout(max(dt, 0.0))
        timer.callbacks.append(lambda _e: self._finish(generation))

    def _finish(self, generation: int) -> None:
        if generation != self._generation:
            return
        self._advance()
        now = self.env.now
        # done: (almost) no bytes left, or so few that finishing them would not move the clock
        finished: list[_Flow] = []
        running: list[_Flow] = []
        for f in self.flows:
            done = f.remaining <= DONE * f.size or now + f.remaining / f.rate <= now
            (finished if done else running).append(f)
        self.flows = running
        for f in finished:
            f.done.succeed()
        self._dirty()
