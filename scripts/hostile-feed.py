#!/usr/bin/env python3
"""Forged MoldUDP64 datagrams against a live `tickwire feed` (the hostile-input pass of
2026-12-07), each during a real session published with `tickwire md publish`.

    scripts/hostile-feed.py BINARY [CASE...]     # cases: eos-next eos-ahead hb-ahead hold-flood

For each case it starts `BINARY router` and `BINARY feed --session TICKWIRE01` on
loopback, generates a session with `BINARY md generate` (300,000 messages for
hold-flood, 20,000 otherwise), publishes it at 1x to 239.9.9.9 on the loopback
interface, and, once the stream has run for a moment, sends the forged datagrams
from this script:

    eos-next    one End of Session at the next sequence number
    eos-ahead   one End of Session 90,000 ahead
    hb-ahead    one heartbeat 90,000 ahead
    hold-flood  9,000 one-message packets (an unknown message type), 20,000 ahead of
                the stream, 10 apart (they fill the feed's 8,192-packet hold)

It prints the feed's exit status and its counters. Needs multicast on `lo` (Linux
loops multicast back to local members; no route is needed for a group sent with
IP_MULTICAST_IF 127.0.0.1). Figures are recorded in BENCHMARKS.md.
"""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

GROUP = ("239.9.9.9", 36400)
REQUEST = ("127.0.0.1", 36401)
ROUTER = "127.0.0.1:17421"
SESSION = "TICKWIRE01"


def packet(seq, msgs=(), count=None):
    head = SESSION.ljust(10)[:10].encode() + struct.pack(
        ">QH", seq, len(msgs) if count is None else count
    )
    return head + b"".join(struct.pack(">H", len(m)) + m for m in msgs)


def sender():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
    return s


def listener():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("", GROUP[1]))
    mreq = socket.inet_aton(GROUP[0]) + socket.inet_aton("127.0.0.1")
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
    s.settimeout(0.002)
    return s


def next_sequence(sock, seconds):
    """The next sequence number of the live stream after watching it `seconds`."""
    end = time.time() + seconds
    nxt = None
    while True:
        try:
            b, _ = sock.recvfrom(65536)
        except socket.timeout:
            # Past the watch, and the socket drained (a backlog read late would name
            # a position the feed has already passed).
            if time.time() >= end and nxt is not None:
                return nxt
            continue
        seq, count = struct.unpack(">QH", b[10:20])
        if count not in (0, 0xFFFF):
            nxt = max(nxt or 0, seq + count)


def attack(case, sock, out):
    nxt = next_sequence(sock, 0.5)
    if case == "eos-next":
        out.sendto(packet(nxt, count=0xFFFF), GROUP)
        return f"one End of Session at {nxt} (the next sequence number)"
    if case == "eos-ahead":
        out.sendto(packet(nxt + 90_000, count=0xFFFF), GROUP)
        return f"one End of Session at {nxt + 90_000} (90,000 ahead)"
    if case == "hb-ahead":
        out.sendto(packet(nxt + 90_000, count=0), GROUP)
        return f"one heartbeat at {nxt + 90_000} (90,000 ahead)"
    base = nxt + 20_000
    for i in range(9_000):
        out.sendto(packet(base + 10 * i, [b"z"]), GROUP)
        if i % 500 == 499:
            time.sleep(0.002)
    return f"9,000 packets from {base} to {base + 89_990}, 10 apart"


def run(binary, case, tmp):
    messages = "300000" if case == "hold-flood" else "20000"
    session = os.path.join(tmp, f"s-{messages}.itch")
    if not os.path.exists(session):
        subprocess.run(
            [binary, "md", "generate", "--out", session, "--messages", messages],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    procs = []
    try:
        router = subprocess.Popen(
            [binary, "router", "--listen", ROUTER, "--no-guaranteed"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(router)
        time.sleep(0.4)
        feed = subprocess.Popen(
            [binary, "feed", "--group", f"{GROUP[0]}:{GROUP[1]}", "--router", ROUTER,
             "--session", SESSION, "--idle", "block", "--quiet"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        procs.append(feed)
        time.sleep(0.8)
        sock, out = listener(), sender()
        publisher = subprocess.Popen(
            [binary, "md", "publish", "--file", session, "--group", f"{GROUP[0]}:{GROUP[1]}",
             "--speed", "1x", "--session", SESSION, "--request", f"{REQUEST[0]}:{REQUEST[1]}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(publisher)
        what = attack(case, sock, out)
        publisher.wait(timeout=120)
        text, _ = feed.communicate(timeout=60)
        counters = [l for l in text.splitlines() if " · " in l or "lost:" in l]
        print(f"{case}: sent {what}; feed exit status {feed.returncode}")
        for line in counters:
            print(f"    {line}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    cases = sys.argv[2:] or ["eos-next", "eos-ahead", "hb-ahead", "hold-flood"]
    with tempfile.TemporaryDirectory(prefix="tickwire-hostile-feed-") as tmp:
        for case in cases:
            run(binary, case, tmp)


if __name__ == "__main__":
    main()
