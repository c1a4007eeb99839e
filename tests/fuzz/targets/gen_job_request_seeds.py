#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_job_request (tests/fuzz/corpus/job_request/).

Usage: tests/fuzz/targets/gen_job_request_seeds.py [OUT_DIR]

Each seed is one input of job_request_fuzz.cc: a first byte choosing the call,
the service and the client's cancellation (its layout is in that file's
header), then a serialized tpool.v1 message (or, for Stream, messages each
framed by a 2-byte little-endian length). The messages are encoded here by
hand in the protobuf wire format (proto/tpool/v1/jobs.proto's field numbers),
so the script needs nothing but Python. The seeds are committed; rerun the
script when the layout or the protocol changes. Findings copied into the
corpus later are not written by this script and stay.
"""
import os
import struct
import sys

# ---- the protobuf wire format ----


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, n):
    return varint(num << 3 | 0) + varint(n)


def field_bytes(num, data):
    if isinstance(data, str):
        data = data.encode()
    return varint(num << 3 | 2) + varint(len(data)) + data


# ---- tpool.v1 messages (jobs.proto) ----

LANE_UNSPECIFIED, LANE_DEFAULT, LANE_BLOCKING = 0, 1, 2


def job_request(handler="echo", payload=b"", lane=None, timeout_ms=None, key=None, labels=None,
                tag=None):
    m = b""
    if handler is not None:
        m += field_bytes(1, handler)
    if payload:
        m += field_bytes(2, payload)
    if lane is not None:
        m += field_varint(3, lane)
    if timeout_ms is not None:
        m += field_varint(4, timeout_ms)
    if key is not None:
        m += field_bytes(5, key)
    for k, v in (labels or {}).items():
        m += field_bytes(6, field_bytes(1, k) + field_bytes(2, v))
    if tag is not None:
        m += field_varint(7, tag)
    return m


def job_batch(*jobs):
    return b"".join(field_bytes(1, j) for j in jobs)


def job_ref(job_id, replica=None):
    m = field_varint(1, job_id)
    if replica is not None:
        m += field_bytes(2, replica)
    return m


wait_request = job_ref  # the same two fields


# ---- the first byte (job_request_fuzz.cc) ----

EXECUTE, SUBMIT, SUBMIT_BATCH, STREAM, GET_CANCEL, WAIT = 0, 1, 2, 3, 4, 5
DEFAULT, TIGHT, DRAINING = 0, 1, 2


def head(call, service=DEFAULT, cancel=False, cancel_after=0):
    return bytes([call | service << 3 | int(cancel) << 5 | cancel_after << 6])


def frames(*messages):
    return b"".join(struct.pack("<H", len(m)) + m for m in messages)


INCARNATION = 7  # job_request_fuzz.cc's engines
REPLICA = "fuzz-replica"


def job_id(seq, incarnation=INCARNATION):
    return incarnation << 40 | seq


SEEDS = {
    # Execute
    "execute_echo": head(EXECUTE) + job_request(payload=b"hello", tag=1),
    "execute_cancel": head(EXECUTE, cancel=True) + job_request(payload=b"hello"),
    "execute_unknown_handler": head(EXECUTE) + job_request(handler="nope"),
    "execute_no_handler": head(EXECUTE) + job_request(handler=None, payload=b"x"),
    "execute_bad_lane": head(EXECUTE) + job_request(lane=9),
    "execute_blocking_lane": head(EXECUTE) + job_request(lane=LANE_BLOCKING, timeout_ms=1000),
    "execute_timeout_1ms": head(EXECUTE) + job_request(payload=b"t", timeout_ms=1),
    "execute_timeout_max": head(EXECUTE) + job_request(timeout_ms=(1 << 64) - 1),
    "execute_output_too_large": head(EXECUTE) + job_request(payload=b"o" * 2000),
    "execute_tight_payload": head(EXECUTE, TIGHT) + job_request(payload=b"p" * 600),
    "execute_draining": head(EXECUTE, DRAINING) + job_request(),
    "execute_labels": head(EXECUTE) + job_request(labels={"team": "a", "env": "b"}),
    "execute_keyed": head(EXECUTE) + job_request(payload=b"k", key="key-1"),
    "execute_truncated": head(EXECUTE) + b"\x0a\xff",
    # Submit, then Get, Cancel (with the cancel bit) and Wait on the job
    "submit_echo": head(SUBMIT) + job_request(payload=b"s"),
    "submit_cancel": head(SUBMIT, cancel=True) + job_request(payload=b"s", lane=LANE_BLOCKING),
    "submit_keyed": head(SUBMIT) + job_request(payload=b"s", key="key-2"),
    "submit_tight": head(SUBMIT, TIGHT) + job_request(payload=b"s"),
    # SubmitBatch
    "batch_mixed": head(SUBMIT_BATCH) + job_batch(
        job_request(payload=b"a", tag=1),
        job_request(lane=7, tag=2),
        job_request(handler="nope", tag=3),
        job_request(payload=b"same", key="dup", tag=4),
        job_request(payload=b"same", key="dup", tag=5),
        job_request(payload=b"other", key="dup", tag=6),
        job_request(payload=b"b", lane=LANE_BLOCKING, tag=7),
    ),
    "batch_tight_full": head(SUBMIT_BATCH, TIGHT) + job_batch(
        *[job_request(payload=bytes([i]), tag=i) for i in range(8)]),
    "batch_cancel": head(SUBMIT_BATCH, cancel=True) + job_batch(
        *[job_request(payload=b"c", tag=i) for i in range(4)]),
    "batch_draining": head(SUBMIT_BATCH, DRAINING) + job_batch(job_request(), job_request()),
    "batch_empty": head(SUBMIT_BATCH),
    # Stream
    "stream_two_messages": head(STREAM) + frames(
        job_batch(*[job_request(payload=b"x", tag=i) for i in range(3)]),
        job_batch(job_request(tag=10), job_request(lane=5, tag=11), job_request(handler="")),
    ),
    "stream_unparsable": head(STREAM) + frames(job_batch(job_request(tag=1)), b"\xff\xff\xff"),
    "stream_tight_window": head(STREAM, TIGHT) + frames(
        job_batch(*[job_request(payload=b"w" * (i * 40), tag=i) for i in range(10)])),
    "stream_cancel_after_one": head(STREAM, cancel=True, cancel_after=1) + frames(
        job_batch(job_request(tag=1), job_request(tag=2)), job_batch(job_request(tag=3))),
    "stream_cancel_at_start": head(STREAM, cancel=True) + frames(job_batch(job_request())),
    "stream_draining": head(STREAM, DRAINING) + frames(job_batch(job_request(), job_request())),
    "stream_keyed": head(STREAM) + frames(
        job_batch(job_request(payload=b"k", key="s-key", tag=1)),
        job_batch(job_request(payload=b"k", key="s-key", tag=2))),
    "stream_empty": head(STREAM),
    # Get and Cancel, Wait, on refs not submitted by the run
    "get_cancel_unknown": head(GET_CANCEL) + job_ref(job_id(1), REPLICA),
    "get_cancel_other_replica": head(GET_CANCEL) + job_ref(job_id(1), "replica-b"),
    "get_cancel_long_replica": head(GET_CANCEL) + job_ref(job_id(1), "r" * 300),
    "get_cancel_other_incarnation": head(GET_CANCEL) + job_ref(job_id(1, 9)),
    "wait_unknown": head(WAIT) + wait_request(job_id(2), REPLICA),
    "wait_other_replica": head(WAIT, cancel=True) + wait_request(job_id(2), "replica-b"),
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "corpus", "job_request")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(SEEDS)} seeds to {os.path.normpath(out)}")


if __name__ == "__main__":
    main()
