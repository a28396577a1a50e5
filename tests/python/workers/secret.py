"""A job keyed by MCCL_SECRET_FILE (argv[1]: the case, argv[2:]: secret files).

same      every rank reads argv[2]: collectives and a subgroup work
mismatch  rank 0 reads argv[2], the others argv[3]: the first collective
          fails at once, naming the secret settings
chunk     the last rank sets another MCCL_CHUNK_BYTES: its init is refused,
          naming the setting and both values
"""

import datetime
import os
import sys
import time

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
case = sys.argv[1]
os.environ["MCCL_SECRET_FILE"] = sys.argv[3] if case == "mismatch" and rank > 0 else sys.argv[2]
if case == "chunk" and rank == world - 1:
    os.environ["MCCL_CHUNK_BYTES"] = "64K"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import mccl  # noqa: E402,F401

torch.set_num_threads(1)
timeout = datetime.timedelta(seconds=30)
if case == "chunk" and rank == world - 1:
    try:
        dist.init_process_group("mccl", timeout=timeout)
    except Exception as e:  # noqa: BLE001
        text = str(e)
        assert "MCCL_CHUNK_BYTES is '65536' on this rank but '1048576' on rank 0" in text, text
        print("WORKER OK", flush=True)
        sys.exit(0)
    raise SystemExit("a rank with another MCCL_CHUNK_BYTES was accepted")

dist.init_process_group("mccl", timeout=timeout)
if case == "chunk":
    # The refused rank never listens: nothing to talk to. Rank 0 holds the
    # store (torch's TCPStore server) until every rank has read the record.
    print("WORKER OK", flush=True)
    if rank == 0:
        time.sleep(5)
    os._exit(0)
if case == "mismatch":
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(7))
    except Exception as e:  # noqa: BLE001
        took = time.monotonic() - start
        # Rank 0 (the odd one out) names the cause; another rank may instead
        # see rank 0 hang up mid-handshake, or a neighbour's abort.
        assert "MCCL_SECRET_FILE" in str(e) or (rank > 0 and "rank" in str(e)), str(e)
        assert took < 15, f"failed only after {took:.1f} s"
        print("WORKER OK", flush=True)
        time.sleep(3)  # stay until every rank has seen its own failure (not our exit)
        os._exit(0)
    raise SystemExit("ranks with different job secrets could talk")

# same: distinct data, a prime count, against a float64 reference.
n = 1031
x = torch.arange(n, dtype=torch.float64) * (rank + 1) + rank
want = sum(torch.arange(n, dtype=torch.float64) * (r + 1) + r for r in range(world))
t = x.to(torch.float32)
dist.all_reduce(t)
assert torch.allclose(t.double(), want, rtol=1e-6), (t[:4], want[:4])
sub = dist.new_group([0, world - 1])
if rank in (0, world - 1):
    s = torch.tensor([rank + 1], dtype=torch.int64)
    dist.all_reduce(s, group=sub)
    assert s.item() == 1 + world, s
dist.barrier()
dist.destroy_process_group()
print("WORKER OK", flush=True)
