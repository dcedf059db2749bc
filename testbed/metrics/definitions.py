"""Constants of the metrics (bin widths, thresholds), their one-line definitions copied into
``summary.json`` (:data:`DEFINITIONS`; the full text is in :mod:`testbed.metrics`) and the
errors raised on bad records."""

from __future__ import annotations
from testbed.rundir.errors import MetricsError, RunDirError  # noqa: F401 (re-exported)

BIN_S = 0.010               # goodput bin width of a run without job specs, s (else the sample interval)
SMOOTH_BINS = 5             # rolling-median window for recovery, bins
RECOVERY_FRACTION = 0.9     # "recovered" = smoothed aggregate goodput >= 90 % of baseline
DIP_HORIZON_S = 1.0         # a fault's dip must start within this long after it, s
MIN_DIP_BINS = 3            # a dip is at least this many consecutive smoothed bins below threshold
FLOW_DIP_HORIZON_S = 2.0    # per-flow recovery: dips starting this long after the fault count, s
FLOW_RECOVERY_FRACTION = 0.75  # per-flow recovery: a dip is a whole window below this share of the
                               # flow's pre-fault median window rate. Chosen by measurement: placed at
                               # ~30 fault-free instants of 3 default runs each, 90% / 30 ms dips gave
                               # mrc a "recovery" at 10-26 of them (up to 2 s: congestion retirements),
                               # 75% over a whole window at none, and still 3.2-4.7 s for rc/tcp faults
RECOVERY_WINDOW_RTTS = 4    # per-flow recovery: sliding window of this many base RTTs ...
RECOVERY_WINDOW_MIN_S = 0.1  # ... and at least this long, s
BOUNDARY_MARGIN_S = 1.0     # warn when a fault lands this close to the end of its iteration, s
SCHED_DELAY_MAX_RTT = 0.1   # invalid: agents' p95 scheduling delay per wakeup >= this many base RTTs
TIMER_LATE_MAX_RTT = 0.25   # invalid: agents' p99 timer lateness >= this many base RTTs
SAMPLER_COVERAGE_MIN = 0.9  # invalid: the runner's samplers kept < 90% of their period
LINK_BIN_S = 0.100          # link throughput bin width, s
ACHIEVED_WINDOW_S = 1.0     # achieved link rate: best sliding window of this length, s
BUSIEST_LINKS = 5           # link ends reported in the fidelity section
CPU_SATURATED_P95 = 0.95    # p95 busy fraction at or above which a run is invalid
HOST_LINK_IDLE_FRACTION = 0.05  # a command job's host link is idle in a counter interval carrying less
                                # than this share of its configured rate (both directions together): a
                                # few retransmissions or probes per 100 ms at 10 Mbit/s stay below it
DISRUPTIVE = ("link_down", "switch_down", "flap", "loss", "rate", "blackhole")
SLOWING = ("rate",)   # disruptive, but the link stays alive: retiring its EVs is a false retirement
RESTORING = ("link_up", "switch_up")  # actions that end a link's fault (as a revert phase does)
DETECTED_STATES = ("ASSUMED_BAD", "DENIED", "UNKNOWN")

DEFINITIONS = {
    "goodput_bps": "received payload bytes per bin (agent rx counters) * 8 / bin width; bits/s; the bin is one "
                   "agent sample interval (kpi_resolution_s)",
    "kpi_resolution_s": "the agents' sample interval (job specs' sample_interval_s: one base RTT, at most 20 ms, "
                        "at least 5 ms): the bin width of every series and the resolution of the stalls; s",
    "iteration_s": "per (size, iteration) the slowest rank's collective time (nccl-tests -a 3); p50/p99 by "
                   "nearest rank with n, max and mean over measured (non-warm-up) iterations of the largest "
                   "size; s",
    "time_s": "wall-clock span of one size's measured iterations (first rank's start of the first to the "
              "last rank's end of the last) / their number, as nccl-tests times its loop (nccl-tests "
              "'time'); s",
    "algbw": "size_bytes / time_s (nccl-tests PERFORMANCE.md); bytes/s and Mbit/s",
    "busbw": "algbw * factor, n = world size (nccl-tests PERFORMANCE.md): 2(n-1)/n for all_reduce, (n-1)/n for "
             "all_gather, reduce_scatter and all_to_all, 1 for permutation (nccl-tests sendrecv), n-1 for incast (the "
             "rate into the root, not an nccl-tests collective); bytes/s and Mbit/s",
    "jobs": "several jobs at once: per job its own collective figures, computed on its own agents only (ranks "
            "of the job); the transport's other keys are the first job's, links and CPU the whole fabric's",
    "balance": "fabric-link utilisation over the measured window (bytes sent by a link end * 8 / (configured rate "
               "* window)): spread max/mean over every switch-switch direction (idle ones count), p50, max, "
               "directions above 90%; collisions from traced data flows: a direction crossed by >= 2 QPs (an MRC "
               "QP's EVs are one QP); load = sum over crossing flows of 1 / (data flows of their connection), "
               "> 1 oversubscribed; EV paths: EVs and distinct paths per MRC QP (testbed/metrics/balance.py)",
    "busbw_fraction_of_host": "busbw / host_bandwidth_bps: the sum of a host's host-link rates over planes (one "
                              "NIC per plane), slowest ring host; rc and tcp use one NIC, so on n planes they "
                              "reach at most 1/n",
    "busbw_fraction_of_nics": "busbw / nic_bandwidth_bps: the sum of the host-link rates of the NICs the "
                              "transport's (first) job uses, on the planes of its EVs (rc and tcp: the first NIC; "
                              "mrc: every plane its EVs use), slowest ring host (testbed/metrics/nics.py)",
    "wrong": "elements differing from the expected sum, summed over ranks and all iterations (warm-up too)",
    "qp_errors": "qp_error events (retries exhausted: the job would crash); count",
    "detect_s": "first disruptive fault apply -> first GOOD/SKIP -> ASSUMED_BAD/DENIED/UNKNOWN transition of an EV "
                "whose path (job spec links, SRv6) crosses a faulted link; s; null without EVs or if no such EV "
                "was retired. A fault is every disruptive apply the timeline planned for one instant (a switch's "
                "links, a plane's entries with one trigger and offset: journal 'planned_s')",
    "detect_median_s": "over the tx QPs crossing the first disruptive fault (a rank's requester towards a peer "
                       "with an EV over one of its links, not already retired when it came): the median of "
                       "each QP's time to detect it, from the later of the fault and the QP's first "
                       "transmission on such an EV after it (a QP idle at the fault cannot detect it before it "
                       "sends into it) to its first GOOD/SKIP -> ASSUMED_BAD/DENIED/UNKNOWN of such an EV at or "
                       "after the fault while its link was down (fault apply .. revert or link_up). The first "
                       "transmission is the last sample before the first one whose 'sent' counter of such an EV "
                       "exceeds its value at the fault (up to one sample interval early, never late); counted "
                       "only if it came before the retirement and the QP had no write outstanding at some sample "
                       "from the fault to it, else (and without samples) the time runs from the fault "
                       "(detect_per_qp.start). A QP that never retired one counts as infinitely late (null when "
                       "half or more never did); s; null without EVs or crossing QPs. Per fault in per_fault",
    "detect_worst_s": "the latest of those detection times over the crossing QPs (detect_median_s): how long "
                      "the slowest QP took to detect the fault once it sent into it; null when any crossing QP "
                      "never detected it (detect_qps says how many) or without EVs or crossing QPs; s. Per fault "
                      "in per_fault",
    "detect_qps": "the QPs detect_median_s is over: detected (QPs that retired a crossing EV), crossing (QPs "
                  "with one) and undetected [{rank, peer}]; null without EVs (or job specs). Per fault in "
                  "per_fault",
    "detect_median_from_fault_s": "detect_median_s timed from the fault for every QP (first retirement - fault "
                                  "apply: the earlier definition), idle time included; s",
    "detect_worst_from_fault_s": "detect_worst_s timed from the fault for every QP, idle time included; s",
    "detect_per_qp": "per crossing QP [{rank, peer, detect_s (as detect_median_s), from_fault_s (retirement - "
                     "fault), idle_before_s (their difference: how long after the fault it first sent into "
                     "it), start}]; start: idle (timed from its first transmission), sending (it sent within a "
                     "sample interval of the fault), awaiting_acks (a write outstanding throughout: the loss may "
                     "be of a packet sent before the fault), no_send (nothing sent into it before the "
                     "retirement), no_samples; all null for a QP that never detected it; s. Per fault in "
                     "per_fault",
    "detect_causes": "how each detecting QP's first retirement found its loss: {inference (a later packet's "
                     "SACK: the per-EV reordering or the cross-EV out-of-order rule), timeout (the retransmission "
                     "timer), other (a controller's DENY, or an agent that does not report the cause)}, counts of "
                     "QPs; null without EVs. Per fault in per_fault",
    "false_retirements": "retirements (GOOD/SKIP -> ASSUMED_BAD/DENIED/UNKNOWN) of EVs whose path crosses no "
                         "link that is faulted at that moment (fault apply .. its revert or link_up; a link only "
                         "slowed by a 'rate' step is alive, so it excuses none), before, "
                         "during and after faults, and every retirement of a run without faults: count and "
                         "total time until each came back to GOOD; s (every retirement of the run is listed in "
                         "'retirements')",
    "flow_kpis": "per rx flow r->s, inside its active time (per iteration: sender's start .. receiver's end) "
                 "while r had a posted write unacknowledged (its samples' 'busy', widened by one sample interval "
                 "each side; a ring step waiting for its upstream's data is idle, not stalled): "
                 "longest_stall_s = longest gap between the samples that saw its rx counter rise (within one "
                 "sample interval of the true stall; a healthy flow's gaps are one interval); recovery = "
                 f"rate over sliding windows of max({RECOVERY_WINDOW_RTTS} base RTTs, {RECOVERY_WINDOW_MIN_S:g} s) "
                 f"against the median pre-fault window rate: a dip is a run of windows below "
                 f"{FLOW_RECOVERY_FRACTION:.0%} as long as one window, starting within {FLOW_DIP_HORIZON_S:g} s of the "
                 "first fault (a ring drains hop "
                 "by hop), recovery = first window back above it after the last such dip - fault time; 'no dip' "
                 "when none",
    "worst_stall": "the flow with the longest stall (flow_kpis); s, and in base RTTs",
    "worst_recovery": "the flow that recovered last (a flow that never recovered is worse); s, and in base RTTs; "
                      "dip false = no flow dipped",
    "healthy_gap_p99_s": "p99 (nearest rank) of every flow's gaps between rises (flow_kpis) that overlap no fault window: the "
                         "stall a healthy ring shows anyway; s",
    "faulted_iteration": "the measured iteration in progress at the first fault: its time (slowest rank) / median "
                         "time of the measured iterations of that size overlapping no fault window - 1; percent",
    "faulted_iterations": "every measured iteration overlapping a fault window (each flap's down phase counts): its "
                          "time / median time of the measured iterations of its size overlapping none - 1; worst and "
                          "mean over them; percent",
    "base_rtt_s": "unloaded RTT of the ring's longest path (job spec cc_params.base_rtt_s: serialisation of one "
                  "packet and its SACK per link + agent time); s",
    "recovery_s": "aggregate view, kept for comparison: fault apply -> smoothed (5-bin rolling median) aggregate "
                  "goodput back to >= 90% of the pre-fault median after a >= 3-bin dip; 0 if no dip; null if not "
                  "recovered; iteration gaps excluded",
    "longest_stall_s": "aggregate view: longest run of bins with zero aggregate goodput while a collective "
                       "runs (iteration gaps excluded); s",
    "retransmits": "sum of the transports' cumulative retransmission counters over tx flows; packets "
                   "(segments for tcp); split at the first fault into retransmits_startup (before it: start-up "
                   "and healthy running) and retransmits_after_fault",
    "retransmitted_bytes": "sum of flows' retransmitted_bytes counters when agents report them, else null; bytes",
    "runner_cpu": "the runner process's own CPU (user + system, all threads) from the agents' start to the end "
                  "of the run: cpu_s, wall_s and fraction of one core (its share of the machine the agents "
                  "also need)",
    "cpu_busy": "host CPU busy fraction (all cores) in the workload window, mean and p95; 0..1; reported "
                "beside validity, not deciding it (any neighbour process counts there)",
    "validity": "the emulation was not starved: agents' p95 scheduling delay per timeslice (/proc/PID/schedstat "
                f"run-queue wait / timeslices, per 100 ms) plus the agents' receive hold (job rx_hold_s) < "
                f"{SCHED_DELAY_MAX_RTT:g} base RTT, p99 timer lateness "
                f"(agent event loop) < {TIMER_LATE_MAX_RTT:g} base RTT, and the runner's link samplers covered >= "
                f"{SAMPLER_COVERAGE_MIN:.0%} of their 100 ms periods; a measure not recorded is null and not judged",
    "job": "a command job (an unmodified training script per host, launcher job specs kind 'command'; "
           "testbed/metrics/steps.py): ranks, steps_expected (the scenario's; null: unknown), steps_done (the "
           "fewest steps any rank reported), complete (every rank done with exit 0) and completion (why "
           "not), exit_codes per rank, window_s (first step start .. last step end, else the run's start .. "
           "end; relative s); busbw, sizes and the nccl-tests figures are null or empty for it, iteration_s "
           "is over every step (step_s)",
    "step_s": "a command job's step time: per step the slowest rank's seconds (DDP steps are synchronous: "
              "every rank waits for the gradients' all-reduce), over the steps every rank reported; p50/p99 "
              "by nearest rank with n, max and mean over the healthy steps (span first start .. last end "
              "overlapping no fault window: apply .. revert or link_up, else the run's end); step_times_s "
              "lists every step's (null: not reported by every rank); s",
    "faulted_step": "the step in progress on the slowest rank at the first disruptive fault (per rank its "
                    "first step ending at or after the fault, or the one after its last if it is not done; "
                    "the lowest): its time (null: not finished by every rank) vs the median healthy step; "
                    "slowdown_pct = time / median - 1, percent; fault_t_s relative s",
    "worst_step": "the slowest step of a command job (step_s' time, any step) and its slowdown vs the median "
                  "healthy step; s, percent",
    "host_link_stalls": "per host link of a command job's hosts: the longest stretch of the job's window between "
                        "two link-counter samples (links.jsonl, every ~100 ms) whose intervals carried more than "
                        f"{HOST_LINK_IDLE_FRACTION:.0%} of the link's configured rate, both directions together "
                        "(within one sample period above the true stall), and when it began (at_s, relative s); "
                        "longest_host_link_stall_s is the longest over host links; s",
    "losses": "a command job's rank 0 per-step 'loss' as its script reported it (job/steps-rank0.jsonl), "
              "indexed by step (null: no loss for that step); null when the script reports none",
    "links": f"per link end: tx bytes and drops per {LINK_BIN_S * 1000:.0f} ms bin from kernel counters; "
             f"achieved_bps = best {ACHIEVED_WINDOW_S:g} s sliding-window mean throughput (single bins carry "
             "HTB bursts and sampling jitter), compared with the configured rate_bps",
}




