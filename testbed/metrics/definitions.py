"""Constants of the metrics (bin widths, thresholds), their one-line definitions copied into
``summary.json`` (:data:`DEFINITIONS`; the full text is in :mod:`testbed.metrics`) and the
errors raised on bad records."""

from __future__ import annotations

BIN_S = 0.010               # goodput bin width, s
SMOOTH_BINS = 5             # rolling-median window for recovery, bins (50 ms)
RECOVERY_FRACTION = 0.9     # "recovered" = smoothed aggregate goodput >= 90 % of baseline
DIP_HORIZON_S = 1.0         # a fault's dip must start within this long after it, s
MIN_DIP_BINS = 3            # a dip is at least this many consecutive smoothed bins below threshold
LINK_BIN_S = 0.100          # link throughput bin width, s
ACHIEVED_WINDOW_S = 1.0     # achieved link rate: best sliding window of this length, s
BUSIEST_LINKS = 5           # link ends reported in the fidelity section
CPU_SATURATED_P95 = 0.95    # p95 busy fraction at or above which a run is invalid
DISRUPTIVE = ("link_down", "flap", "loss", "rate", "blackhole")
DETECTED_STATES = ("ASSUMED_BAD", "DENIED", "UNKNOWN")

DEFINITIONS = {
    "goodput_bps": "received payload bytes per 10 ms bin (agent rx counters) * 8 / bin width; bits/s",
    "iteration_s": "per (size, iteration) the slowest rank's collective time (nccl-tests -a 3); p50/p99/max "
                   "over measured (non-warm-up) iterations of the largest size; s",
    "time_s": "mean iteration_s over measured iterations of one size (nccl-tests 'time'); s",
    "algbw": "size_bytes / time_s (nccl-tests PERFORMANCE.md); bytes/s and Mbit/s",
    "busbw": "algbw * 2(n-1)/n for all-reduce, n = world size (nccl-tests PERFORMANCE.md); bytes/s and Mbit/s",
    "busbw_fraction_of_host": "busbw / host_bandwidth_bps: the sum of a host's host-link rates over planes (one "
                              "NIC per plane), slowest ring host; rc and tcp use one NIC, so on n planes they "
                              "reach at most 1/n",
    "wrong": "elements differing from the expected sum, summed over ranks and all iterations (warm-up too)",
    "qp_errors": "qp_error events (retries exhausted: the job would crash); count",
    "detect_s": "first fault apply -> first EV going from GOOD (or SKIP) to ASSUMED_BAD/DENIED/UNKNOWN; s; "
                "null without EVs",
    "recovery_s": "fault apply -> smoothed (centred 50 ms rolling median) aggregate goodput back to >= 90% of "
                  "the pre-fault median, after a dip below it of >= 30 ms starting within 1 s; 0 if no dip; s; "
                  "null if not recovered before the workload ended; iteration gaps excluded",
    "longest_stall_s": "longest run of consecutive 10 ms bins with zero aggregate goodput while a collective "
                       "runs (iteration gaps excluded); s",
    "retransmits": "sum of the transports' cumulative retransmission counters over tx flows; packets "
                   "(segments for tcp)",
    "retransmitted_bytes": "sum of flows' retransmitted_bytes counters when agents report them, else null; bytes",
    "cpu_busy": "host CPU busy fraction (all cores) in the workload window, mean and p95; 0..1; "
                f"p95 >= {CPU_SATURATED_P95} marks the run invalid",
    "links": f"per link end: tx bytes and drops per {LINK_BIN_S * 1000:.0f} ms bin from kernel counters; "
             f"achieved_bps = best {ACHIEVED_WINDOW_S:g} s sliding-window mean throughput (single bins carry "
             "HTB bursts and sampling jitter), compared with the configured rate_bps",
}


class MetricsError(ValueError):
    """Records that cannot be parsed or lack a required field (message names file and line)."""


class RunDirError(MetricsError):
    """The path is not a scenario run directory (no manifest.json, no transport data)."""
