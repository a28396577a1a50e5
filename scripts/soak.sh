#!/usr/bin/env bash
# A long soak on this machine: mixed collectives of random sizes (up to
# MAX_ELEMS float32 elements), every result checked; fails if file
# descriptors, threads or resident memory grow.
#   bash scripts/soak.sh [RANKS] [OPS] [MAX_ELEMS] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS=${1:-4}; OPS=${2:-500000}; MAX=${3:-1000000}; SEED=${4:-$RANDOM}
echo "soak: $RANKS ranks, $OPS ops, up to $MAX elements, seed $SEED"
cd tests/python/workers
exec python3 -m mccl.launch --nproc "$RANKS" --timeout 86400 soak.py "$OPS" "$MAX" "$SEED"
