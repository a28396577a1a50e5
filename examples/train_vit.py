"""Data-parallel ViT training over MCCL (the reference workload).

The model and training loop live in mccl.workloads.vit, so that
`mccl-bench scaling` can run them from an installed package; this file is
the example's entry point. Every option: python examples/train_vit.py --help

    python -m mccl.launch --nproc 2 examples/train_vit.py --preset tiny --steps 20
    torchrun --nnodes 4 --nproc_per_node 1 ... examples/train_vit.py --device mps --bf16
"""

import sys

from mccl.workloads.vit import main

if __name__ == "__main__":
    sys.exit(main())
