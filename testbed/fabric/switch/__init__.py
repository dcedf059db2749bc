"""The switch side of congestion: a tc-BPF egress program per router interface.

A virtual ("phantom") queue drained at the link's rate stands in for the
qdisc backlog BPF cannot read; above thresholds the program sets ECN CE on
ECT packets and trims MRC DATA packets to their header, sent in a
strict-priority HTB class (:func:`testbed.fabric.shaping.plan` with
``header_queue_pkts``) and re-queued at their trimmed size. See egress.bpf.c
for the decision per packet, :mod:`.model` for its Python twin,
:mod:`.loader` for how it is attached, :mod:`.build` for where it is compiled.

API: ``attach(netns, ifname, EgressConfig(...)) -> EgressHandle``;
``EgressHandle.counters()``, ``EgressHandle.detach()``.
"""

from testbed.fabric.switch.bpf import EgressProgram, SwitchLoadError, TestRun
from testbed.fabric.switch.build import SwitchBuildError, object_path
from testbed.fabric.switch.config import HTB_HEADER_CLASSID, MAX_TRIMMED_FRAME_BYTES, EgressConfig, SwitchConfigError, header_bytes, trimmed_frame_bytes
from testbed.fabric.switch.loader import EgressHandle, SwitchAttachError, attach

__all__ = ["EgressConfig", "EgressHandle", "EgressProgram", "HTB_HEADER_CLASSID", "MAX_TRIMMED_FRAME_BYTES",
           "SwitchAttachError", "SwitchBuildError", "SwitchConfigError", "SwitchLoadError", "TestRun",
           "attach", "header_bytes", "object_path", "trimmed_frame_bytes"]
