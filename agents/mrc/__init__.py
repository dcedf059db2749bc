"""MRC transport (OCP MRC 1.0), sans-I/O: queue pairs, EVs, SACK, congestion control."""
