"""Workloads that MCCL's benchmarks run (also usable on their own)."""
