"""Every collective x op x dtype against references and Gloo, on 1-5 ranks."""

import pytest

from conftest import run_workers


@pytest.mark.parametrize("world", [1, 2, *(pytest.param(n, marks=pytest.mark.slow) for n in (3, 4, 5))])
def test_collectives_match_reference_and_gloo(world):
    outs = run_workers("collectives.py", world, timeout=420)
    assert "checks passed" in outs[0]


@pytest.mark.parametrize("world", [3])
@pytest.mark.slow
def test_collectives_with_pipelined_striped_transport(world):
    # Tiny chunks and frames over 3 sockets per peer, with a tight unexpected
    # budget, every frame checksummed: the same results through many-chunk
    # pipelines.
    env = {"MCCL_CHECKSUM": "1", "MCCL_CHUNK_BYTES": "4096", "MCCL_FRAME_BYTES": "4096", "MCCL_NSOCKS_PER_PEER": "3",
           "MCCL_UNEXPECTED_BYTES": "16384", "MCCL_SMALL_BYTES": "0"}
    run_workers("collectives.py", world, env=env, timeout=420)


@pytest.mark.parametrize("world", [3])
@pytest.mark.slow
def test_collectives_by_same_host_reads(world):
    # Every frame goes by reference (the receiver copies it from the sender's
    # memory with process_vm_readv), in small frames, checksummed: the same
    # results, and the worker checks that references were really sent.
    env = {"MCCL_LOCAL_READ_BYTES": "1", "MCCL_CHUNK_BYTES": "4096", "MCCL_FRAME_BYTES": "4096",
           "MCCL_CHECKSUM": "1", "EXPECT_LOCAL_READS": "1"}
    run_workers("collectives.py", world, env=env, timeout=420)


@pytest.mark.parametrize("mode,world,reads", [("integrity", 2, "0"), ("encrypt", 3, "1")])
@pytest.mark.slow
def test_collectives_over_sealed_links(mode, world, reads):
    # MCCL_WIRE_SECURITY: every frame carries an AES-GCM tag (and with
    # encrypt its payload is ciphertext), small frames so there are many;
    # with same-host reads the REF descriptors are sealed instead. Same
    # results, and the worker checks that sealed frames really arrived.
    env = {"MCCL_WIRE_SECURITY": mode, "MCCL_FRAME_BYTES": "4096", "MCCL_CHUNK_BYTES": "4096",
           "MCCL_LOCAL_READ_BYTES": reads, "EXPECT_LOCAL_READS": reads}
    run_workers("collectives.py", world, env=env, timeout=420)


@pytest.mark.slow
def test_collectives_all_on_tcp():
    # MCCL_LOCAL_READ_BYTES=0: not one frame by reference, same results.
    run_workers("collectives.py", 2, env={"MCCL_LOCAL_READ_BYTES": "0", "EXPECT_LOCAL_READS": "0"},
                timeout=420)


@pytest.mark.parametrize("world", [2, 5])
@pytest.mark.slow
def test_collectives_in_pieces(world):
    # all_reduce above 2 x MCCL_PIECE_BYTES runs as pieces.
    outs = run_workers("collectives.py", world, env={"MCCL_PIECE_BYTES": "1K"}, timeout=420)
    assert "checks passed" in outs[0]


@pytest.mark.parametrize("world", [6, 7])
@pytest.mark.slow
def test_every_allreduce_algorithm_matches_reference_and_gloo(world):
    # Each algorithm forced on a group of its own (MCCL_ALGO at new_group):
    # 6 ranks form the torus's 2 x 3 grid and fold recursive doubling and
    # Rabenseifner's onto 4; 7 is prime (the torus's single row, a fold of 3).
    outs = run_workers("allreduce_algorithms.py", world, timeout=420)
    assert "checks passed over 7 algorithms" in outs[0]


@pytest.mark.slow
def test_profiler_span_ends_when_the_op_completes():
    run_workers("profiler_spans.py", 2, timeout=120)
