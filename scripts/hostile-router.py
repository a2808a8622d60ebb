#!/usr/bin/env python3
"""Full-size hostile-input attacks on a `tickwire router` binary (issue 12), with a healthy
publisher/subscriber pair (`tickwire pub` / `tickwire sub`) running during each attack.

    scripts/hostile-router.py BINARY [CASE...]      # cases: ping stats prehello trickle subs groups walk egress
                                                    #        qnodes qwalk qentries browse qlist qlist-fit images monitor statsq churn
                                                    #        subchurn

Extra router flags (e.g. a lower --egress-memory-limit) come from the environment:
TICKWIRE_ROUTER_ARGS="--egress-memory-limit 256MiB" scripts/hostile-router.py BINARY egress

For each case it starts `BINARY router` on a free loopback port with its default
configuration (a case may add flags: `images` runs it with `--cache 'c/>'`), runs the attack, samples the router's VmRSS from /proc every 100 ms, and
prints one line: peak RSS, what happened to the attacker, and whether the healthy pair
received every message. An attack stops early when the router's RSS passes 1.5 GiB (the
machine is shared). Not a benchmark: the figures are memory and counts, not speed.
Results are recorded in docs/reliability.md.
"""
import json
import os
import random
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

RSS_CAP_KIB = 1536 * 1024
HEALTHY_MSGS = 50_000
HEALTHY_RATE = "10k"


def frame(kind, body=b"", flags=0, aux=0):
    return struct.pack("<IBBH", 8 + len(body), kind, flags, aux) + body


def hello(name):
    return frame(0x01, struct.pack("<HHI", 1, 0, 0) + name.encode())


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Router:
    def __init__(self, binary, own=()):
        self.binary = binary
        extra = [*own, *os.environ.get("TICKWIRE_ROUTER_ARGS", "").split()]
        # A spool of its own, removed at close (the default would be a lasting
        # router-PORT directory under the user's data directory).
        self.data_dir = tempfile.mkdtemp(prefix="tickwire-hostile-")
        self.p = subprocess.Popen(
            [binary, "router", "--listen", "127.0.0.1:0", "--data-dir", self.data_dir, *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "TICKWIRE_LOG": "error"},
        )
        line = self.p.stdout.readline().decode()
        host, port = line.strip().rsplit(" ", 1)[1].rsplit(":", 1)
        self.addr = (host, int(port))
        # With --http the monitor's banner follows: "... listening on http://ADDR/".
        self.http = None
        if "--http" in extra:
            m = re.search(r"http://([^/\s]+)/", self.p.stdout.readline().decode())
            self.http = m.group(1) if m else None
        self.peak = 0
        self.stop = False
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self):
        while not self.stop:
            self.peak = max(self.peak, rss_kib(self.p.pid))
            time.sleep(0.1)

    def rss(self):
        return rss_kib(self.p.pid)

    def close(self):
        self.stop = True
        self.p.kill()  # our own child, by its pid
        self.p.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)


class Healthy:
    """`tickwire sub --count N` and `tickwire pub --count N --rate R` on their own topic."""

    def __init__(self, binary, router):
        addr = f"{router.addr[0]}:{router.addr[1]}"
        self.sub = subprocess.Popen(
            [binary, "sub", "--router", addr, "--quiet", "--count", str(HEALTHY_MSGS),
             "--name", "healthy-sub", "healthy/t"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        time.sleep(0.5)  # subscribed before the first message (not a measurement)
        self.pub = subprocess.Popen(
            [binary, "pub", "--router", addr, "--count", str(HEALTHY_MSGS), "--rate",
             HEALTHY_RATE, "--size", "100", "--name", "healthy-pub", "healthy/t"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def result(self, timeout=60):
        try:
            out, _ = self.sub.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.sub.kill()
            out, _ = self.sub.communicate()
            return f"healthy sub TIMED OUT: {out.decode().strip()[-200:]!r}"
        self.pub.wait(timeout=timeout)
        text = out.decode().strip().replace("\n", " | ")
        return f"healthy sub exit {self.sub.returncode}: {text[-160:]}"


def attack_ping(router, budget_s=30):
    """One client sends up to 100 M PINGs and never reads."""
    s = socket.create_connection(router.addr)
    s.sendall(hello("ping-flooder"))
    chunk = b"".join(frame(0x05, struct.pack("<Q", i)) for i in range(65536))
    s.settimeout(2.0)
    sent = 0
    end = time.time() + budget_s
    outcome = "still reading at the end of the attack"
    while sent < 100_000_000 and time.time() < end:
        if router.rss() > RSS_CAP_KIB:
            outcome = "router RSS passed 1.5 GiB: stopped"
            break
        try:
            s.sendall(chunk)
        except (socket.timeout, OSError) as e:
            outcome = f"router stopped reading ({type(e).__name__})"
            break
        sent += 65536
    rss_end = router.rss()
    got, how = drain(s)
    return f"{sent:,} PINGs sent; {outcome}; RSS at the end {rss_end // 1024} MiB; then {how}"


def drain(s, limit=30):
    """Reads to the end; returns (last frame kind/code, how it ended)."""
    s.settimeout(limit)
    buf = b""
    total = 0
    try:
        while True:
            b = s.recv(1 << 20)
            if not b:
                how = "EOF"
                break
            total += len(b)
            buf = (buf + b)[-4096:]
    except socket.timeout:
        how = "TIMEOUT (never closed)"
    except OSError as e:
        how = f"reset ({e.errno})"
    last = last_error(buf)
    return buf, f"{total:,} bytes, then {how}; last ERROR seen: {last}"


def last_error(tail):
    """The code of the last ERROR frame found in the tail of the stream (a heuristic scan:
    an ERROR header is length, kind 0x04, flags, zero aux; the code is at offset 12)."""
    names = {3: "FRAME_TOO_LARGE", 5: "HANDSHAKE", 9: "SLOW_CONSUMER", 10: "STALLED", 16: "BUSY"}
    found = None
    for i in range(0, max(0, len(tail) - 14)):
        if tail[i + 4] == 0x04 and tail[i + 5] in (0, 1) and tail[i + 6:i + 8] == b"\0\0":
            length = struct.unpack_from("<I", tail, i)[0]
            if 14 <= length <= 600 and i + length <= len(tail):
                code = struct.unpack_from("<H", tail, i + 12)[0]
                if code in names:
                    found = names[code]
    return found


def attack_stats(router, budget_s=30):
    """1,000 idle clients, then one client sends 10,000 STATS_REQUESTs and never reads."""
    idle = []
    for i in range(1000):
        c = socket.create_connection(router.addr)
        c.sendall(hello(f"idle-{i}"))
        idle.append(c)
    time.sleep(1)
    s = socket.create_connection(router.addr)
    s.sendall(hello("stats-flooder"))
    s.settimeout(2.0)
    reqs = b"".join(frame(0x30, struct.pack("<I", i)) for i in range(10_000))
    outcome = "all 10,000 requests sent"
    try:
        s.sendall(reqs)
    except (socket.timeout, OSError) as e:
        outcome = f"router stopped reading ({type(e).__name__})"
    end = time.time() + min(budget_s, 15)
    while time.time() < end and router.rss() < RSS_CAP_KIB:
        time.sleep(0.2)
    rss_end = router.rss()
    _, how = drain(s)
    for c in idle:
        c.close()
    return f"{outcome}; RSS after 15 s {rss_end // 1024} MiB; then {how}"


def attack_prehello(router):
    """500 connections, each a HELLO header claiming 1 MiB and then 1 MiB of body."""
    header = struct.pack("<IBBH", 1 << 20, 0x01, 0, 0)
    body = bytes(1 << 20)
    conns = []
    refused = 0
    for _ in range(500):
        c = socket.create_connection(router.addr)
        c.settimeout(0.05)
        try:
            c.sendall(header + body)
        except (socket.timeout, OSError):
            refused += 1
        conns.append(c)
    time.sleep(2)
    rss_end = router.rss()
    closed = 0
    for c in conns:
        c.settimeout(5)
        try:
            while c.recv(65536):
                pass
            closed += 1
        except socket.timeout:
            pass
        except OSError:
            closed += 1
        c.close()
    return (f"500 connections x 1 MiB; {refused} could not send it all; RSS with all open "
            f"{rss_end // 1024} MiB; {closed} of 500 closed by the router")


def attack_trickle(router, secs=30):
    """1,000 clients: HELLO, a PUBLISH header claiming 1 MiB, 256 KiB of it, then one byte
    every 5 s."""
    header = struct.pack("<IBBH", 1 << 20, 0x20, 0, 0)
    conns = []
    for i in range(1000):
        c = socket.create_connection(router.addr)
        c.sendall(hello(f"trickler-{i}") + header)
        c.settimeout(0.5)
        try:
            c.sendall(bytes(256 << 10))
        except (socket.timeout, OSError):
            pass
        conns.append(c)
    start = time.time()
    alive = len(conns)
    rss_at = {}
    while time.time() - start < secs:
        alive = 0
        for c in conns:
            try:
                c.send(b"\x00")
                alive += 1
            except OSError:
                pass
        t = int(time.time() - start)
        rss_at[t] = router.rss()
        time.sleep(5)
    closed = 0
    for c in conns:
        c.settimeout(2)
        try:
            while c.recv(65536):
                pass
            closed += 1
        except socket.timeout:
            pass
        except OSError:
            closed += 1
        c.close()
    trace = ", ".join(f"{t}s {v // 1024} MiB" for t, v in sorted(rss_at.items()))
    return f"RSS over time: {trace}; {closed} of 1000 closed by the router; {alive} still writable at the last round"


def read_frames(s, want, limit=60):
    """Reads frames until `want` ACK/ERROR answers arrived; returns (acks, errors)."""
    got, _ = read_answers(s, want, {0x12: "ack", 0x04: "error"}, limit)
    return got["ack"], got["error"]


def attack_subs(router, clients=60, patterns=834, levels=120):
    """`clients` connections each subscribe `patterns` distinct patterns of `levels` levels
    (no two share a node; the levels are one byte each, as topics are at most 250 bytes):
    per-client budgets alone would let them hold clients x ~33 MB of subscription index;
    `max_index_nodes` bounds all of them together."""
    conns = []
    acked = refused = 0
    stopped = ""
    for c in range(clients):
        if router.rss() > RSS_CAP_KIB:
            stopped = "; router RSS passed 1.5 GiB: stopped"
            break
        s = socket.create_connection(router.addr)
        s.sendall(hello(f"sub-hog-{c}"))
        tail = "/".join("x" for _ in range(1, levels))
        out = b"".join(
            frame(0x10, struct.pack("<I", p + 1) + f"c{c}p{p}/{tail}".encode())
            for p in range(patterns))
        s.sendall(out)
        a, e = read_frames(s, patterns)  # the WELCOME (kind 0x02) is not an answer
        acked += a
        refused += e
        conns.append(s)
    rss = router.rss()
    for s in conns:
        s.close()
    return (f"{len(conns)} clients x {patterns} patterns of {levels} levels: {acked:,} ACKed, "
            f"{refused:,} refused (TOO_MANY_SUBSCRIPTIONS){stopped}; RSS with all held "
            f"{rss // 1024} MiB")


def wait_routed(router, messages, t0, limit=120):
    """Seconds from `t0` until the router has read `messages` messages (its stats'
    msgs_in), polled every 20 ms; gives up after `limit` s."""
    addr = f"{router.addr[0]}:{router.addr[1]}"
    while time.time() - t0 < limit:
        # A router busy routing may answer late: a failed or timed-out ask is retried.
        out = subprocess.run([router.binary, "stats", "--json", "--router", addr],
                             capture_output=True, text=True).stdout
        m = re.search(r'"msgs_in":(\d+)', out)
        if m and int(m.group(1)) >= messages:
            break
        time.sleep(0.02)
    return time.time() - t0


def attack_groups(router, clients=20, groups=10_000, messages=5_000):
    """`clients` connections each try to join `groups` distinct shared-subscription groups
    on one topic (`$share/gC_N/hog`), then one publisher sends `messages` to that topic:
    routing visits every matching group, so the cost per message is what the groups
    bound (`max_shared_groups`) allows. Reports the router's time per message."""
    conns = []
    acked = refused = 0
    for c in range(clients):
        s = socket.create_connection(router.addr)
        s.sendall(hello(f"group-hog-{c}"))
        s.sendall(b"".join(
            frame(0x10, struct.pack("<I", g + 1) + f"$share/g{c}_{g}/hog".encode())
            for g in range(groups)))
        a, e = read_frames(s, groups)
        acked += a
        refused += e
        conns.append(s)
    binary = router.binary
    addr = f"{router.addr[0]}:{router.addr[1]}"
    t = time.time()
    subprocess.run([binary, "pub", "--router", addr, "--count", str(messages), "--size", "16",
                    "hog"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    took = wait_routed(router, messages, t)
    for s in conns:
        s.close()
    return (f"{clients} clients x {groups} groups on one topic: {acked:,} joined, {refused:,} "
            f"refused; {messages:,} messages routed in {took:.2f} s "
            f"({took / messages * 1e6:.1f} us per message, the router's turn included)")


def attack_walk(router, levels=14, messages=3_000):
    """A KNOWN LIMIT, not a bound (docs/reliability.md): every mix of `a` and `*` over the
    first `levels - 1` levels with a last level `z` (2^(levels-1) patterns, spread over
    clients within their level budgets), then messages on `a/.../a/{b,c,d}` in turn (so
    the index's memo of the last two topics never answers): each message walks every
    pattern prefix, and none matches in the end. Reports the router's time per message."""
    pats = ["/".join(["*" if (m >> i) & 1 else "a" for i in range(levels - 1)] + ["z"])
            for m in range(2 ** (levels - 1))]
    per = 90_000 // levels
    conns = []
    refused = 0
    for c in range(0, len(pats), per):
        s = socket.create_connection(router.addr)
        s.sendall(hello(f"walker-{c}"))
        chunk = pats[c:c + per]
        s.sendall(b"".join(frame(0x10, struct.pack("<I", i + 1) + p.encode())
                           for i, p in enumerate(chunk)))
        _, e = read_frames(s, len(chunk))
        refused += e
        conns.append(s)
    topics = ["/".join(["a"] * (levels - 1) + [x]) for x in "bcd"]
    pub = socket.create_connection(router.addr)
    pub.sendall(hello("walk-publisher"))
    # PUBLISH: the header's aux field is the topic's length; then topic and payload.
    data = b"".join(frame(0x20, t.encode() + b"0123456789abcdef", aux=len(t))
                    for t in (topics[i % 3] for i in range(messages)))
    t = time.time()
    pub.sendall(data)
    took = wait_routed(router, messages, t)
    pub.close()
    for s in conns:
        s.close()
    return (f"{len(pats):,} patterns of {levels} levels in {len(conns)} clients ({refused} "
            f"refused); {messages:,} messages on 3 rotating topics in {took:.2f} s "
            f"({took / messages * 1e6:.0f} us per message)")


def queue_create(rid, definition):
    """A QUEUE_REQUEST create (op 1) of the JSON `definition`."""
    return frame(0x44, struct.pack("<IHH", rid, 1, 0) + json.dumps(definition).encode())


def read_answers(s, want, kinds, limit=120):
    """Reads frames until `want` frames of `kinds` (dict kind -> counter name) arrived."""
    s.settimeout(limit)
    buf = b""
    got = {k: 0 for k in kinds.values()}
    last_text = ""
    while sum(got.values()) < want:
        b = s.recv(1 << 20)
        if not b:
            break
        buf += b
        while len(buf) >= 8:
            length, kind = struct.unpack_from("<IB", buf, 0)
            if len(buf) < length:
                break
            if kind == 0x42 and kind in kinds:
                first, last = struct.unpack_from("<QQ", buf, 8)
                got[kinds[kind]] += last - first + 1
            elif kind in kinds:
                got[kinds[kind]] += 1
                if kind in (0x04, 0x43):
                    # ERROR: request id u32, code u16, text; PUB_NACK: seq u64, reason u16, text.
                    skip = 6 if kind == 0x04 else 10
                    last_text = buf[8 + skip:length].decode(errors="replace")
            buf = buf[length:]
    return got, last_text


def gpublish(topic, seq, payload=b"0123456789abcdef"):
    t = topic.encode()
    return frame(0x20, struct.pack("<Q", seq) + t + payload, flags=0x09, aux=len(t))


def open_publisher(router, name):
    s = socket.create_connection(router.addr)
    s.sendall(hello(name) + frame(0x40, struct.pack("<II", 1, 0) + name.encode()))
    read_answers(s, 1, {0x41: "opened", 0x04: "error"})
    return s


def create_until_refused(router, s, defs, max_refused):
    """Creates the queues `defs` one at a time over `s` until `max_refused` were refused
    or the router's RSS passes the cap; returns (created, refused, the last refusal's
    text, why it stopped early, the slowest answer in seconds)."""
    made = refused = 0
    text = stopped = ""
    slowest = 0.0
    for rid, d in enumerate(defs, start=100):
        if router.rss() > RSS_CAP_KIB:
            stopped = "; router RSS passed 1.5 GiB: stopped"
            break
        t = time.time()
        s.sendall(queue_create(rid, d))
        got, tx = read_answers(s, 1, {0x45: "ok", 0x04: "error"})
        slowest = max(slowest, time.time() - t)
        made += got["ok"]
        refused += got["error"]
        text = tx or text
        if refused >= max_refused:
            break
    return made, refused, text, stopped, slowest


def attack_qnodes(router, queues=2_000, patterns=256, levels=120):
    """One client creates queues of `patterns` distinct patterns of `levels` levels each (no
    two share a node): 10,000 queues of 256 patterns could hold 300 M index nodes;
    `max_queue_index_nodes` bounds them all together."""
    s = socket.create_connection(router.addr)
    s.sendall(hello("queue-hog"))
    tail = "/".join("x" for _ in range(1, levels))
    defs = ({"name": f"deep{q}", "subscriptions": [f"q{q}p{p}/{tail}" for p in range(patterns)]}
            for q in range(queues))
    made, refused, text, stopped, _ = create_until_refused(router, s, defs, 20)
    rss = router.rss()
    s.close()
    return (f"{made} queues of {patterns} x {levels}-level patterns created, {refused} refused "
            f"{text[:120]!r}{stopped}; RSS {rss // 1024} MiB")


def attack_qwalk(router, levels=14, messages=3_000):
    """The walk case over queues: every mix of `a` and `*` over 13 levels then `z`, 16
    patterns per queue (512 queues), then guaranteed publishes on 3 rotating topics (each walks the
    queues' index); time from the first publish to the last answer."""
    pats = ["/".join(["*" if (m >> i) & 1 else "a" for i in range(levels - 1)] + ["z"])
            for m in range(2 ** (levels - 1))]
    s = socket.create_connection(router.addr)
    s.sendall(hello("queue-walker"))
    made = refused = 0
    for q in range(0, len(pats), 16):
        s.sendall(queue_create(q + 1, {"name": f"walk{q}", "subscriptions": pats[q:q + 16]}))
        got, _ = read_answers(s, 1, {0x45: "ok", 0x04: "error"})
        made += got["ok"]
        refused += got["error"]
    topics = ["/".join(["a"] * (levels - 1) + [x]) for x in "bcd"]
    pub = open_publisher(router, "walk-gpub")
    t = time.time()
    sent = 0
    answers = {"ack": 0, "nack": 0}
    while sent < messages:
        n = min(1000, messages - sent)
        pub.sendall(b"".join(gpublish(topics[i % 3], i + 1) for i in range(sent, sent + n)))
        sent += n
        got, _ = read_answers(pub, n, {0x42: "ack", 0x43: "nack"}, limit=600)
        for k in answers:
            answers[k] += got[k]
    took = time.time() - t
    return (f"{made} queues ({refused} refused) of {len(pats):,} patterns; {messages} "
            f"guaranteed publishes on 3 rotating topics answered in {took:.2f} s "
            f"({took / messages * 1e6:.0f} us each; answers {answers})")


def keep_retained(router, s, retained):
    """Creates queue `keep` on `r/>` over `s` and publishes `retained` guaranteed messages
    with empty payloads to `r/x` (2,000 at a time, each batch answered before the next);
    returns how many were acknowledged."""
    s.sendall(queue_create(1, {"name": "keep", "subscriptions": ["r/>"]}))
    read_answers(s, 1, {0x45: "ok", 0x04: "error"})
    pub = open_publisher(router, "retention-gpub")
    sent = acks = 0
    while sent < retained:
        n = min(2000, retained - sent)
        pub.sendall(b"".join(gpublish("r/x", i + 1, b"") for i in range(sent, sent + n)))
        sent += n
        got, _ = read_answers(pub, n, {0x42: "ack", 0x43: "nack"}, limit=600)
        acks += got["ack"]
    pub.close()
    return acks


class Prober:
    """A client that sends a PING, waits for its PONG, sleeps 1 ms and again, for as
    long as it runs: the longest round trip is about the longest time the router was
    held by something else (its slowest turn, give or take a tick)."""

    def __init__(self, router):
        self.s = socket.create_connection(router.addr)
        self.s.sendall(hello("prober"))
        read_answers(self.s, 1, {0x02: "welcome"})
        self.worst = 0.0
        self.rtts = []
        self.rounds = 0
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop:
            t = time.time()
            self.s.sendall(frame(0x05, struct.pack("<Q", self.rounds)))
            read_answers(self.s, 1, {0x06: "pong"})
            rtt = time.time() - t
            self.worst = max(self.worst, rtt)
            self.rtts.append(rtt)
            self.rounds += 1
            time.sleep(0.001)

    def result(self):
        self.stop = True
        self.t.join()
        self.s.close()
        r = sorted(self.rtts) or [0.0]
        p50, p99 = r[len(r) // 2], r[min(len(r) - 1, len(r) * 99 // 100)]
        return (f"longest PING round trip meanwhile {self.worst * 1e3:.1f} ms ({self.rounds:,} PINGs; "
                f"p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.1f} ms)")


def probed(router, workers):
    """Runs `workers` (started threads or processes, not yet started) to their end while
    a Prober pings the router; returns the prober's report."""
    probe = Prober(router)
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return probe.result()


def attack_qentries(router, retained=1_000_000, queues=200):
    """`retained` guaranteed messages kept by one queue, then queues on the same topics
    that start at the beginning: each holds one entry per retained message (~24 bytes);
    `max_queue_entries` bounds the entries of all queues together. Also reports the
    slowest CREATE answer (the fill's time) and, from a client pinging the router
    throughout the creates, the longest the router was held (a fill in one turn before,
    in steps of 8,192 retained messages after)."""
    s = socket.create_connection(router.addr)
    s.sendall(hello("entry-hog"))
    acks = keep_retained(router, s, retained)
    rss0 = router.rss()
    defs = ({"name": f"b{q}", "subscriptions": ["r/>"], "start": "beginning"}
            for q in range(queues))
    probe = Prober(router)
    made, refused, text, stopped, slowest = create_until_refused(router, s, defs, 5)
    held = probe.result()
    rss = router.rss()
    return (f"{acks:,} retained (RSS {rss0 // 1024} MiB); {made} queues from the beginning "
            f"created, {refused} refused {text[:110]!r}{stopped}; slowest create answered in "
            f"{slowest * 1e3:.0f} ms; {held}; RSS {rss // 1024} MiB")


def attack_images(router, topics=100_000, budget_s=20):
    """`topics` topics cached (the default `cache_max_topics`), then one client sends
    image-only SUBSCRIBEs (cache queries) for a pattern that matches none of them, as
    fast as the router answers, for `budget_s` seconds: each query examines every cached
    topic. Reports how many were answered (ACK) or refused (BUSY, the scan budget) and,
    from a client pinging the router throughout, the longest the router was held."""
    pub = socket.create_connection(router.addr)
    pub.sendall(hello("cache-filler"))
    names = [f"c/{i}" for i in range(topics)]
    pub.sendall(b"".join(frame(0x20, t.encode() + b"0123456789abcdef", aux=len(t))
                         for t in names))
    # Every publish is read once the PING after them is answered (then closing the
    # connection loses nothing); the cache holds them all.
    pub.sendall(frame(0x05, struct.pack("<Q", 1)))
    read_answers(pub, 1, {0x06: "pong"}, limit=120)
    pub.close()
    cached = (router_stats(router) or {}).get("cache", {}).get("topics", "?")
    s = socket.create_connection(router.addr)
    s.sendall(hello("image-flooder"))
    read_answers(s, 1, {0x02: "welcome"})
    counts = {"ack": 0, "error": 0}
    stop = threading.Event()

    def reader():
        # Frames: ACK 0x12, ERROR 0x04 (BUSY is non-fatal): counted until told to stop.
        # Blocking reads (the socket is shared with the sender: no timeout set here);
        # the sender's last write is followed by a PING whose PONG ends it.
        buf = b""
        while not stop.is_set():
            try:
                b = s.recv(1 << 20)
            except OSError:
                break
            if not b:
                break
            buf += b
            at = 0
            while len(buf) - at >= 8:
                n, kind = struct.unpack_from("<IB", buf, at)
                if len(buf) - at < n:
                    break
                if kind == 0x12:
                    counts["ack"] += 1
                elif kind == 0x04:
                    counts["error"] += 1
                elif kind == 0x06:
                    stop.set()
                at += n
            buf = buf[at:]

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    probe = Prober(router)
    query = frame(0x10, struct.pack("<I", 1) + b"nothing/>", flags=0x02)
    batch = query * 1000
    sent = 0
    t0 = time.time()
    end = t0 + budget_s
    while time.time() < end:
        try:
            s.sendall(batch)
        except OSError:
            break
        sent += 1000
        # Never more than 10,000 unanswered: what the router does, not the socket.
        while sent - counts["ack"] - counts["error"] > 10_000 and time.time() < end:
            time.sleep(0.001)
    took = time.time() - t0
    s.sendall(frame(0x05, struct.pack("<Q", 2)))
    t.join(timeout=120)
    held = probe.result()
    s.close()
    return (f"{cached} topics cached; {sent:,} cache queries sent in {took:.1f} s: "
            f"{counts['ack']:,} answered, {counts['error']:,} refused (BUSY); {held}")


def bind_frame(rid, window, how, value, queue):
    """A BIND (`how`: 0 queue, 1 beginning, 2 message id, 3 time)."""
    return frame(0x46, struct.pack("<IIH6xQ", rid, window, how, value) + queue.encode())


def attack_browse(router, retained=1_000_000, binds=5):
    """`retained` guaranteed messages kept by one queue; a second queue has 256 patterns
    none of them match; a client binds to it `binds` times to browse from the beginning.
    Reports how long each BIND took to be answered (the router scans the retention for
    the queue's next message)."""
    s = socket.create_connection(router.addr)
    s.sendall(hello("browser"))
    s.sendall(queue_create(2, {"name": "scan", "subscriptions": [f"n{i}/x/>" for i in range(256)]}))
    read_answers(s, 1, {0x45: "ok", 0x04: "error"})
    keep_retained(router, s, retained)
    took = []
    for k in range(binds):
        t = time.time()
        s.sendall(bind_frame(10 + k, 64, 1, 0, "scan"))
        got, _ = read_answers(s, 1, {0x47: "bound", 0x04: "error"}, limit=600)
        took.append(f"{(time.time() - t) * 1e3:.0f}" + ("" if got["bound"] else " (error)"))
    s.close()
    return (f"{retained:,} retained; {binds} BINDs browsing a queue that matches none of them, "
            f"answered in {', '.join(took)} ms")


def create_queues(s, queues):
    """Creates queues q0.. (one topic t0.. each) over `s`, 500 per write."""
    for q in range(0, queues, 500):
        s.sendall(b"".join(queue_create(q + i + 1, {"name": f"q{q + i}", "subscriptions": [f"t{q + i}"]})
                           for i in range(500)))
        read_answers(s, 500, {0x45: "ok", 0x04: "error"})


def attack_qlist(router, queues=10_000, lists=200):
    """One client creates `queues` queues, then sends `lists` queue LIST requests in one
    write and reads the answers: each LIST is built from every queue."""
    s = socket.create_connection(router.addr)
    s.sendall(hello("lister"))
    create_queues(s, queues)
    t = time.time()
    s.sendall(b"".join(frame(0x44, struct.pack("<IHH", 100_000 + i, 5, 0)) for i in range(lists)))
    got, text = read_answers(s, lists, {0x45: "list", 0x04: "error"}, limit=300)
    took = time.time() - t
    s.close()
    return (f"{queues:,} queues; {lists} LISTs in one write answered in {took:.2f} s: {got['list']} "
            f"lists, {got['error']} errors (last: {text[:90]!r})")


def attack_monitor(router, queues=10_000, budget_s=15, threads=4):
    """`queues` queues, then `threads` HTTP clients ask the monitoring endpoint for
    /queuez (one request after another each, new connection each) for `budget_s`
    seconds: each answer needs a snapshot of the router's state, made on its loop.
    Reports the requests answered and, from a client pinging the router throughout,
    the longest the router was held."""
    s = socket.create_connection(router.addr)
    s.sendall(hello("queue-maker"))
    create_queues(s, queues)
    host, port = router.http.rsplit(":", 1)
    answered = [0] * threads
    end = time.time() + budget_s

    def asker(k):
        while time.time() < end:
            try:
                c = socket.create_connection((host, int(port)), timeout=30)
                c.sendall(b"GET /queuez?limit=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = b""
                while True:
                    b = c.recv(65536)
                    if not b:
                        break
                    data += b
                c.close()
                if data.startswith(b"HTTP/1.1 200"):
                    answered[k] += 1
            except OSError:
                time.sleep(0.01)

    held = probed(router, [threading.Thread(target=asker, args=(k,), daemon=True)
                           for k in range(threads)])
    s.close()
    return (f"{queues:,} queues; {sum(answered):,} /queuez requests answered in {budget_s} s by "
            f"{threads} clients; {held}")


def attack_statsq(router, queues=10_000, budget_s=15, askers=4):
    """`queues` queues, then `askers` clients (each in a process of its own, so that the
    prober's round trips do not include waits for Python's lock) each ask for the
    router's stats over and over for `budget_s` seconds, reading each STATS_REPLY before
    asking again (so never BUSY): each document lists queues, built on the router's
    loop. Reports the replies answered and, from a client pinging the router
    throughout, the longest the router was held."""
    import multiprocessing
    s = socket.create_connection(router.addr)
    s.sendall(hello("queue-maker"))
    create_queues(s, queues)
    answered = multiprocessing.Array("l", askers)
    end = time.time() + budget_s

    def asker(k):
        c = socket.create_connection(router.addr)
        c.sendall(hello(f"stats-asker-{k}"))
        read_answers(c, 1, {0x02: "welcome"})
        i = 0
        while time.time() < end:
            i += 1
            c.sendall(frame(0x30, struct.pack("<I", i)))
            got, _ = read_answers(c, 1, {0x31: "reply", 0x04: "error"})
            answered[k] += got["reply"]
        c.close()

    held = probed(router, [multiprocessing.Process(target=asker, args=(k,), daemon=True)
                           for k in range(askers)])
    s.close()
    return (f"{queues:,} queues; {sum(answered):,} STATS_REPLYs in {budget_s} s to "
            f"{askers} clients asking one after another; {held}")


def attack_churn(router, budget_s=15, hold_s=3.0):
    """Connections that each send a malformed frame (the router answers with an ERROR and
    closes its side) and then keep their end open without sending or closing for
    `hold_s` seconds, opened as fast as the router accepts them for `budget_s` seconds,
    while a client pings the router: what closing connections the peer keeps open cost
    the router (it reads what they still send until its linger deadline)."""
    held = []
    opened = 0
    end = time.time() + budget_s
    junk = struct.pack("<IBBH", 8, 0x7F, 0, 0)  # kind 0x7f: no such frame
    probe = Prober(router)
    while time.time() < end:
        try:
            c = socket.create_connection(router.addr, timeout=5)
            c.sendall(junk)
        except OSError:
            time.sleep(0.01)
            continue
        opened += 1
        held.append((time.time() + hold_s, c))
        while held and held[0][0] < time.time():
            held.pop(0)[1].close()
    result = probe.result()
    peak = len(held)
    for _, c in held:
        c.close()
    return (f"{opened:,} connections opened in {budget_s} s, each sending a malformed frame and "
            f"then held open {hold_s:.0f} s (up to {peak:,} at once); {result}")


def attack_subchurn(router, budget_s=10, patterns=3_000):
    """One client writes SUBSCRIBE then UNSUBSCRIBE of `patterns` 10-level patterns per
    write (~200 KB), as fast as the router takes them, for `budget_s` seconds (a thread
    reads its ACKs), while a client pings the router: what one read buffer of
    subscription changes costs the others (bounded per read: SUBSCRIPTION_WORK_PER_READ)."""
    s = socket.create_connection(router.addr)
    s.sendall(hello("subchurn"))

    def acks():
        try:
            while s.recv(1 << 20):
                pass
        except OSError:
            pass

    threading.Thread(target=acks, daemon=True).start()
    pats = [f"a/b/c/d/e/f/g/h/i/{i}".encode() for i in range(patterns)]
    batch = b"".join(frame(0x10, struct.pack("<I", i) + p) for i, p in enumerate(pats))
    batch += b"".join(frame(0x11, struct.pack("<I", i) + p) for i, p in enumerate(pats))
    probe = Prober(router)
    writes = 0
    end = time.time() + budget_s
    while time.time() < end:
        s.sendall(batch)
        writes += 1
    result = probe.result()
    s.close()
    return f"{writes * 2 * patterns:,} subscription changes sent in {budget_s} s; {result}"


def router_stats(router):
    """The router's stats document (None if it did not answer)."""
    addr = f"{router.addr[0]}:{router.addr[1]}"
    try:
        out = subprocess.run([router.binary, "stats", "--json", "--router", addr],
                             capture_output=True, text=True, timeout=10).stdout
    except subprocess.TimeoutExpired:
        return None
    import json
    try:
        return json.loads(out)
    except ValueError:
        return None


def attack_egress(router, conns=200, budget_s=30, max_messages=5_000_000):
    """`conns` connections subscribe to `>` and never read (not even their WELCOME) while
    one publisher floods messages of 100 B-1 KiB to `flood/x` for `budget_s` seconds (at
    most `max_messages`): every message is queued for every non-reader, so without a
    router-wide bound the router holds up to `conns` x `egress_limit`. Reports the
    router's RSS once a second, and its own egress figures when it has them."""
    hogs = []
    for c in range(conns):
        s = socket.create_connection(router.addr)
        s.sendall(hello(f"egress-hog-{c}") + frame(0x10, struct.pack("<I", 1) + b">"))
        hogs.append(s)
    time.sleep(1)
    rng = random.Random(12)
    topic = b"flood/x"
    chunk = b"".join(frame(0x20, topic + bytes(rng.randint(100, 1024)), aux=len(topic))
                     for _ in range(1000))
    pub = socket.create_connection(router.addr)
    pub.sendall(hello("egress-flooder"))
    pub.settimeout(1.0)
    sent = 0
    trace = []
    stopped = ""
    t0 = time.time()
    next_sample = t0
    while sent < max_messages and time.time() - t0 < budget_s:
        if time.time() >= next_sample:
            trace.append(router.rss() // 1024)
            next_sample += 1
        if router.rss() > RSS_CAP_KIB:
            stopped = "; router RSS passed 1.5 GiB: stopped"
            break
        try:
            pub.sendall(chunk)
            sent += 1000
        except socket.timeout:
            pass  # the router is not reading (busy): try again
        except OSError as e:
            stopped = f"; publisher cut ({e})"
            break
    took = time.time() - t0
    time.sleep(1)
    rss_end = router.rss()
    doc = router_stats(router) or {}
    r = doc.get("router", {})
    t = r.get("totals", {})
    pub.close()
    for s in hogs:
        s.close()
    own = (f"; router: egress_bytes {r['egress_bytes'] // (1 << 20)} MiB of limit "
           f"{r['egress_memory_limit'] // (1 << 20)} MiB, discards {t.get('discards', 0):,} "
           f"(memory {t.get('memory_discards', 0):,}), memory disconnects "
           f"{t.get('memory_disconnects', 0)}" if "egress_bytes" in r else
           f"; router: discards {t.get('discards', 0):,}" if t else "")
    return (f"{conns} non-readers on '>', {sent:,} messages of 100-1024 B sent in {took:.1f} s"
            f"{stopped}; RSS per second {trace} MiB, {rss_end // 1024} MiB 1 s after; "
            f"router clients then {r.get('clients', '?')} (the non-readers, flooder, healthy pair "
            f"and stats client){own}")


CASES = {
    "ping": attack_ping,
    "stats": attack_stats,
    "prehello": attack_prehello,
    "trickle": attack_trickle,
    "subs": attack_subs,
    "groups": attack_groups,
    "walk": attack_walk,
    "egress": attack_egress,
    "qnodes": attack_qnodes,
    "qwalk": attack_qwalk,
    "qentries": attack_qentries,
    "browse": attack_browse,
    "qlist": attack_qlist,
    "qlist-fit": lambda router: attack_qlist(router, queues=1_500),
    "images": attack_images,
    "monitor": attack_monitor,
    "statsq": attack_statsq,
    "churn": attack_churn,
    "subchurn": attack_subchurn,
}

# Router flags a case needs.
CASE_ROUTER_ARGS = {"images": ["--cache", "c/>"], "monitor": ["--http", "127.0.0.1:0"]}


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    binary = sys.argv[1]
    for name in sys.argv[2:] or list(CASES):
        router = Router(binary, CASE_ROUTER_ARGS.get(name, ()))
        base = router.rss()
        healthy = Healthy(binary, router)
        what = CASES[name](router)
        pair = healthy.result()
        print(f"{name}: RSS idle {base // 1024} MiB, peak {router.peak // 1024} MiB; {what}; {pair}",
              flush=True)
        router.close()


if __name__ == "__main__":
    main()
