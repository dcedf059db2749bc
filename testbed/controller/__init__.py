"""The MRC controller (``mrc_ctl.h``'s consumer): a process of its own that watches every
agent's EV events and acts on EV profiles (deny, allow, replace). :mod:`.policy` decides,
sans-I/O; :mod:`.process` is the process the runner starts."""
