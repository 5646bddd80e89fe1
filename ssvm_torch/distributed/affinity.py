"""Pinning the shared exchange's ranks to CPUs (``SSVM_SHARED_PIN``): ``compact`` gives each rank its own
physical cores, filling one last-level-cache domain before the next; ``none`` (the default) leaves placement to
the operating system.

Why: the ranks of :mod:`.shared_memory` read and write one w, so a cache line one rank wrote is fetched from that
rank's cache by the next that reads it, and such a transfer costs least between cores of one L3 domain (an AMD
CCX, a socket's mesh); two ranks on the two hardware threads of one core share its execution units and halve
each other's steps. Unpinned, the operating system may place two ranks on sibling threads or in different
domains, and it migrates them (each move leaves a rank's cache behind). docs/distributed.md ("Measured on 16
cores") has the profile that asked for it: on 16 CPUs a shared step cost 62.6 us at P = 2 and 77.6 at P = 8.

The topology comes from Linux's sysfs (``/sys/devices/system/cpu/cpuN/topology`` and the highest level
under ``cache/``); where a file is missing (another system, a container that hides it) each CPU counts as a
core of its own in one domain, and the order is the CPUs' numbers.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from ..errors import env_choice

PIN_ENV = "SSVM_SHARED_PIN"
PIN_CHOICES = ("none", "compact")
SYSFS_CPU = Path("/sys/devices/system/cpu")


class Cpu(NamedTuple):
    """One logical CPU: its number, its last-level cache domain (the lowest CPU sharing its last-level cache), its
    package and core ids (one physical core: one (package, core) pair) and its rank among its core's
    hardware threads (0: the first)."""
    cpu: int
    domain: int
    package: int
    core: int
    thread: int


def pin_choice() -> str:
    """``SSVM_SHARED_PIN``: ``none`` (default) or ``compact``."""
    return env_choice(PIN_ENV, PIN_CHOICES, "none")


def _read_int_list(path: Path) -> list[int] | None:
    """A sysfs CPU list ("0-3,8-11") as numbers; None when the file is missing or unreadable."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    out = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out or None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _last_level(cache: Path) -> Path:
    """The ``indexN`` folder of the highest cache level under ``cache`` (index3 on most x86 machines; a machine
    without an L3 has its L2 as the last level); ``cache / "index3"`` where none says its level."""
    best, level = cache / "index3", -1
    for index in (sorted(cache.glob("index*")) if cache.is_dir() else []):
        lv = _read_int(index / "level")
        if lv is not None and lv > level:
            best, level = index, lv
    return best


def cpu_topology(cpus, root: Path = SYSFS_CPU) -> list[Cpu]:
    """The :class:`Cpu` of each CPU number in ``cpus`` read from sysfs under ``root`` (a missing file: the CPU
    is a core of its own, domain 0)."""
    out = []
    for c in sorted(cpus):
        base = root / f"cpu{c}"
        siblings = _read_int_list(base / "topology" / "thread_siblings_list") or [c]
        l3 = _read_int_list(_last_level(base / "cache") / "shared_cpu_list")
        package = _read_int(base / "topology" / "physical_package_id")
        core = _read_int(base / "topology" / "core_id")
        out.append(Cpu(c, min(l3) if l3 else 0, 0 if package is None else package,
                       c if core is None else core, sorted(siblings).index(c) if c in siblings else 0))
    return out


def compact_order(topology: list[Cpu]) -> list[int]:
    """The CPUs in the order ranks take them: the first hardware thread of every physical core, domain by
    domain (cores in a domain by their lowest CPU), then the second threads in the same order, and so on;
    so P ranks on at most as many cores as one domain has share that domain's cache, each on a core of
    its own."""
    first_cpu: dict[tuple[int, int], int] = {}
    for t in topology:
        key = (t.package, t.core)
        first_cpu[key] = min(first_cpu.get(key, t.cpu), t.cpu)
    return [t.cpu for t in sorted(topology, key=lambda t: (t.thread, t.domain, first_cpu[(t.package, t.core)],
                                                           t.cpu))]


def rank_cpus(order: list[int], local_rank: int, local_size: int, threads: int) -> list[int] | None:
    """The CPUs of rank ``local_rank`` of ``local_size``, ``threads`` each (consecutive in ``order``); None
    when the ranks' threads outnumber the CPUs (pinning would stack ranks on one CPU)."""
    if local_size * threads > len(order):
        return None
    return order[local_rank * threads:(local_rank + 1) * threads]


def pin_rank(local_rank: int, local_size: int, threads: int) -> tuple[list[int] | None, str]:
    """Pin this process as ``SSVM_SHARED_PIN`` says: (the CPUs it now runs on, ""); (None, "") with ``none``;
    (None, why not) for ``compact`` without ``os.sched_setaffinity`` or where the ranks' threads outnumber the
    CPUs this process may use."""
    if pin_choice() == "none":
        return None, ""
    if not hasattr(os, "sched_setaffinity"):
        return None, "this system has no os.sched_setaffinity"
    allowed = sorted(os.sched_getaffinity(0))
    cpus = rank_cpus(compact_order(cpu_topology(allowed)), local_rank, local_size, threads)
    if cpus is None:
        return None, (f"{local_size} ranks x {threads} threads outnumber the {len(allowed)} CPUs this process may "
                      "use")
    # every thread the process has already (torch's and numba's pools, the process group's), not only this one:
    # sched_setaffinity(0) sets the calling thread's; threads started later inherit it
    tasks = Path("/proc/self/task")
    for tid in ([int(t) for t in os.listdir(tasks)] if tasks.is_dir() else [0]):
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:                     # a thread that ended meanwhile
            pass
    return cpus, ""
