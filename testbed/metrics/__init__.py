"""Metrics of one scenario run: raw agent/runner records -> binned series and a summary.

Inputs, per transport, in ``runs/<scenario>-<timestamp>/<transport>/`` (written by the
runner, :mod:`testbed.run`): ``events.jsonl``, ``samples.jsonl`` (agent flow
samples, cumulative counters), ``links.jsonl`` (kernel link counters, cumulative),
``cpu.jsonl`` (host CPU busy fraction); top level ``manifest.json`` (``scenario``,
``transports``, ``world_size``, ``host_link_rate_bps``).

Everything here is a pure function on parsed records (lists of dicts, columns as numpy
arrays) except the ``load_*`` helpers. :mod:`testbed.report` writes the files.

Modules (every public name is importable from :mod:`testbed.metrics` itself):

- :mod:`~testbed.metrics.definitions`: bin widths, thresholds, :data:`DEFINITIONS`, errors.
- :mod:`~testbed.rundir.read`: manifest and JSONL parsing; samples and link counters
  become columns (:class:`SampleTable`, :class:`LinkTable`) while they are parsed. Every
  record is checked against the run directory's schema (:mod:`testbed.rundir.schemas`): inside
  a :func:`collecting` block a damaged record, file or key is skipped and noted in a
  :class:`Damage` (``file:line: what is wrong``), outside one it raises :class:`MetricsError`;
  records dated outside the run (:func:`~testbed.rundir.read.time_window`) are dropped,
  so no absurd date or manifest value sizes an allocation.
- :mod:`~testbed.metrics.series`: binning of cumulative counters, per-flow series,
  aggregate goodput, link throughput.
- :mod:`~testbed.metrics.recovery`: faults, EV transitions, time to detect, iteration
  gaps, recovery time, longest stall.
- :mod:`~testbed.metrics.collectives`: nccl-tests-style sizes table, busbw, completion.
- :mod:`~testbed.metrics.fidelity`: CPU busy fraction, busiest link ends.
- :mod:`~testbed.metrics.summary`: per-transport analysis and the run summary.
- :mod:`~testbed.metrics.synthetic`: a synthetic fat-tree-scale run directory (benchmark).

Conventions: times ``t_s`` are seconds relative to the transport's run start (the
``run`` ``start`` event, else its earliest record); rates are bits/s (``*_bps``)
unless the name says bytes (``*_bytes_per_s``); sizes in bytes.

Metric definitions (also in :data:`DEFINITIONS`, copied into ``summary.json``):

- goodput: per rx flow, increments of the agent's cumulative received-byte counter
  over bins of one agent sample interval (``kpi_resolution_s``: the job specs'
  ``sample_interval_s``, at most one base RTT; never finer, which would only interpolate
  between samples; counter linearly interpolated at bin edges), in bits/s;
  aggregate goodput is the sum over all rx flows.
- iteration gaps: bins lying entirely between one iteration's end (last rank) and the
  next one's start (first rank), when no collective runs (set-up, result check). They
  are left out of the baseline, dips, recovery and stalls.
- recovery time: for a disruptive fault applied at ``t_f``, the baseline is the
  median raw aggregate goodput over the workload bins before the first fault; the
  aggregate is smoothed with a centred rolling median of 5 bins (it drops
  single-bin spikes and keeps a step's position exact). The dip is the first run of
  >= 3 smoothed bins below 90 % of the baseline starting within 1 s after
  ``t_f`` (shorter runs are noise); recovery is the start of the first bin after the
  dip back at >= 90 %, minus ``t_f``. No dip -> 0.0. Never back before the workload
  ends -> None.
- time to detect: first EV transition from a usable state (GOOD, or SKIP: the
  congestion back-off, agents/mrc/ev.py) into ASSUMED_BAD/DENIED/UNKNOWN at or after
  ``t_f``, minus ``t_f``; GOOD -> SKIP is congestion, not detection. None for a
  transport without EVs (tcp).
- longest stall: longest run of consecutive bins with zero aggregate goodput
  inside the workload window (first iteration start .. last iteration end), iteration
  gaps excluded.
- iteration time: per (size, iteration) the slowest rank's ``seconds`` (a collective
  is done when every rank is), i.e. nccl-tests ``-a 3`` (MAX); its default ``-a 1``
  averages ranks, which hides a rank stalled by a failure.
- algbw = size_bytes / time_s; busbw = algbw * 2(n-1)/n for all-reduce
  (nccl-tests doc/PERFORMANCE.md); time_s is the mean over measured iterations,
  as nccl-tests reports. Given in bytes/s and Mbit/s.
- CPU fidelity: mean and p95 of host busy fraction (all cores) in the workload
  window; p95 >= 0.95 marks the run ``valid: false`` (an emulator starved of CPU
  measures itself, not the network).
- link fidelity: per link end, the best 1 s sliding-window mean of its 100 ms
  throughput bins (``achieved_bps``) against the configured rate; one bin alone
  over-reads a shaped link by the HTB burst and the counter-read jitter.
"""

from __future__ import annotations

from testbed.model.nccl import bandwidths, bus_factor
from testbed.metrics.collectives import completion, expected_measured_iterations, size_table
from testbed.metrics.definitions import BIN_S, BUSIEST_LINKS, CPU_SATURATED_P95, DEFINITIONS, DETECTED_STATES, DIP_HORIZON_S, DISRUPTIVE, LINK_BIN_S, MIN_DIP_BINS, RECOVERY_FRACTION, SMOOTH_BINS, MetricsError, RunDirError
from testbed.metrics.fidelity import busiest_links, cpu_fidelity
from testbed.rundir.damage import Damage, collecting
from testbed.rundir.load import TransportRecords, load_transport
from testbed.rundir.read import is_run_dir, iter_jsonl, load_jsonl, load_manifest, scenario_name
from testbed.rundir.tables import FlowKey, LinkTable, SampleTable
from testbed.metrics.recovery import active_bins, ev_transitions, fault_instants, faults, iteration_gaps, longest_stall, recovery_time, time_to_detect
from testbed.metrics.series import FlowSeries, aggregate_goodput_bps, bin_edges, binned_increments, flow_samples, last_in_bin, link_series, rolling_median
from testbed.metrics.summary import TransportAnalysis, analyze_run, analyze_transport, comparison_row, run_t0, workload_window

__all__ = [
    "BIN_S", "BUSIEST_LINKS", "CPU_SATURATED_P95", "DEFINITIONS", "DETECTED_STATES", "DIP_HORIZON_S",
    "DISRUPTIVE", "LINK_BIN_S", "MIN_DIP_BINS", "RECOVERY_FRACTION", "SMOOTH_BINS", "MetricsError",
    "RunDirError", "Damage", "FlowKey", "FlowSeries", "LinkTable", "SampleTable", "TransportAnalysis",
    "TransportRecords", "active_bins", "aggregate_goodput_bps", "analyze_run", "analyze_transport",
    "bandwidths", "bin_edges", "binned_increments", "bus_factor", "busiest_links", "comparison_row",
    "collecting", "completion", "cpu_fidelity", "ev_transitions", "expected_measured_iterations",
    "fault_instants", "faults",
    "flow_samples", "is_run_dir", "iter_jsonl", "iteration_gaps", "last_in_bin",
    "link_series", "load_jsonl", "load_manifest", "load_transport", "longest_stall", "recovery_time",
    "rolling_median", "run_t0", "scenario_name", "size_table", "time_to_detect", "workload_window",
]
