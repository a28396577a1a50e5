#!/usr/bin/env bash
# Sets up this machine, then trains a small network with DDP over mccl on 4
# local ranks: progress, loss, samples/s and a summary. Extra arguments go to
# examples/train_ddp.py (e.g. --nproc 2 --steps 100).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
printf '\n== training (examples/train_ddp.py)\n'
exec ${PYTHON:-python3} examples/train_ddp.py --nproc 4 --steps 300 "$@"
