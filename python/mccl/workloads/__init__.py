"""Workloads that MCCL's benchmarks run (also usable on their own)."""

# The ViT workload's --optimizer choices (here, without torch, for
# mccl-bench's parser, which passes them through).
OPTIMIZERS = ("adamw", "adamw-fused")
