"""mrc-testbed: emulated AI-cluster fabrics for MRC (OCP Multipath Reliable Connection) experiments."""

__version__ = "0.1.0"
