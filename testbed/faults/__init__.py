"""Runtime faults on fabric links, owned by one :class:`FaultInjector` per fabric.

* :mod:`.steps`    -- typed changes (:class:`LinkState`, :class:`Loss`, :class:`Rate`,
  :class:`Blackhole`, :class:`Reconverge`) and the timeline's :class:`Step` (pure);
* :mod:`.nft`      -- loss and blackhole as nftables transactions on each link end's
  ingress (pure plans, and the two ways of running them);
* :mod:`.injector` -- :class:`FaultInjector`: applies every primitive and step, keeps the
  state in force (links down, nftables faults, HTB rates), journals, reverts all.

Link down/up goes through :meth:`testbed.fabric.local.Fabric.set_link` (the fabric re-plans its
routes); rate changes replace the HTB class rate (and burst) on both ends. The rate now in
force is the injector's: :func:`current_rate_bps`, where :class:`testbed.fabric.counters.LinkCounters`
reads it.
"""

from testbed.faults.injector import FaultError, FaultInjector
from testbed.faults.nft import BLACKHOLE_COUNTER, LOSS_COUNTER, LOSS_MOD, FaultState, loss_threshold, table_name, transition
from testbed.faults.steps import FAULTS, Blackhole, Change, EVAction, LinkState, Loss, Rate, Reconverge, Step

__all__ = ["BLACKHOLE_COUNTER", "FAULTS", "LOSS_COUNTER", "LOSS_MOD", "Blackhole", "Change", "FaultError",
           "EVAction", "FaultInjector", "FaultState", "LinkState", "Loss", "Rate", "Reconverge", "Step",
           "loss_threshold", "table_name", "transition"]
