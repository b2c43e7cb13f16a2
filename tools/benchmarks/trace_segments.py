#!/usr/bin/env python3
"""Where a ping-pong's round trip goes, from RDMARPC_TRACE timelines.

Usage: trace_segments.py LABEL=FILE [LABEL=FILE ...]

Each FILE is a window written by a build with RDMARPC_LATENCY_TRACE (see
base/latency_trace.h): "ns side step" per line, side 0 the client and 1 the
server. For each file this prints

  * the round trip split in four, from each client post_start to the next:
    request delivery (client post_start to the server's recv_cqe), server
    (recv_cqe to its post_start), reply delivery (server post_start to the
    client's recv_cqe) and client (recv_cqe to the next post_start);
  * the median time from each step to the next step on the same side, for
    the steps between a recv_cqe and the post_start it leads to.

Medians, so a slow spell in the window moves nothing. Each mark costs a clock
reading, which is included in the step it ends.
"""

import collections
import statistics
import sys


def load(path):
    marks = []
    with open(path) as f:
        for line in f:
            ns, side, step = line.split()
            marks.append((int(ns), int(side), step))
    return marks


def round_trips(marks):
    """Four phases of each round trip that has all of them."""
    starts = [i for i, (_, side, step) in enumerate(marks)
              if side == 0 and step == "post_start"]
    phases = collections.defaultdict(list)
    for a, b in zip(starts, starts[1:]):
        t0 = marks[a][0]

        def first(side, step, after):
            for ns, s, st in marks[a:b]:
                if s == side and st == step and ns >= after:
                    return ns
            return None

        server_rx = first(1, "recv_cqe", t0)
        server_tx = server_rx and first(1, "post_start", server_rx)
        client_rx = server_tx and first(0, "recv_cqe", server_tx)
        if client_rx is None:
            continue
        end = marks[b][0]
        phases["request delivery"].append(server_rx - t0)
        phases["server"].append(server_tx - server_rx)
        phases["reply delivery"].append(client_rx - server_tx)
        phases["client"].append(end - client_rx)
        phases["round trip"].append(end - t0)
    return phases


def steps(marks):
    """Time from each step to the next on its side, receive to post."""
    last = {}
    spans = collections.defaultdict(list)
    for ns, side, step in marks:
        prev = last.get(side)
        # Only the path from a received message to the next post: the time
        # inside ibv_post_send and the idle polling between calls are the
        # round trip's other phases.
        if prev is not None and prev[1] not in ("post_start", "post_end",
                                                "send_cqe", "trip"):
            spans[(side, prev[1], step)].append(ns - prev[0])
        last[side] = (ns, step)
    return spans


def us(values):
    return statistics.median(values) / 1000.0


def main(args):
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    for arg in args:
        label, _, path = arg.partition("=")
        marks = load(path)
        print(f"{label} ({path}, {len(marks)} marks)")
        phases = round_trips(marks)
        if not phases:
            print("  no complete round trip in the window")
            continue
        count = len(phases["round trip"])
        print(f"  round trip in four phases (medians of {count}):")
        for name, values in phases.items():
            print(f"    {name:18s} {us(values):7.2f} us")
        print("  steps from a received message to the next post (medians):")
        for (side, a, b), values in sorted(
                steps(marks).items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
            if len(values) < count // 2:
                continue  # A rare path (a batch of two, a credit message).
            who = "client" if side == 0 else "server"
            print(f"    {who} {a:>16s} -> {b:16s} {us(values):6.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
