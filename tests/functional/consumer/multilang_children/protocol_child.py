"""A KCL multi-language record processor written from the protocol's documentation alone
(docs/CONSUMERS.md, section "The multi-language protocol"): standard library only.

Appends one JSON line per record to $SHARDLOG_CHILD_OUT and checkpoints after every batch
at its last record. $SHARDLOG_CHILD_FAIL = "crash:<seq>" or "hang:<seq>" makes it exit or
hang when it receives that seq, once: the first time it creates $SHARDLOG_CHILD_MARKER.
$SHARDLOG_CHILD_RAW names a file that gets every line read from STDIN, verbatim; with
$SHARDLOG_CHILD_BAD_CHECKPOINT set, each batch first asks for a checkpoint past its end and
records the error it gets back. $SHARDLOG_CHILD_FLOOD = "<n>" makes it print n bytes with no
newline on STDOUT and on STDERR (then a newline on each) before it starts.
"""

import base64
import json
import os
import sys
import time


def send(message):
    # Surrounded by newlines, as KCL's own libraries write them.
    sys.stdout.write("\n" + json.dumps(message) + "\n")
    sys.stdout.flush()


def receive():
    line = sys.stdin.readline()
    raw = os.environ.get("SHARDLOG_CHILD_RAW")
    if raw and line:
        with open(raw, "a") as f:
            f.write(line)
    return json.loads(line) if line else None


def checkpoint(sequence_number):
    send({"action": "checkpoint", "sequenceNumber": sequence_number, "subSequenceNumber": None})
    reply = receive()
    if reply is None or reply.get("action") != "checkpoint":
        raise SystemExit("expected a checkpoint reply")
    if reply.get("error"):
        sys.stderr.write(f"checkpoint {sequence_number} failed: {reply['error']}\n")
    return reply.get("error")


def fail_once(seq):
    mode, _, at = os.environ.get("SHARDLOG_CHILD_FAIL", "").partition(":")
    marker = os.environ.get("SHARDLOG_CHILD_MARKER", "")
    if not mode or at != seq or not marker or os.path.exists(marker):
        return
    with open(marker, "w") as f:
        f.write(mode)
    if mode == "crash":
        sys.stderr.write(f"crashing on purpose at {seq}\n")
        sys.stderr.flush()
        os._exit(3)
    while True:  # hang on purpose
        time.sleep(3600)


def flood(stream, size):
    chunk = "x" * 65536
    while size > 0:
        stream.write(chunk[:size])
        size -= len(chunk)
    stream.write("\n")
    stream.flush()


def main():
    out = os.environ["SHARDLOG_CHILD_OUT"]
    shard = None
    flood_bytes = int(os.environ.get("SHARDLOG_CHILD_FLOOD", "0"))
    if flood_bytes:
        flood(sys.stderr, flood_bytes)
        flood(sys.stdout, flood_bytes)
    print("a line that is not a protocol message: the daemon skips it")
    while True:
        message = receive()
        if message is None:
            return  # STDIN closed: the daemon is done with us
        action = message["action"]
        if action == "initialize":
            shard = message["shardId"]
            sys.stderr.write(f"initialize {shard} after {message['sequenceNumber']}\n")
        elif action == "processRecords":
            for record in message["records"]:
                fail_once(record["sequenceNumber"])
                line = {
                    "shard": shard,
                    "seq": int(record["sequenceNumber"]),
                    "key": record["partitionKey"],
                    "data": base64.b64decode(record["data"]).decode(),
                    "arrival": record["approximateArrivalTimestamp"],
                    "subSequenceNumber": record["subSequenceNumber"],
                    "pid": os.getpid(),
                }
                with open(out, "a") as f:
                    f.write(json.dumps(line) + "\n")
            if message["records"] and os.environ.get("SHARDLOG_CHILD_BAD_CHECKPOINT"):
                past_the_end = str(int(message["records"][-1]["sequenceNumber"]) + 1)
                with open(out, "a") as f:
                    f.write(json.dumps({"checkpointError": checkpoint(past_the_end)}) + "\n")
            if message["records"]:
                checkpoint(message["records"][-1]["sequenceNumber"])
        elif action in ("shardEnded", "shutdownRequested"):
            checkpoint(None)  # at shard end: SHARD_END; at shutdown: everything delivered
        elif action == "leaseLost":
            pass  # checkpointing is no longer possible
        send({"action": "status", "responseFor": action})


if __name__ == "__main__":
    main()
