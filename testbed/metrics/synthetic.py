"""Synthetic scenario run directories at fat-tree scale, for the metrics benchmark and tests.

:func:`write_run` writes ``<dir>/manifest.json`` and, per transport, ``events.jsonl``,
``samples.jsonl``, ``links.jsonl`` and ``cpu.jsonl`` in the formats the runner writes
(see :mod:`testbed.metrics`), with the volume of a real run: by default a fat-tree k=4
(16 ranks in a ring, one tx and one rx flow each, 4 EVs per mrc tx flow), agent samples
every 10 ms, kernel counters of the 48 links x 2 ends every 100 ms, host CPU every 100 ms,
for 60 s; an all-reduce sweep with iteration gaps, a core link going down at 20 s (a
stall, then half rate on the ranks crossing it, EVs going ASSUMED_BAD) and back at 40 s.
Deterministic for a given ``seed``. Used by ``make bench`` (:mod:`testbed.tools.bench`) and the
unit tests; writing one k=4 transport takes about a second. ``extras=True`` also writes the
files a real run has beside those: ``sched.jsonl``, ``jobs/rank<r>.json`` and ``paths.json``
(the run-directory fuzz tests damage every file; a small run, e.g. 4 ranks for 2 s, writes in
a few ms).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from testbed.model.generators import fat_tree
from testbed.model.topology import LinkParams

T0 = 1_700_000_000.0        # wall-clock run start, s
SAMPLE_S = 0.010            # agent sample interval, s
LINK_S = 0.100              # link/CPU sample interval, s
RATE_BYTES = 1.0e6          # per-flow goodput while a collective runs, bytes/s (8 Mbit/s)
EV_COUNT = {"mrc": 4, "rc": 1, "tcp": 0}


def dumps(record: dict) -> str:
    """One JSONL record as the runner writes it (compact separators)."""
    return json.dumps(record, separators=(",", ":"))


def _fat_tree_k4() -> tuple[list[str], list[tuple[str, str, str, str, str]]]:
    lp = LinkParams(10_000_000, 64)
    topo = fat_tree(4, host_link=lp, fabric_link=lp)
    hosts = [n.name for n in topo.nodes.values() if n.role.value == "host"]
    return hosts, [(ln.name, ln.a.node, ln.a.ifname, ln.b.node, ln.b.ifname) for ln in topo.links]


def _schedule(duration_s: float, sizes: list[int], iterations: int, warmup: int) -> list[tuple]:
    """(size, iter, warmup, t_start, t_end) per iteration, relative s, from 0.5 s to 0.5 s before
    the end; gaps of 50 ms (less in very short runs) between them."""
    per_size = iterations + warmup
    n = per_size * len(sizes)
    slot = (duration_s - 1.0) / n
    gap = min(0.05, slot / 4)
    out = []
    for k in range(n):
        size = sizes[k // per_size]
        i = k % per_size
        t_start = 0.5 + k * slot
        out.append((size, i if i < warmup else i - warmup, i < warmup, t_start, t_start + slot - gap))
    return out


def write_transport(d: Path, name: str, *, world_size: int = 16, duration_s: float = 60.0,
                    fault_at_s: float | None = None, revert_at_s: float | None = None, seed: int = 1,
                    hosts: list[str] | None = None,
                    link_names: list[tuple[str, str, str, str, str]] | None = None) -> None:
    """One transport's JSONL files in ``d`` (created). ``hosts``: rank -> host name; ``link_names``:
    (link, a node, a ifname, b node, b ifname) per link; both default to a fat-tree k=4's.
    The core link goes down at ``fault_at_s`` (default a third of the run) and comes back at
    ``revert_at_s`` (default two thirds)."""
    fault_at_s = duration_s / 3 if fault_at_s is None else fault_at_s
    revert_at_s = 2 * duration_s / 3 if revert_at_s is None else revert_at_s
    d.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(f"{seed}-{name}")
    if hosts is None or link_names is None:
        k4_hosts, k4_links = _fat_tree_k4()
        hosts, link_names = hosts or k4_hosts, link_names or k4_links
    hosts = [hosts[r % len(hosts)] if r < len(hosts) else f"h{r}" for r in range(world_size)]
    sizes = [1 << 20, 2 << 20, 4 << 20, 8 << 20]
    sched = _schedule(duration_s, sizes, iterations=20, warmup=2)
    affected = set(range(0, world_size, 4))     # ranks whose paths cross the failed core link
    n_ev = EV_COUNT.get(name, 4)
    stall_s, slow_s = (0.05, 0.2) if n_ev > 1 else (0.3, 1.0)

    def running(t: float) -> bool:
        return any(a <= t < b for _, _, _, a, b in sched) if 0.5 <= t < sched[-1][4] else False

    def rate(rank: int, t: float) -> float:
        if rank in affected and fault_at_s <= t < fault_at_s + stall_s:
            return 0.0
        if rank in affected and fault_at_s + stall_s <= t < fault_at_s + stall_s + slow_s:
            return RATE_BYTES / 2
        return RATE_BYTES

    events: list[dict] = [{"t": T0, "kind": "run", "phase": "start"},
                          {"t": T0 + fault_at_s, "kind": "fault", "action": "link_down", "link": "a0_0-c0_0",
                           "phase": "apply"},
                          {"t": T0 + revert_at_s, "kind": "fault", "action": "link_down", "link": "a0_0-c0_0",
                           "phase": "revert"},
                          {"t": T0 + fault_at_s + 0.5, "kind": "reconverge"}]
    for r in range(world_size):
        events.append({"t": T0 + 0.1, "kind": "agent", "rank": r, "status": "ready"})
    for seq, (size, it, warm, a, b) in enumerate(sched):
        for r in range(world_size):
            ta, tb = a + rnd.uniform(0, 0.002), b - rnd.uniform(0, 0.002)
            events.append({"t": T0 + tb, "kind": "iteration", "rank": r, "size": size, "iter": it, "seq": seq,
                           "warmup": warm, "t_start": T0 + ta, "t_end": T0 + tb, "seconds": tb - ta, "wrong": 0})
    if n_ev:
        for r in sorted(affected):
            for ev_id in range(min(n_ev, 2)):
                events.append({"t": T0 + fault_at_s + 0.03 + 0.01 * ev_id, "kind": "ev_state", "rank": r,
                               "peer": hosts[(r + 1) % world_size], "dir": "tx", "qpn": 17, "ev_id": ev_id,
                               "old": "GOOD", "new": "ASSUMED_BAD", "cause": "loss"})
                events.append({"t": T0 + revert_at_s + 0.2, "kind": "ev_state", "rank": r,
                               "peer": hosts[(r + 1) % world_size], "dir": "tx", "qpn": 17, "ev_id": ev_id,
                               "old": "ASSUMED_BAD", "new": "GOOD", "cause": "probes_ok"})
        for _ in range(200):   # congestion back-offs
            r, t = rnd.randrange(world_size), rnd.uniform(1, duration_s - 2)
            ev_id = rnd.randrange(n_ev)
            common = {"kind": "ev_state", "rank": r, "peer": hosts[(r + 1) % world_size], "dir": "tx",
                      "qpn": 17, "ev_id": ev_id}
            events.append({"t": T0 + t, **common, "old": "GOOD", "new": "SKIP", "cause": "congestion"})
            events.append({"t": T0 + t + 0.02, **common, "old": "SKIP", "new": "GOOD", "cause": "skip_timeout"})
    t_end = sched[-1][4] + 0.1
    for r in range(world_size):
        events.append({"t": T0 + t_end, "kind": "agent", "rank": r, "status": "done", "reason": None})
    events.append({"t": T0 + t_end + 0.05, "kind": "run", "phase": "end", "status": "ok"})
    events.sort(key=lambda e: e["t"])
    with open(d / "events.jsonl", "w") as f:
        f.writelines(dumps(e) + "\n" for e in events)

    nsamples = int(round(duration_s / SAMPLE_S))
    rx = [0.0] * world_size
    rtx = [0] * world_size
    sent = [[0] * n_ev for _ in range(world_size)]
    lost = [[0] * n_ev for _ in range(world_size)]
    with open(d / "samples.jsonl", "w") as f:
        for i in range(nsamples + 1):
            t = i * SAMPLE_S
            on = running(t)
            for r in range(world_size):
                ts = t + rnd.uniform(0, 0.002)
                if i and on:
                    rx[r] += rate((r - 1) % world_size, t) * SAMPLE_S * rnd.uniform(0.9, 1.1)
                    if rnd.random() < 0.02 or (r in affected and fault_at_s <= t < fault_at_s + 0.1):
                        rtx[r] += 1
                    for e in range(n_ev):
                        sent[r][e] += rnd.randrange(5, 9)
                        if r in affected and e < 2 and fault_at_s <= t < fault_at_s + 0.1:
                            lost[r][e] += 1
                bad = r in affected and fault_at_s + 0.03 <= t < revert_at_s + 0.2
                evs = [{"ev_id": e, "state": "ASSUMED_BAD" if bad and e < 2 else "GOOD", "sent": sent[r][e],
                        "lost": lost[r][e]} for e in range(n_ev)]
                tx_bytes = rx[(r + 1) % world_size]
                flows = [{"peer": hosts[(r + 1) % world_size], "dir": "tx", "bytes": round(tx_bytes),
                          "retransmits": rtx[r], "rtt_s": 0.0012 + rnd.uniform(0, 0.0008),
                          "cwnd_bytes": rnd.choice((32768, 49152, 65536)), "evs": evs},
                         {"peer": hosts[(r - 1) % world_size], "dir": "rx", "bytes": round(rx[r]),
                          "retransmits": 0, "rtt_s": None, "cwnd_bytes": None, "evs": []}]
                if n_ev > 1:
                    flows[1]["duplicates"] = rtx[(r - 1) % world_size] // 3
                f.write(dumps({"t": T0 + ts, "rank": r, "flows": flows}) + "\n")

    nlink = int(round(duration_s / LINK_S))
    counters = {(ln[0], end): [0, 0, 0, 0, 0] for ln in link_names for end in ("a", "b")}
    with open(d / "links.jsonl", "w") as f:
        for j in range(nlink + 1):
            t = j * LINK_S
            on = running(t)
            for link, an, ai, bn, bi in link_names:
                down = link == "a0_0-c0_0" and fault_at_s <= t < revert_at_s
                for end, node, ifname in (("a", an, ai), ("b", bn, bi)):
                    c = counters[(link, end)]
                    if j and on and not down:
                        nb = int(RATE_BYTES * LINK_S * rnd.uniform(0.3, 1.2))
                        c[0] += nb
                        c[1] += nb // 1500
                        c[2] += int(nb * rnd.uniform(0.9, 1.0))
                        c[3] += nb // 1500
                        c[4] += 1 if rnd.random() < 0.01 else 0
                    f.write(dumps({"t": T0 + t + rnd.uniform(0, 0.003), "link": link, "end": end,
                                        "node": node, "ifname": ifname, "tx_bytes": c[0], "tx_packets": c[1],
                                        "rx_bytes": c[2], "rx_packets": c[3], "drops": c[4],
                                        "rate_bps": 10_000_000}) + "\n")
    with open(d / "cpu.jsonl", "w") as f:
        for j in range(nlink + 1):
            cores = [round(rnd.uniform(0.2, 0.8), 4) for _ in range(4)]
            f.write(dumps({"t": T0 + j * LINK_S, "busy_fraction": round(sum(cores) / 4, 4), "cores": cores}) + "\n")


def write_extras(d: Path, name: str, *, world_size: int, duration_s: float, hosts: list[str],
                 link_names: list[tuple[str, str, str, str, str]]) -> None:
    """``sched.jsonl``, ``jobs/rank<r>.json`` and ``paths.json`` of one transport (the keys the
    metrics read; :mod:`testbed.rundir.schemas`): every rank's EVs and data path cross the first
    links of the list, the faulted ``a0_0-c0_0`` for ranks divisible by 4."""
    hosts = [hosts[r % len(hosts)] for r in range(world_size)]
    n_ev = EV_COUNT.get(name, 4)
    (d / "jobs").mkdir(parents=True, exist_ok=True)
    for r in range(world_size):
        links = ["a0_0-c0_0"] if r % 4 == 0 else [link_names[r % len(link_names)][0]]
        evs = [{"ev_id": e, "links": links} for e in range(n_ev)]
        nxt, prv = (r + 1) % world_size, (r - 1) % world_size
        job = {"rank": r, "world": hosts, "host": hosts[r], "transport": name, "collective": "all_reduce",
               "send_to": [{"rank": nxt, "host": hosts[nxt], "evs": evs}],
               "recv_from": [{"rank": prv, "host": hosts[prv], "evs": evs}],
               "qp": {"cc_params": {"base_rtt_s": 0.002}}}
        (d / "jobs" / f"rank{r}.json").write_text(json.dumps(job, indent=1) + "\n")
    flows = [{"label": f"{name} {r}->{(r + 1) % world_size}", "src_rank": r, "dst_rank": (r + 1) % world_size,
              "kind": "data", "links": ["a0_0-c0_0"] if r % 4 == 0 else [link_names[r % len(link_names)][0]]}
             for r in range(world_size)]
    (d / "paths.json").write_text(json.dumps({"transport": name, "flows": flows}, indent=1) + "\n")
    with open(d / "sched.jsonl", "w") as f:
        for j in range(int(round(duration_s / LINK_S)) + 1):
            ranks = {str(r): [j * 5_000_000, j * 200_000, j * 40] for r in range(world_size)}
            f.write(dumps({"t": T0 + j * LINK_S, "ranks": ranks}) + "\n")


def write_run(run_dir: Path, transports=("mrc", "rc", "tcp"), *, world_size: int = 16,
              duration_s: float = 60.0, seed: int = 1, extras: bool = False) -> Path:
    """A whole synthetic run directory (see the module docstring); returns ``run_dir``."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = {"scenario": {"name": "synthetic-k4", "timeout_s": duration_s + 10,
                             "workload": {"min_bytes": 1 << 20, "max_bytes": 8 << 20,
                                          "factor": 2, "iterations": 20, "warmup": 2}},
                "transports": list(transports), "world_size": world_size, "host_link_rate_bps": 10_000_000}
    (run_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    hosts, links = _fat_tree_k4()
    for name in transports:
        write_transport(run_dir / name, name, world_size=world_size, duration_s=duration_s, seed=seed,
                        hosts=hosts, link_names=links)
        if extras:
            write_extras(run_dir / name, name, world_size=world_size, duration_s=duration_s, hosts=hosts,
                         link_names=links)
    return run_dir
