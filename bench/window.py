"""A measurement window: wall time, server CPU and harness CPU between two instants.

The harness's own CPU is recorded too: with the server on core 1 and the harness on core 0, a
harness core near 100% means the figure is client-bound (machine-limits.md §1 notes the same of
wrk), so throughput is then a floor and only the server's CPU per operation is meaningful.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from bench import gcstats, proc
from bench.server import CLIENT_CPU, SERVER_CPU, Server

__all__ = ["NOISY", "Window"]

#: A window where other processes took more than this share of the server's core is "noisy":
#: its CPU per operation still holds (the server's own CPU), its throughput and latency do not.
NOISY = 0.05


@dataclass
class Window:
    server: Server
    wall0: float = 0.0
    cpu0: float = 0.0
    split0: tuple[float, float, int] = (0.0, 0.0, 0)
    server_sys: float = 0.0
    server_faults: int = 0
    client0: float = 0.0
    wall: float = 0.0
    server_cpu: float = 0.0
    cpu0_precise: float = 0.0
    server_cpu_precise: float = 0.0
    client_cpu: float = 0.0
    core0: tuple[float, float] = (0.0, 0.0)
    core_busy: float = 0.0
    core_steal: float = 0.0
    client_core0: tuple[float, float] = (0.0, 0.0)
    client_core_busy: float = 0.0
    gc0: dict[str, Any] | None = None
    gc: dict[str, Any] | None = None

    def start(self) -> Window:
        if self.server.gc_stats:
            self.gc0 = gcstats.snapshot(self.server.pid, self.server.log_path)
        self.core0 = proc.core_times(int(SERVER_CPU))
        self.client_core0 = proc.core_times(CLIENT_CPU)
        self.split0 = self.server.usage()
        self.cpu0 = self.split0[0] + self.split0[1]
        self.cpu0_precise = self.server.cpu_precise()
        self.client0 = time.process_time()
        self.wall0 = time.perf_counter()
        return self

    def stop(self) -> Window:
        self.wall = time.perf_counter() - self.wall0
        self.client_cpu = time.process_time() - self.client0
        split = self.server.usage()
        self.server_cpu = split[0] + split[1] - self.cpu0
        self.server_sys = split[1] - self.split0[1]
        self.server_faults = split[2] - self.split0[2]
        self.server_cpu_precise = self.server.cpu_precise() - self.cpu0_precise
        busy, steal = proc.core_times(int(SERVER_CPU))
        self.core_busy = busy - self.core0[0]
        self.core_steal = steal - self.core0[1]
        client_busy, client_steal = proc.core_times(CLIENT_CPU)
        self.client_core_busy = client_busy - self.client_core0[0] + client_steal - self.client_core0[1]
        if self.server.gc_stats:
            self.gc = gcstats.delta(self.gc0, gcstats.snapshot(self.server.pid, self.server.log_path))
        return self

    @property
    def gc_share(self) -> float | None:
        """Share of the server's CPU spent in the cyclic GC (with ``--gc-stats``)."""
        if self.gc is None or not self.server_cpu_precise:
            return None
        return float(sum(self.gc["seconds"])) / self.server_cpu_precise

    @property
    def others_on_core(self) -> float:
        """Share of the server's core taken by other processes (plus hypervisor steal)."""
        if not self.wall:
            return 0.0
        return max(0.0, self.core_busy - self.server_cpu + self.core_steal) / self.wall

    @property
    def others_on_client_core(self) -> float:
        """Share of the harness's core taken by other processes: it slows the load, not the server."""
        if not self.wall:
            return 0.0
        return max(0.0, self.client_core_busy - self.client_cpu) / self.wall

    @property
    def noisy(self) -> bool:
        return self.others_on_core > NOISY or self.others_on_client_core > NOISY

    @property
    def server_busy(self) -> float:
        """Share of one core the server used (1.0 = saturated)."""
        return self.server_cpu / self.wall if self.wall else 0.0

    @property
    def client_busy(self) -> float:
        return self.client_cpu / self.wall if self.wall else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "wall_s": self.wall,
            "server_cpu_s": self.server_cpu,
            "server_cpu_clock_s": self.server_cpu_precise,
            "server_sys_s": self.server_sys,
            "server_minor_faults": self.server_faults,
            "client_cpu_s": self.client_cpu,
            "server_busy": self.server_busy,
            "client_busy": self.client_busy,
            "others_on_server_core": self.others_on_core,
            "steal_s": self.core_steal,
            "others_on_client_core": self.others_on_client_core,
            "noisy": self.noisy,
            "gc": self.gc,
            "gc_share": self.gc_share,
        }
