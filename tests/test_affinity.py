"""Pinning the shared exchange's ranks (ssvm_torch/distributed/affinity.py): the compact order on synthetic
sysfs trees (one physical core per rank, one cache domain filled before the next, sibling threads last), the
fallback where sysfs says nothing, the ranks' slices, and the environment variable refused by name."""
from __future__ import annotations

import os

import pytest

from ssvm_torch.distributed.affinity import compact_order, cpu_topology, pin_rank, rank_cpus
from ssvm_torch.errors import SSVMInputError


def fake_sysfs(root, cores, l3):
    """A sysfs cpu tree: ``cores`` a list of sibling lists (one per physical core, all in package 0),
    ``l3`` a list of the CPU lists sharing one L3."""
    for core_id, siblings in enumerate(cores):
        for c in siblings:
            top = root / f"cpu{c}" / "topology"
            top.mkdir(parents=True)
            (top / "thread_siblings_list").write_text(",".join(map(str, siblings)) + "\n")
            (top / "core_id").write_text(f"{core_id}\n")
            (top / "physical_package_id").write_text("0\n")
            for index, level, shared in (("index0", 1, siblings), ("index2", 2, siblings),
                                         ("index3", 3, next(d for d in l3 if c in d))):
                cache = root / f"cpu{c}" / "cache" / index
                cache.mkdir(parents=True)
                (cache / "level").write_text(f"{level}\n")
                (cache / "shared_cpu_list").write_text(f"{min(shared)}-{max(shared)}\n")


def test_compact_order_fills_a_cache_domain_with_one_rank_per_core(tmp_path):
    """Two L3 domains of two cores with two threads each, siblings numbered adjacently (0,1), (2,3), ...:
    ranks take 0, 2 (domain 0's cores), then 4, 6 (domain 4's), and the second threads last."""
    fake_sysfs(tmp_path, [[0, 1], [2, 3], [4, 5], [6, 7]], [[0, 1, 2, 3], [4, 5, 6, 7]])
    topo = cpu_topology(range(8), root=tmp_path)
    assert [t.thread for t in topo] == [0, 1] * 4 and [t.domain for t in topo] == [0] * 4 + [4] * 4
    order = compact_order(topo)
    assert order == [0, 2, 4, 6, 1, 3, 5, 7]
    assert [rank_cpus(order, r, 2, 1) for r in range(2)] == [[0], [2]]          # both in domain 0
    assert [rank_cpus(order, r, 4, 1) for r in range(4)] == [[0], [2], [4], [6]]
    assert [rank_cpus(order, r, 2, 2) for r in range(2)] == [[0, 2], [4, 6]]
    assert rank_cpus(order, 0, 8, 1) == [0] and rank_cpus(order, 7, 8, 1) == [7]
    assert rank_cpus(order, 0, 5, 2) is None                                      # 10 threads on 8 CPUs


def test_linux_sibling_numbering_and_an_allowed_subset(tmp_path):
    """Siblings numbered k and k + 4 (Intel's usual numbering): the first threads 0-3 before 4-7; a process
    allowed only some CPUs orders those."""
    fake_sysfs(tmp_path, [[0, 4], [1, 5], [2, 6], [3, 7]], [list(range(8))])
    assert compact_order(cpu_topology(range(8), root=tmp_path)) == [0, 1, 2, 3, 4, 5, 6, 7]
    assert compact_order(cpu_topology([1, 5, 6, 2], root=tmp_path)) == [1, 2, 5, 6]


def test_the_last_cache_level_is_the_domain(tmp_path):
    """Without an L3 (index3 absent) the L2 shared by a pair of cores is the domain."""
    fake_sysfs(tmp_path, [[0], [1], [2], [3]], [[0, 1, 2, 3]])
    for c in range(4):
        for name in ("level", "shared_cpu_list"):
            (tmp_path / f"cpu{c}" / "cache" / "index3" / name).unlink()
        (tmp_path / f"cpu{c}" / "cache" / "index3").rmdir()
        (tmp_path / f"cpu{c}" / "cache" / "index2" / "shared_cpu_list").write_text("0-1\n" if c < 2 else "2-3\n")
    assert [t.domain for t in cpu_topology(range(4), root=tmp_path)] == [0, 0, 2, 2]


def test_without_sysfs_each_cpu_is_a_core_of_its_own(tmp_path):
    topo = cpu_topology([3, 1, 2], root=tmp_path / "absent")
    assert [(t.cpu, t.domain, t.core, t.thread) for t in topo] == [(1, 0, 1, 0), (2, 0, 2, 0), (3, 0, 3, 0)]
    assert compact_order(topo) == [1, 2, 3]


def test_pin_rank_follows_the_environment(monkeypatch):
    monkeypatch.delenv("SSVM_SHARED_PIN", raising=False)
    assert pin_rank(0, 1, 1) == (None, "")                  # the default leaves placement to the system
    monkeypatch.setenv("SSVM_SHARED_PIN", "spread")
    with pytest.raises(SSVMInputError, match="SSVM_SHARED_PIN: expected one of \\('none', 'compact'\\), got 'spread'"):
        pin_rank(0, 1, 1)
    monkeypatch.setenv("SSVM_SHARED_PIN", "compact")
    import threading
    allowed = os.sched_getaffinity(0)
    started, stop = threading.Event(), threading.Event()
    tids = []

    def worker():                               # a thread that exists before the pinning (a pool's)
        tids.append(threading.get_native_id())
        started.set()
        stop.wait()
    t = threading.Thread(target=worker)
    t.start()
    started.wait()
    try:
        cpus, why = pin_rank(0, 1, 1)
        assert why == "" and len(cpus) == 1 and cpus[0] in allowed and os.sched_getaffinity(0) == set(cpus)
        assert os.sched_getaffinity(tids[0]) == set(cpus)          # the older thread is pinned too
        cpus, why = pin_rank(0, len(allowed) + 1, 1)          # more ranks than CPUs: not pinned, and why
        assert cpus is None and "outnumber" in why
    finally:
        stop.set()
        t.join()
        for tid in os.listdir("/proc/self/task"):             # every thread back as it was (pytest's own)
            try:
                os.sched_setaffinity(int(tid), allowed)
            except OSError:
                pass
