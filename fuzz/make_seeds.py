#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/).

Seeds are well-formed messages of every kind, written from the wire format
in csrc/core/transport/frame.h and handshake.h, so the fuzzers start from
inputs that pass the parsers' first checks. Rerun after a format change.
"""

import struct
from pathlib import Path

HERE = Path(__file__).parent
FRAME = struct.Struct("<IHBBQQQQQIIiIBBBBI")  # 72 bytes, see frame.h
assert FRAME.size == 72
MAGIC, VERSION = 0x4C43434D, 6
DATA, CLOSE, ABORT, RTS, CTS, REF, REF_DONE, LOCAL_HELLO, LOCAL_OK = range(1, 10)
P2P, CHECKSUM = 1, 2


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def frame(type_=DATA, flags=0, seq=1, offset=0, msg=0, count=0, slot=0, length=0, root=-1, src=1,
          op=1, dtype=0, redop=0, algo=0, checksum=0):
    return FRAME.pack(MAGIC, VERSION, type_, flags, 0x1122334455667788, seq, offset, msg, count,
                      slot, length, root, src, op, dtype, redop, algo, checksum)


def data_frame(payload: bytes, **kw):
    return frame(msg=len(payload), count=len(payload) // 4, length=len(payload), **kw) + payload


def write(target: str, name: str, blob: bytes):
    d = HERE / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(blob)


def main():
    payload = bytes(range(256)) * 4
    frames = {
        "data": data_frame(payload),
        "data_checksum": data_frame(payload, flags=CHECKSUM, checksum=crc32c(payload)),
        "p2p": data_frame(payload[:100], flags=P2P, op=10, slot=7),
        "empty": frame(op=9),
        "close": frame(type_=CLOSE, op=0),
        "abort": frame(type_=ABORT, op=0, length=11) + b"it went bad",
        "rts": frame(type_=RTS, flags=P2P, op=10, msg=1 << 20),
        "cts": frame(type_=CTS, flags=P2P, op=10),
        "second_part": frame(offset=512, msg=1024, count=256, length=512) + payload[:512],
        # Same-host frames: a REF carries a 16-byte descriptor (address, token)
        # instead of its payload; a LOCAL_HELLO names an attestation socket
        # and a token (16 bytes each).
        "ref": frame(type_=REF, msg=1024, count=256, length=1024) + struct.pack("<QQ", 0x7F0000001000, 1),
        "ref_done": frame(type_=REF_DONE, op=0, offset=1),
        "local_hello": frame(type_=LOCAL_HELLO, op=0, length=32) + bytes(range(32)),
        "local_ok": frame(type_=LOCAL_OK, op=0),
    }
    for name, blob in frames.items():
        write("frame", name, blob[:72] + struct.pack("<I", 1 << 20))
        write("stream", name, blob)
    write("stream", "sequence", b"".join(frames[k] for k in ("data", "p2p", "rts", "cts", "close")))
    write("stream", "local_sequence",
          b"".join(frames[k] for k in ("local_hello", "local_ok", "ref_done", "ref")))
    # Handshake: a HelloC from "rank 1" to rank 0 of a 4-rank group (its
    # proof is wrong; the acceptor must refuse it), prefixed by the split byte.
    hello_c = struct.pack("<IHBBQIIIH2x", 0x5348434D, VERSION, 2, 0, 0x0123456789ABCDEF, 1, 0, 4, 29500)
    hello_c += bytes(range(16)) + bytes(32)
    assert len(hello_c) == 80
    for split in (0, 7, 15):
        write("handshake", f"hello_c_split{split}", bytes([split]) + hello_c)
    write("handshake", "wrong_kind", bytes([3]) + hello_c[:6] + b"\x01" + hello_c[7:])
    write("handshake", "http", bytes([4]) + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    # Attestation socket (transport/local_attest_linux.cc), prefixed by the
    # mode byte: even = a stranger talks to this process's socket (OPEN, then
    # a reader proof), odd = a stranger answers this process as a reader.
    pre = lambda kind: struct.pack("<IB3x", 0x414C434D, kind)
    write("attest", "open", bytes([0]) + pre(1) + bytes(range(48)))
    write("attest", "open_then_proof", bytes([2]) + pre(1) + bytes(range(48)) + pre(3) + bytes(32))
    write("attest", "server_proof", bytes([1]) + pre(2) + bytes(range(48)))
    write("attest", "server_proof_cookie", bytes([3]) + pre(2) + bytes(range(48)) + pre(4) + bytes(24))
    # Sealed streams (fuzz_sealed seals them itself): mode byte (bit 0
    # encrypt, bit 1 flip a bit), flip position byte, then plain frames.
    seq = b"".join(frames[k] for k in ("data", "p2p", "abort", "close"))
    for mode in (0, 1, 2, 3):
        write("sealed", f"sequence_mode{mode}", bytes([mode, 77]) + seq)
    print("seeds written to", HERE / "corpus")


if __name__ == "__main__":
    main()
