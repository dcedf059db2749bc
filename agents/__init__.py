"""Per-host agents: the MRC transport (sans-I/O), its socket adapter and the collective workload."""
