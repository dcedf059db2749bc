"""``make bench``'s kernel limit: what the fabric itself carries with no agents, as a data-only
ring and as a ring that carries MRC's own packet mix.

Both rings are fat-tree k=4 (queue 32, MTU 9000, as topologies/fat-tree-k4.yaml) with the
baseline all-reduce's 16 flows (host i -> i+1 over the ECMP addresses), driven by iperf3 at
once. The **data-only ring** runs TCP, then UDP datagrams of the data packets' payload offered
at the link rate. The **mixed ring** adds what MRC sends back: on every flow, a reverse UDP
flow (host i+1 -> i) of control datagrams of ``control_bytes`` offered at ``control_per_data``
of the data datagrams' offered rate, the ratio and size measured in the same bench's ceiling
run (:func:`testbed.tools.ceiling.control_mix`). Packets, not bits, cost on this emulator:
each datagram takes six hops of kernel forwarding whatever its size, so a ring that carries
only data overstates what MRC's data can get.

Every run records the machine's CPU (``/proc/stat``, every core, the kernel's forwarding and
iperf3's own work included) over the clients' seconds, and the CPU per delivered datagram.
Needs root.
"""
from __future__ import annotations

import json
import os
import subprocess
import time

from rich.table import Table

from testbed.fabric.local import Fabric
from testbed.metrics.trials import stats
from testbed.model.generators import fat_tree
from testbed.model.topology import LinkParams
from testbed.run.sampling import proc_stat_ticks

LIMIT_SECONDS = 8.0
"""Seconds each iperf3 client of a kernel-limit ring runs."""
MRC_DATAGRAM_BYTES = 4096
"""UDP payload of the rings' data datagrams: MRC's default payload (packets, not bits, cost)."""
DATA_PORT, CONTROL_PORT = 5301, 5401
"""First iperf3 port of the data flows and of the mixed ring's reverse control flows."""
MIX_PASSES = 4
MIX_TOLERANCE = 0.05
"""The mixed ring's control flows are offered at the ratio of the data *offered*, but the data
senders fall short of their offer when the machine saturates (that is the limit), so the ring
runs again with the control offer scaled by the ratio it missed, up to :data:`MIX_PASSES`
times, until control sent / data sent is within this fraction of the target."""


def ring_pairs(hosts: list[str]) -> list[tuple[str, str]]:
    """The ring of the baseline all-reduce: host i sends to host i+1 (the last to the first)."""
    return [(hosts[i], hosts[(i + 1) % len(hosts)]) for i in range(len(hosts))]


def iperf3_totals(reports: list[dict], seconds: float, datagram: int = MRC_DATAGRAM_BYTES) -> dict:
    """Per-host and total delivered rate of iperf3 ``-J`` client reports (one per ring flow):
    ``{"flows", "mbit_per_host", "mbit_total", "pps_total", "sent_pps_total", "lost_pct"}``
    (``pps_total`` delivered, ``sent_pps_total`` sent); TCP reports have no packet counts (pps
    None). Raises KeyError for a report without ``end``."""
    bits, pkts, lost, sent = 0.0, 0, 0, 0
    udp = False
    for r in reports:
        end = r["end"]
        if "sum" in end and "packets" in end["sum"]:       # UDP: what the receiver got
            udp = True
            s = end["sum"]
            got = s["packets"] - s.get("lost_packets", 0)
            pkts += got
            sent += s["packets"]
            lost += s.get("lost_packets", 0)
            bits += got * datagram * 8 / seconds
        else:
            bits += end["sum_received"]["bits_per_second"]
    n = len(reports)
    return {"flows": n, "mbit_per_host": bits / n / 1e6 if n else 0.0, "mbit_total": bits / 1e6,
            "pps_total": pkts / seconds if udp else None, "sent_pps_total": sent / seconds if udp else None,
            "lost_pct": 100.0 * lost / sent if udp and sent else None}


def control_offer_bps(rate_mbit: float, datagram: int, control_per_data: float, control_bytes: int) -> float:
    """The bit rate a mixed ring's reverse flow offers, bit/s: ``control_per_data`` control
    datagrams of ``control_bytes`` per data datagram of ``datagram`` bytes offered at
    ``rate_mbit`` (Mbit/s). Raises ValueError for a negative ratio or a non-positive size."""
    if control_per_data < 0 or control_bytes <= 0 or datagram <= 0:
        raise ValueError(f"control_per_data={control_per_data}, control_bytes={control_bytes}, "
                         f"datagram={datagram}: expected a ratio >= 0 and positive sizes")
    return rate_mbit * 1e6 / (datagram * 8) * control_per_data * control_bytes * 8


def read_cpu_ticks() -> list[int]:
    """The machine's CPU ticks (:func:`testbed.run.sampling.proc_stat_ticks`, its first line)."""
    return proc_stat_ticks()[0]


def cpu_figures(before: list[int], after: list[int], cores: int, datagrams_per_s: float | None) -> dict:
    """``{"busy_fraction", "user_fraction", "us_per_datagram"}`` from two :func:`read_cpu_ticks`:
    the machine's busy share over a ring's seconds (every core), the share of it in user space
    (the traffic generators; the rest is the kernel: sockets, forwarding, softirq), and the
    busy CPU per delivered datagram, us (data and control alike; None without a packet count)."""
    d = [b - a for a, b in zip(before, after)]
    total = sum(d)
    busy = total - d[3] - d[4]
    frac = busy / total if total > 0 else 0.0
    per = (frac * cores / datagrams_per_s * 1e6) if datagrams_per_s else None
    return {"busy_fraction": round(frac, 4), "user_fraction": round((d[0] + d[1]) / busy, 4) if busy > 0 else 0.0,
            "us_per_datagram": per}


def _drive(fabric: Fabric, topo, flows: list[tuple[str, str, int, list[str]]],
           seconds: float) -> tuple[list[dict], tuple[list[int], list[int]]]:
    """Run one iperf3 server and client per flow ``(src, dst, port, client options)`` at once;
    returns (the clients' reports in flow order, :func:`read_cpu_ticks` before and after them)."""
    servers = [fabric.popen(dst, ["iperf3", "-s", "-1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for _, dst, port, _ in flows]
    try:
        time.sleep(0.5)   # iperf3 -s has no readiness signal; its socket is bound within ms
        before = read_cpu_ticks()
        clients = [fabric.popen(src, ["iperf3", "-c", str(topo.nics[dst][0].address), "-p", str(port),
                                      "-t", str(seconds), "-J", *opts],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                   for src, dst, port, opts in flows]
        reports = [json.loads(c.communicate(timeout=seconds + 30)[0]) for c in clients]
        ticks = (before, read_cpu_ticks())
    finally:
        for srv in servers:
            try:
                srv.wait(timeout=10)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait()
    return reports, ticks


LIMIT_REPEAT = 3
"""Runs of each UDP ring per link rate, interleaved (data only, then each mix, then again)."""


def median_range(vals: list) -> tuple[float, float, float] | None:
    """(median, min, max) of the values that are not None (:func:`testbed.metrics.trials.stats`)."""
    s = stats(vals)
    return (s["median"], s["min"], s["max"]) if s["n"] else None


def bench_kernel_limit(rate_mbit: int, *, seconds: float = LIMIT_SECONDS, datagram: int = MRC_DATAGRAM_BYTES,
                       mixes: dict[str, tuple[float, int]] | None = None, repeat: int = LIMIT_REPEAT,
                       tcp: bool = True) -> dict:
    """The kernel fabric's own ring capacity at ``rate_mbit`` on every link, no agents, on one
    fabric: TCP once (``tcp``), then ``repeat`` rounds of the UDP rings, interleaved: the
    data-only ring (datagrams of ``datagram`` bytes offered at the link rate), then for each
    ``mixes`` entry ``name: (control_per_data, control_bytes)`` the same ring with a reverse
    control flow per data flow (module docstring; its control offer, once found, is kept for the
    later rounds). Returns ``{"rate_mbit", "datagram", "repeat", "tcp": totals, "udp": [totals,
    ...], "mixed": {name: [{"data": totals, "control": totals, "control_per_data",
    "control_bytes", "sent_ratio", "passes"}, ...]}}`` (totals of :func:`iperf3_totals` plus
    ``cpu``: :func:`cpu_figures`; a mixed ring's CPU per datagram counts data and control
    datagrams; ``sent_ratio``: control sent per data sent in the pass kept; ``passes``: up to
    :data:`MIX_PASSES`). Raises ValueError for ``repeat`` < 1. Needs root."""
    if repeat < 1:
        raise ValueError(f"repeat={repeat}: at least one run")
    lp = LinkParams(rate_mbit * 1_000_000, 32, mtu=9000)   # topologies/fat-tree-k4.yaml's classes
    topo = fat_tree(4, host_link=lp, fabric_link=lp)
    cores = os.cpu_count() or 1
    out: dict = {"rate_mbit": rate_mbit, "datagram": datagram, "repeat": repeat, "udp": [],
                 "mixed": {name: [] for name in mixes or {}}}
    udp_opts = ["-u", "-b", f"{rate_mbit}M", "-l", str(datagram)]
    offers = {name: control_offer_bps(rate_mbit, datagram, per, size) for name, (per, size) in (mixes or {}).items()}
    with Fabric(topo) as fabric:
        pairs = ring_pairs([h.name for h in topo.hosts])
        data_flows = [(s, d, DATA_PORT + i, udp_opts) for i, (s, d) in enumerate(pairs)]
        if tcp:
            reports, cpu = _drive(fabric, topo, [(s, d, DATA_PORT + i, []) for i, (s, d) in enumerate(pairs)], seconds)
            out["tcp"] = {**iperf3_totals(reports, seconds, datagram), "cpu": cpu_figures(*cpu, cores, None)}
        for _ in range(repeat):
            reports, cpu = _drive(fabric, topo, data_flows, seconds)
            totals = iperf3_totals(reports, seconds, datagram)
            out["udp"].append({**totals, "cpu": cpu_figures(*cpu, cores, totals["pps_total"])})
            for name, (per_data, control_bytes) in (mixes or {}).items():
                for passes in range(1, MIX_PASSES + 1):
                    ctl_opts = ["-u", "-b", f"{max(offers[name], 1000):.0f}", "-l", str(control_bytes)]
                    flows = data_flows + [(d, s, CONTROL_PORT + i, ctl_opts) for i, (s, d) in enumerate(pairs)]
                    reports, cpu = _drive(fabric, topo, flows, seconds)
                    data = iperf3_totals(reports[:len(pairs)], seconds, datagram)
                    control = iperf3_totals(reports[len(pairs):], seconds, control_bytes)
                    sent = control["sent_pps_total"] / data["sent_pps_total"] if data["sent_pps_total"] else 0.0
                    if per_data == 0 or sent == 0 or abs(sent / per_data - 1) <= MIX_TOLERANCE:
                        break
                    offers[name] *= per_data / sent
                dgrams = (data["pps_total"] or 0) + (control["pps_total"] or 0)
                data["cpu"] = cpu_figures(*cpu, cores, dgrams)
                out["mixed"][name].append({"data": data, "control": control, "control_per_data": per_data,
                                           "control_bytes": control_bytes, "sent_ratio": sent, "passes": passes})
    return out


def ring_stats(runs: list[dict]) -> dict:
    """Median [min-max] over a ring's runs (``udp``'s totals, or a mix's runs): ``{"pps",
    "mbit_per_host", "lost_pct", "us_per_datagram", "busy_fraction", "user_fraction",
    "control_pps", "sent_ratio"}``, each a (median, min, max) or None."""
    data = [r.get("data", r) for r in runs]
    cpu = [d.get("cpu") or {} for d in data]
    return {"pps": median_range([d.get("pps_total") for d in data]),
            "mbit_per_host": median_range([d.get("mbit_per_host") for d in data]),
            "lost_pct": median_range([d.get("lost_pct") for d in data]),
            "us_per_datagram": median_range([c.get("us_per_datagram") for c in cpu]),
            "busy_fraction": median_range([c.get("busy_fraction") for c in cpu]),
            "user_fraction": median_range([c.get("user_fraction") for c in cpu]),
            "control_pps": median_range([(r.get("control") or {}).get("pps_total") for r in runs]),
            "sent_ratio": median_range([r.get("sent_ratio") for r in runs])}


def best_udp(limits: list[dict], mix: str | None = None) -> dict | None:
    """The link rate whose ring delivered the most data datagrams a second (by the median of its
    runs): ``{"rate_mbit", "pps": (median, min, max), **ring_stats}`` of the data-only ring
    (``mix`` None) or of mixed ring ``mix``; None when no run has it."""
    rows = []
    for r in limits:
        runs = r.get("udp") if mix is None else r.get("mixed", {}).get(mix)
        stats = ring_stats(runs) if runs else None
        if stats and stats["pps"] is not None:
            rows.append({"rate_mbit": r["rate_mbit"], **stats})
    return max(rows, key=lambda x: x["pps"][0]) if rows else None


def _fmt(stat, spec: str, unit: str = "") -> str:
    if stat is None:
        return "-"
    med, lo, hi = stat
    return f"{med:{spec}}{unit}" + (f" [{lo:{spec}}-{hi:{spec}}]" if lo != hi else "")


def _cpu_cell(stats: dict) -> str:
    busy, user, per = stats.get("busy_fraction"), stats.get("user_fraction"), stats.get("us_per_datagram")
    if busy is None:
        return "-"
    return (f"{busy[0]:.0%}" + (f" ({user[0]:.0%} user)" if user else "")
            + (f", {_fmt(per, '.1f')} us/dgram" if per else ""))


def limit_table(limits: list[dict]) -> Table:
    """The data-only rings, a row per link rate (UDP: median [min-max] of the runs)."""
    rows = [r for r in limits if r.get("udp")]
    table = Table(title=f"kernel fabric limit, data only: fat-tree k=4 ring (16 flows at once), iperf3, no agents, "
                        f"{LIMIT_SECONDS:g} s a run; UDP with {rows[0]['datagram']}-byte datagrams (the data packets' "
                        f"payload) at the link rate, median \\[min-max] of {rows[0].get('repeat', 1)} runs; machine "
                        "CPU over each run (every core; user: iperf3)")
    for col in ("link Mbit/s", "TCP Mbit/s per host", "TCP CPU", "UDP Mbit/s per host", "UDP packets/s (all)",
                "UDP lost", "UDP CPU"):
        table.add_column(col, justify="right")
    for r in rows:
        t, u = r.get("tcp") or {}, ring_stats(r["udp"])
        tcpu = (t.get("cpu") or {}).get("busy_fraction")
        table.add_row(str(r["rate_mbit"]), f"{t['mbit_per_host']:.1f}" if t else "-",
                      f"{tcpu:.0%}" if tcpu is not None else "-", _fmt(u["mbit_per_host"], ".1f"),
                      _fmt(u["pps"], ",.0f"), _fmt(u["lost_pct"], ".2f", "%"), _cpu_cell(u))
    return table


def mixed_table(limits: list[dict]) -> Table:
    """The mixed rings, a row per mix and link rate (median [min-max] of the runs)."""
    table = Table(title="kernel fabric limit, MRC's packet mix: the data ring plus, on every flow, a reverse flow of "
                        "control datagrams at the ratio and size MRC sent in this bench's ceiling run (median "
                        "\\[min-max] of the runs)")
    for col in ("mix", "link Mbit/s", "control per data (target / sent)", "control bytes", "data Mbit/s per host",
                "data packets/s (all)", "data lost", "control packets/s (all)", "CPU (data + control)"):
        table.add_column(col, justify="right")
    for r in limits:
        for name, runs in r.get("mixed", {}).items():
            if not runs:
                continue
            st = ring_stats(runs)
            table.add_row(name, str(r["rate_mbit"]), f"{runs[0]['control_per_data']:.3f} / {_fmt(st['sent_ratio'], '.3f')}",
                          str(runs[0]["control_bytes"]), _fmt(st["mbit_per_host"], ".1f"), _fmt(st["pps"], ",.0f"),
                          _fmt(st["lost_pct"], ".2f", "%"), _fmt(st["control_pps"], ",.0f"), _cpu_cell(st))
    return table
