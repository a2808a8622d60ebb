#!/usr/bin/env python3
"""Records QuickFIX/C++'s exact session-layer behaviour, scenario by scenario.

The probe starts `qf_peer` (tools/quickfix/qf_peer.cpp, built by scripts/install-quickfix.sh)
on a free loopback port, plays one scenario against it over a raw socket with its own
minimal FIX encoder, and writes everything QuickFIX sent back to
crates/fix/testdata/quickfix/<scenario>.txt:

    # comment (what the scenario does, what was observed)
    >> 8=FIX.4.4|9=...|35=A|...|10=123|      bytes the probe sent (| stands for SOH)
    << 8=FIX.4.4|9=...|35=A|...|10=045|      bytes QuickFIX sent
    -- disconnected by QuickFIX                 QuickFIX closed the connection
    -- quiet for 1.0s                           nothing more arrived within the wait
    # event: ...                                QuickFIX's own session events (qf_peer EVENT lines)

Fields 52, 10, 9 and 122 are kept exactly as recorded (they vary run to run).
Each scenario runs against a fresh qf_peer with a memory store, so sequence numbers start at 1.

Usage: probe.py [--spec DIR] [--bin PATH] [--out DIR] [scenario ...]
Python 3 standard library only.
"""

import argparse
import datetime
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOH = "\x01"

# ---------------------------------------------------------------------------------------
# A minimal FIX encoder and framer.


def now_ts(offset_s=0.0):
    """UTCTimestamp with milliseconds, as QuickFIX uses for FIX.4.2 and later."""
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=offset_s)
    return t.strftime("%Y%m%d-%H:%M:%S.") + "%03d" % (t.microsecond // 1000)


def encode(begin, fields, body_length=None, checksum=None):
    """Encodes `fields` (list of (tag, value)) after 8 and 9; optional wrong 9 or 10."""
    body = "".join("%s=%s%s" % (t, v, SOH) for t, v in fields)
    length = len(body.encode()) if body_length is None else body_length
    head = "8=%s%s9=%d%s" % (begin, SOH, length, SOH)
    total = sum((head + body).encode()) % 256
    cks = total if checksum is None else checksum
    return (head + body + "10=%03d%s" % (cks, SOH)).encode()


def frames(buffer):
    """Splits complete FIX messages off `buffer`; returns (messages, rest)."""
    out = []
    while True:
        start = buffer.find(b"8=")
        if start < 0:
            return out, b""
        buffer = buffer[start:]
        p9 = buffer.find(b"\x019=")
        if p9 < 0:
            return out, buffer
        end9 = buffer.find(b"\x01", p9 + 1)
        if end9 < 0:
            return out, buffer
        try:
            length = int(buffer[p9 + 3:end9])
        except ValueError:
            buffer = buffer[2:]
            continue
        body_end = end9 + 1 + length
        trailer_end = buffer.find(b"\x01", body_end)
        if trailer_end < 0:
            return out, buffer
        out.append(buffer[:trailer_end + 1])
        buffer = buffer[trailer_end + 1:]


def bars(raw):
    return raw.decode("latin-1").replace(SOH, "|")


def field(raw, tag):
    for part in raw.decode("latin-1").split(SOH):
        if part.startswith("%s=" % tag):
            return part[len(str(tag)) + 1:]
    return None


# ---------------------------------------------------------------------------------------
# qf_peer process and transcript.


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Transcript:
    def __init__(self, name, title):
        self.name = name
        self.lines = ["# scenario: %s" % name, "# %s" % title]
        self.t0 = time.monotonic()

    def note(self, text):
        self.lines.append("# " + text)

    def add(self, line):
        self.lines.append(line)


class Peer:
    """A running qf_peer and its stdout lines."""

    def __init__(self, args, config_text, app="log", store="memory", extra_args=()):
        self.dir = tempfile.mkdtemp(prefix="qfprobe-")
        self.config = os.path.join(self.dir, "peer.cfg")
        with open(self.config, "w") as f:
            f.write(config_text.replace("@DIR@", self.dir).replace("@SPEC@", args.spec))
        self.lines = []
        self.ready = threading.Event()
        self.proc = subprocess.Popen(
            [args.bin, "--config", self.config, "--app", app, "--store", store]
            + [a.replace("@DIR@", self.dir) for a in extra_args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if not self.ready.wait(5):
            self.stop()
            raise RuntimeError("qf_peer did not start: %s" % "\n".join(self.lines))

    def _read(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            if line.startswith("READY"):
                self.ready.set()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(2)
        shutil.rmtree(self.dir, ignore_errors=True)

    def events(self):
        return [l for l in self.lines if l.startswith("EVENT") or l.startswith("qf_peer")]


ACCEPTOR_CFG = """[DEFAULT]
ConnectionType=acceptor
SocketAcceptPort={port}
SocketReuseAddress=Y
StartTime=00:00:00
EndTime=00:00:00
UseDataDictionary=Y
ValidateUserDefinedFields=Y
FileStorePath=@DIR@/store
{extra}
[SESSION]
BeginString=FIX.4.4
SenderCompID=QF
TargetCompID=PROBE
DataDictionary=@SPEC@/FIX44.xml

[SESSION]
BeginString=FIX.4.2
SenderCompID=QF
TargetCompID=PROBE
DataDictionary=@SPEC@/FIX42.xml

[SESSION]
BeginString=FIX.4.0
SenderCompID=QF
TargetCompID=PROBE
DataDictionary=@SPEC@/FIX40.xml

[SESSION]
BeginString=FIXT.1.1
SenderCompID=QF
TargetCompID=PROBE
DefaultApplVerID=FIX.5.0
TransportDataDictionary=@SPEC@/FIXT11.xml
AppDataDictionary=@SPEC@/FIX50.xml
AppDataDictionary.FIX.5.0SP2=@SPEC@/FIX50SP2.xml
"""

INITIATOR_CFG = """[DEFAULT]
ConnectionType=initiator
SocketConnectHost=127.0.0.1
SocketConnectPort={port}
StartTime=00:00:00
EndTime=00:00:00
HeartBtInt={hb}
ReconnectInterval=30
UseDataDictionary=Y
FileStorePath=@DIR@/store
{extra}
[SESSION]
BeginString=FIX.4.4
SenderCompID=QF
TargetCompID=PROBE
DataDictionary=@SPEC@/FIX44.xml
"""


class Conn:
    """The probe's side of one FIX connection: sends and records."""

    def __init__(self, tr, sock, begin="FIX.4.4", sender="PROBE", target="QF"):
        self.tr = tr
        self.sock = sock
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.begin = begin
        self.sender = sender
        self.target = target
        self.seq = 1
        self.buf = b""
        self.closed = False
        self.received = []

    @classmethod
    def connect(cls, tr, port, **kw):
        return cls(tr, socket.create_connection(("127.0.0.1", port), timeout=5), **kw)

    def note(self, text):
        self.tr.note(text)

    def raw(self, data, label=None):
        self.tr.add(">> " + (label if label else bars(data)))
        try:
            self.sock.sendall(data)
        except OSError as e:
            self.tr.add("-- send failed: %s" % e)

    def send(self, msgtype, body=(), seq=None, header=(), sending_time=None, sender=None,
             target=None, begin=None, order=None, body_length=None, checksum=None, bump=True):
        """Sends 35, 49, 56, 34, 52 (or `order`, a list of tags and bodies), then header extras and body."""
        s = self.seq if seq is None else seq
        std = {
            35: msgtype,
            49: self.sender if sender is None else sender,
            56: self.target if target is None else target,
            34: str(s),
            52: now_ts() if sending_time is None else sending_time,
        }
        fields = []
        for tag in (order or [35, 49, 56, 34, 52]):
            if std.get(tag) is not None:
                fields.append((tag, std[tag]))
        fields += list(header) + list(body)
        data = encode(self.begin if begin is None else begin, fields, body_length, checksum)
        self.raw(data)
        if bump and seq is None:
            self.seq += 1
        return data

    def read(self, quiet=1.0, limit=10.0, until=None, stamp=False):
        """Records what arrives until `quiet` seconds pass without data, `until(msg)` is true,
        the peer disconnects, or `limit` seconds pass."""
        start = time.monotonic()
        end = start + limit
        last = time.monotonic()
        got = []
        while not self.closed:
            now = time.monotonic()
            wait = min(end - now, last + quiet - now)
            if wait <= 0:
                self.tr.add("-- quiet for %.1fs" % quiet if now < end else "-- stopped after %.1fs" % limit)
                break
            self.sock.settimeout(wait)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError as e:
                self.tr.add("-- connection error: %s" % e)
                self.closed = True
                break
            if not data:
                if stamp:
                    self.tr.add("# t=+%.2fs" % (time.monotonic() - start))
                self.tr.add("-- disconnected by QuickFIX")
                self.closed = True
                break
            last = time.monotonic()
            self.buf += data
            msgs, self.buf = frames(self.buf)
            done = False
            for m in msgs:
                if stamp:
                    self.tr.add("# t=+%.2fs" % (time.monotonic() - start))
                self.tr.add("<< " + bars(m))
                got.append(m)
                self.received.append(m)
                if until and until(m):
                    done = True
            if done:
                break
        return got

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        self.tr.add("-- probe closed the connection")

    def logon(self, hb=30, extra=(), quiet=0.5, **kw):
        self.send("A", [(98, "0"), (108, str(hb))] + list(extra), **kw)
        return self.read(quiet=quiet, until=lambda m: field(m, 35) == "A")


# ---------------------------------------------------------------------------------------
# Scenarios against QuickFIX as acceptor. Each takes (args, tr) and returns nothing.

SCENARIOS = []


def scenario(name, title, app="log", extra=""):
    def wrap(fn):
        SCENARIOS.append((name, title, fn, app, extra))
        return fn
    return wrap


def begin_for(name):
    if "fixt" in name:
        return "FIXT.1.1"
    if "fix40" in name:
        return "FIX.4.0"
    return "FIX.4.2" if "fix42" in name else "FIX.4.4"


@scenario("logon_fix44", "Normal FIX.4.4 logon (98=0, 108=30); QuickFIX's Logon answer, then TestRequest/Heartbeat and Logout")
def s_logon44(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "PROBE-1")])
    c.read(quiet=0.5)
    c.send("5")
    c.read(quiet=1.0)


@scenario("logon_fix42", "Normal FIX.4.2 logon (98=0, 108=30); QuickFIX's Logon answer, then Logout")
def s_logon42(args, c):
    c.logon(hb=30)
    c.send("5")
    c.read(quiet=1.0)


@scenario("logon_reset_seqnum", "Logon with 141=Y (ResetSeqNumFlag) and 34=1")
def s_logon_reset(args, c):
    c.logon(hb=30, extra=[(141, "Y")])
    c.send("5")
    c.read(quiet=1.0)


@scenario("logon_reset_seqnum_after_traffic", "Second Logon with 141=Y in an established session (34=1 again)")
def s_logon_reset2(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "X")])
    c.read(quiet=0.5)
    c.seq = 1
    c.send("A", [(98, "0"), (108, "30"), (141, "Y")])
    c.read(quiet=1.0)
    c.send("1", [(112, "AFTER-RESET")])
    c.read(quiet=0.5)


@scenario("logon_seq_too_high", "Logon with 34=5 when QuickFIX expects 1: Logon answer then ResendRequest")
def s_logon_high(args, c):
    c.send("A", [(98, "0"), (108, "30")], seq=5)
    c.read(quiet=1.0)


@scenario("first_message_not_logon", "A Heartbeat as the first message on a new connection")
def s_not_logon(args, c):
    c.send("0")
    c.read(quiet=1.0, limit=3)


@scenario("first_message_not_logon_app", "A NewOrderSingle as the first message on a new connection")
def s_not_logon_app(args, c):
    c.send("D", ORDER_BODY)
    c.read(quiet=1.0, limit=3)


@scenario("logon_wrong_target_compid", "Logon with 56=NOBODY (no such session configured)")
def s_logon_wrong_target(args, c):
    c.target = "NOBODY"
    c.logon(hb=30, quiet=1.0)


@scenario("logon_wrong_sender_compid", "Logon with 49=STRANGER (no such session configured)")
def s_logon_wrong_sender(args, c):
    c.sender = "STRANGER"
    c.logon(hb=30, quiet=1.0)


@scenario("logon_wrong_beginstring", "Logon with 8=FIX.4.3 (no FIX.4.3 session configured)")
def s_logon_wrong_begin(args, c):
    c.begin = "FIX.4.3"
    c.logon(hb=30, quiet=1.0)


@scenario("logon_missing_heartbtint", "Logon without 108 (HeartBtInt is required)")
def s_logon_no_hb(args, c):
    c.send("A", [(98, "0")])
    c.read(quiet=3.0, limit=4, stamp=True)


@scenario("heartbeat_timing", "Logon with 108=1; the probe stays silent, answers nothing (timestamps relative to logon)")
def s_hb_timing(args, c):
    c.send("A", [(98, "0"), (108, "1")])
    c.read(quiet=6.0, limit=8.0, stamp=True)


@scenario("heartbeat_timing_answered", "Logon with 108=1; the probe answers TestRequests and sends Heartbeats every second for 4s")
def s_hb_answered(args, c):
    c.send("A", [(98, "0"), (108, "1")])
    c.read(quiet=0.3, until=lambda m: field(m, 35) == "A")
    start = time.monotonic()
    while time.monotonic() - start < 4.0:
        got = c.read(quiet=1.0, limit=1.0, stamp=True)
        for m in got:
            if field(m, 35) == "1":
                c.send("0", [(112, field(m, 112))])
        c.send("0")
    c.send("5")
    c.read(quiet=1.0)


@scenario("test_request", "TestRequest 112=PROBE-TR-1 -> Heartbeat with 112")
def s_testreq(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "PROBE-TR-1")])
    c.read(quiet=0.5)


@scenario("seq_too_high", "After logon (next expected 2) a TestRequest with 34=5: ResendRequest, queueing, then gap filled by the probe")
def s_seq_high(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "HIGH-5")], seq=5)
    c.read(quiet=0.5)
    c.note("probe now answers the ResendRequest with SequenceReset-GapFill 34=2 36=5")
    c.send("4", [(123, "Y"), (36, "5")], seq=2, header=[(43, "Y"), (122, now_ts())])
    c.read(quiet=0.5)
    c.seq = 6
    c.send("1", [(112, "AFTER-GAP-6")])
    c.read(quiet=0.5)


@scenario("seq_too_high_twice", "Two messages too high in a row (34=5, 34=6): is the ResendRequest repeated?")
def s_seq_high2(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "HIGH-5")], seq=5)
    c.read(quiet=0.5)
    c.send("1", [(112, "HIGH-6")], seq=6)
    c.read(quiet=0.5)
    c.note("probe fills 2..4 with a PossDup resend of real messages (34=2,3,4 heartbeats)")
    for s in (2, 3, 4):
        c.send("0", seq=s, header=[(43, "Y"), (122, now_ts())])
    c.read(quiet=0.5)


@scenario("seq_too_low", "After logon (next expected 3) a message with 34=1 and no PossDupFlag")
def s_seq_low(args, c):
    c.logon(hb=30)
    c.send("0")
    c.send("0", seq=1)
    c.read(quiet=1.0)


@scenario("seq_too_low_possdup_with_orig", "34 too low with 43=Y and 122 earlier than 52: silently ignored?")
def s_seq_low_pd(args, c):
    c.logon(hb=30)
    c.send("0")
    c.send("1", [(112, "DUP")], seq=1, header=[(43, "Y"), (122, now_ts(-10))])
    c.read(quiet=0.5)
    c.send("1", [(112, "NEXT")])
    c.read(quiet=0.5)


@scenario("seq_too_low_possdup_without_orig", "34 too low with 43=Y and no 122")
def s_seq_low_pd_no122(args, c):
    c.logon(hb=30)
    c.send("0")
    c.send("1", [(112, "DUP")], seq=1, header=[(43, "Y")])
    c.read(quiet=0.5)
    c.send("1", [(112, "NEXT")])
    c.read(quiet=0.5)


@scenario("seq_too_low_possdup_orig_after_sending", "34 too low with 43=Y and 122 later than 52")
def s_seq_low_pd_late(args, c):
    c.logon(hb=30)
    c.send("0")
    c.send("1", [(112, "DUP")], seq=1, header=[(43, "Y"), (122, now_ts(+60))])
    c.read(quiet=3.0, limit=5.0, stamp=True)


@scenario("gap_fill_too_low_possdup_without_orig", "SequenceReset-GapFill with 34 too low, 43=Y and no 122")
def s_gapfill_low_no122(args, c):
    c.logon(hb=30)
    c.send("0")
    c.send("4", [(123, "Y"), (36, "10")], seq=1, header=[(43, "Y")])
    c.read(quiet=0.5)
    c.send("1", [(112, "AT-3")])
    c.read(quiet=0.5)


@scenario("possdup_orig_after_sending", "Expected seq with 43=Y and 122 later than 52 (SendingTime accuracy)")
def s_pd_orig_later(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "PD")], header=[(43, "Y"), (122, now_ts(+60))])
    c.read(quiet=1.0)


@scenario("possdup_expected_seq_without_orig", "Expected seq with 43=Y and no 122")
def s_pd_expected_no122(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "PD")], header=[(43, "Y")])
    c.read(quiet=1.0)


ORDER_BODY = [(11, "ORD-1"), (21, "1"), (55, "ABC"), (54, "1"), (60, "20240101-00:00:00.000"),
              (38, "100"), (40, "2"), (44, "10.5")]


def order(clordid, extra=()):
    return [(11, clordid)] + [f for f in ORDER_BODY if f[0] != 11] + list(extra)


@scenario("resend_request_after_app", "--app echo sends two ExecutionReports and a Heartbeat; ResendRequest 7=1 16=0 from the probe", app="echo")
def s_resend(args, c):
    c.logon(hb=30)
    c.send("D", order("ORD-1"))
    c.read(quiet=0.5)
    c.send("1", [(112, "BETWEEN")])
    c.read(quiet=0.5)
    c.send("D", order("ORD-2"))
    c.read(quiet=0.5)
    c.send("1", [(112, "AFTER")])
    c.read(quiet=0.5)
    c.note("probe asks for everything: 7=1 16=0")
    c.send("2", [(7, "1"), (16, "0")])
    c.read(quiet=1.0)
    c.note("then a bounded range 7=2 16=3")
    c.send("2", [(7, "2"), (16, "3")])
    c.read(quiet=1.0)
    c.note("then a range ending in admin messages only 7=5 16=5")
    c.send("2", [(7, "5"), (16, "5")])
    c.read(quiet=1.0)
    c.note("then 7 beyond what QuickFIX has sent: 7=50 16=0")
    c.send("2", [(7, "50"), (16, "0")])
    c.read(quiet=1.0)


@scenario("resend_request_fix42", "FIX.4.2: ResendRequest 7=1 16=0 after one ExecutionReport (16=0 vs 999999)", app="echo")
def s_resend42(args, c):
    c.logon(hb=30)
    c.send("D", order("ORD-1", ()))
    c.read(quiet=0.5)
    c.send("2", [(7, "1"), (16, "0")])
    c.read(quiet=1.0)
    c.send("2", [(7, "1"), (16, "999999")])
    c.read(quiet=1.0)


@scenario("gap_fill", "SequenceReset-GapFill 34=2 123=Y 36=10 (no PossDup), then a message with 34=10")
def s_gapfill(args, c):
    c.logon(hb=30)
    c.send("4", [(123, "Y"), (36, "10")])
    c.read(quiet=0.5)
    c.seq = 10
    c.send("1", [(112, "AT-10")])
    c.read(quiet=0.5)


@scenario("gap_fill_too_high", "SequenceReset-GapFill with 34=5 while 2 is expected")
def s_gapfill_high(args, c):
    c.logon(hb=30)
    c.send("4", [(123, "Y"), (36, "10")], seq=5)
    c.read(quiet=0.5)


@scenario("gap_fill_too_low", "SequenceReset-GapFill with 34=1 (too low), without and with PossDup")
def s_gapfill_low(args, c):
    c.logon(hb=30)
    c.send("0")
    c.send("4", [(123, "Y"), (36, "10")], seq=1, header=[(43, "Y"), (122, now_ts(-5))])
    c.read(quiet=0.5)
    c.send("4", [(123, "Y"), (36, "10")], seq=1)
    c.read(quiet=1.0)


@scenario("gap_fill_new_seq_lower", "SequenceReset-GapFill 34=3 36=2 (NewSeqNo lower than expected)")
def s_gapfill_lower(args, c):
    c.logon(hb=30)
    c.send("0")
    c.send("4", [(123, "Y"), (36, "2")])
    c.read(quiet=1.0)
    c.send("1", [(112, "AFTER")])
    c.read(quiet=0.5)


@scenario("sequence_reset", "SequenceReset-Reset (no 123) 36=20, then a message with 34=20")
def s_reset(args, c):
    c.logon(hb=30)
    c.send("4", [(36, "20")])
    c.read(quiet=0.5)
    c.seq = 20
    c.send("1", [(112, "AT-20")])
    c.read(quiet=0.5)


@scenario("sequence_reset_any_seq", "SequenceReset-Reset with 34=99 (MsgSeqNum is ignored for Reset), 36=20")
def s_reset_any(args, c):
    c.logon(hb=30)
    c.send("4", [(36, "20")], seq=99)
    c.read(quiet=0.5)
    c.seq = 20
    c.send("1", [(112, "AT-20")])
    c.read(quiet=0.5)


@scenario("sequence_reset_lower", "SequenceReset-Reset 36=1 while 3 is expected (NewSeqNo lower)")
def s_reset_lower(args, c):
    c.logon(hb=30)
    c.send("0")
    c.send("4", [(36, "1")])
    c.read(quiet=1.0)
    c.send("1", [(112, "AFTER")])
    c.read(quiet=0.5)


@scenario("sequence_reset_missing_newseqno", "SequenceReset without 36")
def s_reset_no36(args, c):
    c.logon(hb=30)
    c.send("4", [(123, "Y")])
    c.read(quiet=1.0)


@scenario("garbled_bad_checksum", "A TestRequest with a wrong CheckSum, then a correct one with the same 34")
def s_bad_cks(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "BAD-CKS")], checksum=0, bump=False)
    c.read(quiet=1.0)
    c.send("1", [(112, "GOOD")])
    c.read(quiet=0.5)


@scenario("garbled_bad_length", "A TestRequest with BodyLength 5 too large, then a correct one with the same 34")
def s_bad_len(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "BAD-LEN")], bump=False, body_length=len("35=1|49=PROBE|56=QF|34=2|52=20240101-00:00:00.000|112=BAD-LEN|") + 5)
    c.read(quiet=1.0)
    c.send("1", [(112, "GOOD")])
    c.read(quiet=0.5)


@scenario("garbled_bad_length_short", "A TestRequest with BodyLength 5 too small, then a correct one with the same 34")
def s_bad_len_short(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "BAD-LEN")], bump=False, body_length=len("35=1|49=PROBE|56=QF|34=2|52=20240101-00:00:00.000|112=BAD-LEN|") - 5)
    c.read(quiet=1.0)
    c.send("1", [(112, "GOOD")])
    c.read(quiet=0.5)


@scenario("garbage_bytes", "Random non-FIX bytes in an established session, then a TestRequest")
def s_garbage(args, c):
    c.logon(hb=30)
    c.raw(b"hello world\x01garbage=1\x01")
    c.read(quiet=1.0)
    c.send("1", [(112, "GOOD")])
    c.read(quiet=0.5)


@scenario("missing_sending_time", "A TestRequest without 52 (required header field)")
def s_no52(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "NO-52")], order=[35, 49, 56, 34])
    c.read(quiet=1.0)
    c.send("1", [(112, "AFTER")])
    c.read(quiet=0.5)


@scenario("missing_msgseqnum", "A TestRequest without 34")
def s_no34(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "NO-34")], order=[35, 49, 56, 52], bump=False)
    c.read(quiet=1.0)


@scenario("sending_time_off", "A TestRequest with 52 five minutes in the past (default MaxLatency 120)")
def s_st_off(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "OLD")], sending_time=now_ts(-300))
    c.read(quiet=4.0, limit=6.0, stamp=True)


@scenario("sending_time_off_logon", "Logon with 52 five minutes in the future")
def s_st_off_logon(args, c):
    c.send("A", [(98, "0"), (108, "30")], sending_time=now_ts(300))
    c.read(quiet=1.0)


@scenario("compid_mismatch", "After logon, a TestRequest with 49=OTHER")
def s_compid(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "X")], sender="OTHER")
    c.read(quiet=4.0, limit=6.0, stamp=True)


@scenario("compid_mismatch_target", "After logon, a TestRequest with 56=OTHER")
def s_compid_t(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "X")], target="OTHER")
    c.read(quiet=4.0, limit=6.0, stamp=True)


@scenario("beginstring_mismatch", "After FIX.4.4 logon, a TestRequest with 8=FIX.4.2")
def s_begin_mismatch(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "X")], begin="FIX.4.2")
    c.read(quiet=4.0, limit=6.0, stamp=True)


@scenario("unknown_msgtype_fix44", "FIX.4.4: 35=ZZ (not in the dictionary)")
def s_unknown44(args, c):
    c.logon(hb=30)
    c.send("ZZ", [(58, "x")])
    c.read(quiet=1.0)


@scenario("unknown_msgtype_fix42", "FIX.4.2: 35=ZZ (not in the dictionary)")
def s_unknown42(args, c):
    c.logon(hb=30)
    c.send("ZZ", [(58, "x")])
    c.read(quiet=1.0)


@scenario("unsupported_msgtype_fix44", "FIX.4.4 --app echo: 35=B (valid, application throws UnsupportedMessageType)", app="echo")
def s_unsupported44(args, c):
    c.logon(hb=30)
    c.send("B", [(148, "headline"), (33, "1"), (58, "line")])
    c.read(quiet=1.0)


@scenario("unsupported_msgtype_fix42", "FIX.4.2 --app echo: 35=B (valid, application throws UnsupportedMessageType)", app="echo")
def s_unsupported42(args, c):
    c.logon(hb=30)
    c.send("B", [(148, "headline"), (33, "1"), (58, "line")])
    c.read(quiet=1.0)


@scenario("echo_order_fix44", "FIX.4.4 --app echo: NewOrderSingle -> ExecutionReport; Email -> Email", app="echo")
def s_echo44(args, c):
    c.logon(hb=30)
    c.send("D", order("ORD-1"))
    c.read(quiet=0.5)
    c.send("C", [(164, "E1"), (94, "0"), (147, "subject"), (33, "1"), (58, "line one")])
    c.read(quiet=0.5)


@scenario("field_without_value", "NewOrderSingle with 58= (empty value)", app="echo")
def s_empty(args, c):
    c.logon(hb=30)
    c.send("D", order("ORD-E", [(58, "")]))
    c.read(quiet=1.0)


@scenario("field_without_value_header", "TestRequest with empty 112=")
def s_empty112(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "")])
    c.read(quiet=1.0)


@scenario("unknown_tag", "NewOrderSingle with tag 4000=X (below 5000, not in the dictionary)", app="echo")
def s_unknown_tag(args, c):
    c.logon(hb=30)
    c.send("D", order("ORD-U", [(4000, "X")]))
    c.read(quiet=1.0)


@scenario("user_defined_tag", "NewOrderSingle with tag 9999=X (user-defined, ValidateUserDefinedFields=Y)", app="echo")
def s_udf(args, c):
    c.logon(hb=30)
    c.send("D", order("ORD-U", [(9999, "X")]))
    c.read(quiet=1.0)


@scenario("tag_not_defined_for_msgtype", "NewOrderSingle with 112=X (TestReqID, defined but not in D)", app="echo")
def s_not_for_type(args, c):
    c.logon(hb=30)
    c.send("D", order("ORD-N", [(112, "X")]))
    c.read(quiet=1.0)


@scenario("incorrect_data_format", "NewOrderSingle with 38=abc (Qty)", app="echo")
def s_format(args, c):
    c.logon(hb=30)
    c.send("D", [f if f[0] != 38 else (38, "abc") for f in order("ORD-F")])
    c.read(quiet=1.0)


@scenario("incorrect_data_format_header", "TestRequest with 34=abc")
def s_format_seq(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "X")], seq="abc", bump=False)
    c.read(quiet=1.0)


@scenario("enum_out_of_range", "NewOrderSingle with 54=Z (Side)", app="echo")
def s_enum(args, c):
    c.logon(hb=30)
    c.send("D", [f if f[0] != 54 else (54, "Z") for f in order("ORD-Z")])
    c.read(quiet=1.0)


@scenario("required_field_missing", "NewOrderSingle without 11 (ClOrdID)", app="echo")
def s_required(args, c):
    c.logon(hb=30)
    c.send("D", [f for f in order("X") if f[0] != 11])
    c.read(quiet=1.0)
    c.note("was 34=2 consumed by the Reject? a TestRequest with 34=3:")
    c.send("1", [(112, "AT-3")])
    c.read(quiet=0.5)


@scenario("tag_repeated", "NewOrderSingle with 55 twice", app="echo")
def s_repeated(args, c):
    c.logon(hb=30)
    c.send("D", order("ORD-R", [(55, "DEF")]))
    c.read(quiet=1.0)


@scenario("tag_repeated_fix42", "FIX.4.2: NewOrderSingle with 55 twice (reason 13 > 11: is 373 sent?)", app="echo")
def s_repeated42(args, c):
    c.logon(hb=30)
    c.send("D", order("ORD-R", [(55, "DEF")]))
    c.read(quiet=1.0)


@scenario("required_field_missing_fix42", "FIX.4.2: NewOrderSingle without 11", app="echo")
def s_required42(args, c):
    c.logon(hb=30)
    c.send("D", [f for f in order("X") if f[0] != 11])
    c.read(quiet=1.0)


@scenario("header_field_out_of_order", "TestRequest with 49 before 35 (35 must be the third field)")
def s_order35(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "X")], order=[49, 35, 56, 34, 52])
    c.read(quiet=1.0)


@scenario("header_tag_in_body", "TestRequest with a header field (43=N) after the body field 112")
def s_hdr_in_body(args, c):
    c.logon(hb=30)
    c.send("1", [(112, "X"), (43, "N")])
    c.read(quiet=1.0)


MD_ENTRY = [(279, "0"), (269, "0"), (55, "ABC"), (270, "10.5"), (271, "100"), (278, "1")]


@scenario("repeating_group_count_wrong", "MarketDataIncrementalRefresh with 268=2 but one entry", app="echo")
def s_group(args, c):
    c.logon(hb=30)
    c.send("X", [(268, "2")] + MD_ENTRY)
    c.read(quiet=1.0)


@scenario("repeating_group_count_wrong_low", "MarketDataIncrementalRefresh with 268=1 but two entries", app="echo")
def s_group_low(args, c):
    c.logon(hb=30)
    c.send("X", [(268, "1")] + MD_ENTRY + MD_ENTRY)
    c.read(quiet=1.0)


@scenario("logon_reset_seqnum_wrong_seq", "Logon with 141=Y but 34=5")
def s_logon_reset_wrong(args, c):
    c.send("A", [(98, "0"), (108, "30"), (141, "Y")], seq=5)
    c.read(quiet=1.0)
    c.note("which number does QuickFIX expect next? a TestRequest with 34=2:")
    c.send("1", [(112, "AT-2")], seq=2)
    c.read(quiet=0.5)


@scenario("reject_received", "The probe sends a session Reject (35=3) for QuickFIX's Logon")
def s_reject_recv(args, c):
    c.logon(hb=30)
    c.send("3", [(45, "1"), (58, "just testing"), (373, "99")])
    c.read(quiet=0.5)
    c.send("1", [(112, "AFTER")])
    c.read(quiet=0.5)


@scenario("app_message_seq_too_high_queued", "--app echo: NewOrderSingle with 34=4 while 2 is expected; probe fills 2..3 with GapFill", app="echo")
def s_app_queued(args, c):
    c.logon(hb=30)
    c.send("D", order("ORD-Q"), seq=4)
    c.read(quiet=0.5)
    c.send("4", [(123, "Y"), (36, "4")], seq=2, header=[(43, "Y"), (122, now_ts())])
    c.read(quiet=0.5)


@scenario("possresend_order", "--app echo: NewOrderSingle twice, the second with 97=Y (PossResend) and a new 34", app="echo")
def s_possresend(args, c):
    c.logon(hb=30)
    c.send("D", order("ORD-P"))
    c.read(quiet=0.5)
    c.send("D", order("ORD-P"), header=[(97, "Y")])
    c.read(quiet=0.5)


@scenario("logout_by_us", "The probe sends Logout 58=bye")
def s_logout(args, c):
    c.logon(hb=30)
    c.send("5", [(58, "bye")])
    c.read(quiet=1.0)


@scenario("logout_by_quickfix", "qf_peer is stopped (SIGTERM) with the session logged on; the probe answers its Logout")
def s_logout_qf(args, c):
    c.logon(hb=30)
    c.peer.proc.send_signal(signal.SIGTERM)
    got = c.read(quiet=1.0, until=lambda m: field(m, 35) == "5")
    if any(field(m, 35) == "5" for m in got):
        c.send("5")
    c.read(quiet=1.0)


@scenario("logout_by_quickfix_unanswered", "qf_peer is stopped (SIGTERM); the probe never answers its Logout")
def s_logout_qf2(args, c):
    c.logon(hb=30)
    c.peer.proc.send_signal(signal.SIGTERM)
    c.read(quiet=3.0, limit=15.0, stamp=True)


@scenario("logout_seq_too_high", "Logout from the probe with 34 too high (5 while 2 expected)")
def s_logout_high(args, c):
    c.logon(hb=30)
    c.send("5", seq=5)
    c.read(quiet=1.0)


@scenario("duplicate_logon", "A second connection logs on with the same CompIDs while the first is logged on")
def s_dup(args, c):
    c.logon(hb=30)
    c.note("second connection:")
    c2 = Conn.connect(c.tr, c.port, begin=c.begin)
    c2.logon(hb=30, quiet=1.0)
    c.note("first connection afterwards:")
    c.send("1", [(112, "STILL-THERE")])
    c.read(quiet=0.5)
    c2.close()


@scenario("logon_twice_same_connection", "A second Logon (34=2) on an already logged-on connection")
def s_logon_twice(args, c):
    c.logon(hb=30)
    c.send("A", [(98, "0"), (108, "30")])
    c.read(quiet=1.0)


# ---------------------------------------------------------------------------------------
# Issue 18: the behaviour classes of QuickFIX's acceptance suite (its `at` application echoes
# NewOrderSingle and SecurityDefinition back as parsed, as QuickFIX's test server does).

AT_ORDER = [(11, "ID"), (21, "3"), (38, "100"), (40, "1"), (54, "1"), (55, "INTC"),
            (60, "20240101-00:00:00.000")]


@scenario("at_echo_field_order", "--app at: orders with header and body fields in various orders come back in QuickFIX's order", app="at")
def s_at_order(args, c):
    c.logon(hb=30)
    c.note("in order:")
    c.send("D", AT_ORDER)
    c.read(quiet=0.5)
    c.note("header 49,34,56,52 and body 60,55,54,40,38,21,11:")
    c.send("D", list(reversed(AT_ORDER)), order=[35, 49, 34, 56, 52])
    c.read(quiet=0.5)
    c.note("header 56,34,49,52 then PossResend 97=N and OnBehalfOfCompID 115 (echoed as received, not reversed):")
    c.send("D", AT_ORDER[3:] + AT_ORDER[:3], order=[35, 56, 34, 49, 52], header=[(115, "OBO"), (97, "N")])
    c.read(quiet=0.5)


@scenario("at_echo_groups", "--app at: repeating groups (Parties 453, nested PartySubIDs 802) in non-dictionary order come back in dictionary order", app="at")
def s_at_groups(args, c):
    c.logon(hb=30)
    c.note("two Parties entries with 452 before 447, and a body field (59) after the group:")
    c.send("D", [(453, "2"), (448, "P1"), (452, "1"), (447, "D"), (448, "P2"), (452, "3"), (447, "D")]
           + AT_ORDER[::-1] + [(59, "0")])
    c.read(quiet=0.5)
    c.note("a nested group (802 PartySubIDs inside a Parties entry), entry fields reversed:")
    c.send("D", AT_ORDER + [(453, "1"), (448, "P1"), (802, "2"), (523, "S1"), (803, "1"),
                            (523, "S2"), (803, "2"), (452, "1"), (447, "D")])
    c.read(quiet=0.5)
    c.note("SecurityDefinition with an empty group (454=0) and one with two entries:")
    c.send("d", [(320, "REQ1"), (322, "RESP1"), (323, "6"), (55, "TBS"), (22, "8"), (167, "CS"),
                 (336, "ONE_MAIN"), (58, "none"), (454, "0")])
    c.read(quiet=0.5)
    c.send("d", [(320, "REQ2"), (322, "RESP2"), (323, "1"), (55, "TBS"), (454, "2"), (455, "A1"),
                 (456, "4"), (455, "A2"), (456, "8"), (22, "8")])
    c.read(quiet=0.5)


@scenario("at_echo_field_order_fix42", "FIX.4.2 --app at: an order with reordered header and body", app="at")
def s_at_order42(args, c):
    c.logon(hb=30)
    c.send("D", list(reversed(AT_ORDER)), order=[35, 49, 34, 56, 52])
    c.read(quiet=0.5)


BAD_ORDER = [(11, "ID"), (21, "3"), (38, "100"), (40, "w"), (54, "1"), (55, "INTC"),
             (60, "20240101-00:00:00.000")]


@scenario("reverse_route", "--app at: rejects of orders (40=w) carrying OnBehalfOf*/DeliverTo* (115/116/144, 128/129/145) are reverse-routed", app="at")
def s_reverse_route(args, c):
    c.logon(hb=30)
    for hdr in ([(115, "JCD")], [(128, "JCD")], [(115, "JCD"), (116, "CS")], [(128, "JCD"), (129, "CS")],
                [(115, "JCD"), (116, "CS"), (144, "CHI")], [(128, "JCD"), (129, "CS"), (145, "CHI")]):
        c.send("D", BAD_ORDER, header=hdr)
        c.read(quiet=0.5)
    c.note("other replies: a TestRequest, an unsupported message type (News) and a too-low SequenceReset with 115:")
    c.send("1", [(112, "RR")], header=[(115, "JCD"), (116, "CS")])
    c.read(quiet=0.5)
    c.send("B", [(148, "headline"), (33, "1"), (58, "text")], header=[(128, "JCD")])
    c.read(quiet=0.5)
    c.send("4", [(36, "2")], header=[(115, "JCD")])
    c.read(quiet=0.5)
    c.note("Logout with 128/129:")
    c.seq += 0
    c.send("5", header=[(128, "JCD"), (129, "CS")])
    c.read(quiet=1.0)


@scenario("reverse_route_empty", "--app at: orders with present-but-empty routing fields (115=, 128=, 116=, 129=, 144=, 145=)", app="at")
def s_reverse_route_empty(args, c):
    c.logon(hb=30)
    good = [f if f[0] != 40 else (40, "1") for f in BAD_ORDER]
    for hdr, body in (([(115, "")], good), ([(128, "")], good), ([(115, "JCD"), (116, "")], good),
                      ([(128, "JCD"), (129, "")], good), ([(115, "JCD"), (116, "CS"), (144, "")], good),
                      ([(128, "JCD"), (129, "CS"), (145, "")], BAD_ORDER)):
        c.send("D", body, header=hdr)
        c.read(quiet=0.5)
    c.note("valid order with 115 and an empty 116: echoed?")
    c.send("D", good, header=[(115, "JCD"), (50, "")])
    c.read(quiet=0.5)


@scenario("invalid_tag_number", "Heartbeats with tags 999, 0, -1, 5000, abc and 00112 (FIX.4.4)")
def s_invalid_tag(args, c):
    c.logon(hb=30)
    for tag in ("999", "0", "-1", "5000", "abc", "12345678901"):
        c.send("0", [(tag, "HI")])
        c.read(quiet=0.5)
    c.note("an invalid tag in an application message (--app log) and a TestRequest after it:")
    c.send("D", AT_ORDER + [("4000", "X")])
    c.read(quiet=0.5)
    c.send("1", [(112, "AFTER")])
    c.read(quiet=0.5)


@scenario("invalid_tag_number_fix42", "FIX.4.2: Heartbeats with tags 999, 0, -1, 5000")
def s_invalid_tag42(args, c):
    c.logon(hb=30)
    for tag in ("999", "0", "-1", "5000"):
        c.send("0", [(tag, "HI")])
        c.read(quiet=0.5)


@scenario("possresend_seen", "--app at: an order, then the same ClOrdID with 97=Y (ignored by the application), then Logout", app="at")
def s_possresend_seen(args, c):
    c.logon(hb=30)
    c.send("D", AT_ORDER)
    c.read(quiet=0.5)
    c.send("D", AT_ORDER, header=[(97, "Y")])
    c.read(quiet=0.5)
    c.send("5")
    c.read(quiet=1.0)


@scenario("possresend_not_seen", "--app at: a new ClOrdID with 97=Y (delivered and echoed, 97 kept), a duplicate 97=Y, then 97=N", app="at")
def s_possresend_new(args, c):
    c.logon(hb=30)
    c.send("D", AT_ORDER, header=[(97, "Y")])
    c.read(quiet=0.5)
    c.send("D", AT_ORDER, header=[(97, "Y")])
    c.read(quiet=0.5)
    c.send("D", AT_ORDER, header=[(97, "N")])
    c.read(quiet=0.5)
    c.send("5")
    c.read(quiet=1.0)


# CopyMsgIndicator (797) is a FIX.5.0 field, but only SP2's NewOrderSingle has it.
FIXT_ORDER = AT_ORDER + [(797, "Y")]


@scenario("fixt_appl_ver_id", "--app at, FIXT.1.1 (FIX.5.0 default, SP2 under AppDataDictionary.FIX.5.0SP2): Logon 1137=7; an order with SP2's 797 without 1128, with 1128=9, with 1128=7", app="at")
def s_fixt_appl_ver_id(args, c):
    c.logon(hb=30, extra=[(1137, "7")])
    c.send("D", FIXT_ORDER)
    c.read(quiet=0.5)
    c.send("D", FIXT_ORDER, header=[(1128, "9")])
    c.read(quiet=0.5)
    c.send("D", FIXT_ORDER, header=[(1128, "7")])
    c.read(quiet=0.5)
    c.send("5")
    c.read(quiet=1.0)


@scenario("fixt_logon_default_appl_ver_id", "--app at, FIXT.1.1: Logon 1137=9 (SP2); an order with SP2's 797 without 1128, then with 1128=7", app="at")
def s_fixt_logon_sp2(args, c):
    c.logon(hb=30, extra=[(1137, "9")])
    c.send("D", FIXT_ORDER)
    c.read(quiet=0.5)
    c.send("D", FIXT_ORDER, header=[(1128, "7")])
    c.read(quiet=0.5)
    c.send("5")
    c.read(quiet=1.0)


def order_len(c, body, seq):
    """The BodyLength an order from `c` with `body` and 34=`seq` really has."""
    fields = [(35, "D"), (49, c.sender), (56, c.target), (34, str(seq)), (52, now_ts())] + list(body)
    return len("".join("%s=%s%s" % (t, v, SOH) for t, v in fields).encode())


@scenario("body_length_wrong", "--app at: an order with BodyLength too short (ignored), the next one too high (ResendRequest); then too long (swallows the next)", app="at")
def s_body_length(args, c):
    c.logon(hb=30)
    c.send("D", AT_ORDER, body_length=30, bump=False)
    c.seq += 1
    c.send("D", AT_ORDER)
    c.read(quiet=1.0)
    c.note("the first one again, PossDup with 122:")
    c.send("D", AT_ORDER, seq=2, header=[(43, "Y"), (122, now_ts(-1))])
    c.read(quiet=1.0)
    c.note("BodyLength 10 too long (4), then 5 correct: both lost?")
    c.send("D", AT_ORDER, body_length=order_len(c, AT_ORDER, c.seq) + 10, bump=False)
    c.send("D", AT_ORDER, seq=c.seq + 1, bump=False)
    c.read(quiet=1.0)
    c.note("4 and 5 again:")
    c.send("D", AT_ORDER)
    c.send("D", AT_ORDER)
    c.read(quiet=1.0)
    c.send("5")
    c.read(quiet=1.0)


@scenario("logon_body_length_short", "A Logon whose BodyLength (40) is too short")
def s_logon_len_short(args, c):
    c.send("A", [(98, "0"), (108, "30")], body_length=40)
    c.read(quiet=3.0, limit=15.0, stamp=True)


@scenario("logon_body_length_long", "A Logon whose BodyLength is 20 too long (nothing follows)")
def s_logon_len_long(args, c):
    body = [(98, "0"), (108, "30")]
    fields = [(35, "A"), (49, c.sender), (56, c.target), (34, "1"), (52, now_ts())] + body
    real = len("".join("%s=%s%s" % (t, v, SOH) for t, v in fields).encode())
    c.send("A", body, body_length=real + 20)
    c.read(quiet=3.0, limit=15.0, stamp=True)


@scenario("logon_body_length_long_then_logon", "A Logon whose BodyLength is 20 too long, then a correct Logon")
def s_logon_len_long2(args, c):
    body = [(98, "0"), (108, "30")]
    fields = [(35, "A"), (49, c.sender), (56, c.target), (34, "1"), (52, now_ts())] + body
    real = len("".join("%s=%s%s" % (t, v, SOH) for t, v in fields).encode())
    c.send("A", body, body_length=real + 20, bump=False)
    c.send("A", body)
    c.read(quiet=3.0, limit=15.0, stamp=True)


@scenario("empty_values", "--app at: empty values in the header (56=, 49=, 115=), body (58= , 60=), a group (448=) and 34=/35=", app="at")
def s_empty_values(args, c):
    c.logon(hb=30)
    c.note("Heartbeat 56= (header):")
    c.send("0", target="")
    c.read(quiet=0.5)
    c.note("Heartbeat with 49= (header):")
    c.send("0", sender="")
    c.read(quiet=0.5)
    c.note("order with 60= (required body field):")
    c.send("D", [f if f[0] != 60 else (60, "") for f in AT_ORDER])
    c.read(quiet=0.5)
    c.note("order with a group entry 448= :")
    c.send("D", AT_ORDER + [(453, "1"), (448, ""), (447, "D"), (452, "1")])
    c.read(quiet=0.5)
    c.note("order with 453= (group count empty):")
    c.send("D", AT_ORDER + [(453, "")])
    c.read(quiet=0.5)
    c.note("TestRequest with 43= (PossDupFlag empty):")
    c.send("1", [(112, "X")], header=[(43, "")])
    c.read(quiet=0.5)
    c.note("TestRequest with 34= :")
    c.send("1", [(112, "NO-SEQ")], seq="", bump=False)
    c.read(quiet=0.5)
    c.send("1", [(112, "AFTER")])
    c.read(quiet=0.5)


@scenario("at_echo_field_order_fix40", "FIX.4.0 --app at: an order with reordered header and body (SendingTime in seconds)", app="at")
def s_at_order40(args, c):
    c.logon(hb=30)
    body = [(11, "ID"), (21, "3"), (38, "100"), (40, "1"), (54, "1"), (55, "INTC")]
    c.send("D", list(reversed(body)), order=[35, 49, 34, 56, 52], sending_time=now_ts()[:17])
    c.read(quiet=0.5)


@scenario("reverse_route_fix40", "FIX.4.0 --app at: a Reject of an order (40=w) with 115/116/144 and one with 128/129/145 (no LocationIDs before FIX.4.2)", app="at")
def s_reverse_route40(args, c):
    c.logon(hb=30)
    body = [(11, "ID"), (21, "3"), (38, "100"), (40, "w"), (54, "1"), (55, "INTC")]
    for hdr in ([(115, "JCD"), (116, "CS"), (144, "CHI")], [(128, "JCD"), (129, "CS"), (145, "CHI")]):
        c.send("D", body, header=hdr, sending_time=now_ts()[:17])
        c.read(quiet=0.5)


@scenario("neighbour_tag_forms", "Neighbours of classes 3 and 7: a leading-zero tag (0112=), a field without '=', 52= empty, a tag of 10 digits that wraps positive")
def s_neighbour_tags(args, c):
    c.logon(hb=30)
    c.note("TestRequest with 0112=LZ:")
    c.send("1", [("0112", "LZ")])
    c.read(quiet=0.5)
    c.note("Heartbeat with a field without '=' (58):")
    c.raw(_with_bare_tag(c))
    c.read(quiet=0.5)
    c.note("Heartbeat with 52= (empty SendingTime):")
    c.send("0", sending_time="")
    c.read(quiet=0.5)
    c.note("Heartbeat with 4294967297=X (wraps to tag 1, Account):")
    c.send("0", [("4294967297", "X")])
    c.read(quiet=0.5)
    c.send("1", [(112, "AFTER")])
    c.read(quiet=0.5)


def _with_bare_tag(c):
    """A Heartbeat whose last body field is a bare `58` (no `=`), with 9 and 10 right."""
    fields = [(35, "0"), (49, c.sender), (56, c.target), (34, str(c.seq)), (52, now_ts())]
    body = "".join("%s=%s%s" % (t, v, SOH) for t, v in fields) + "58" + SOH
    head = "8=%s%s9=%d%s" % (c.begin, SOH, len(body.encode()), SOH)
    cks = sum((head + body).encode()) % 256
    c.seq += 1
    return (head + body + "10=%03d%s" % (cks, SOH)).encode()


@scenario("logon_empty_value", "A Logon with 108= (empty HeartBtInt)")
def s_logon_empty(args, c):
    c.send("A", [(98, "0"), (108, "")])
    c.read(quiet=2.0, limit=5.0)


def run_acceptor_scenario(args, name, title, fn, app, extra):
    port = free_port()
    tr = Transcript(name, title)
    peer = Peer(args, ACCEPTOR_CFG.format(port=port, extra=extra), app=app)
    try:
        conn = Conn.connect(tr, port, begin=begin_for(name))
        conn.peer = peer
        conn.port = port
        fn(args, conn)
        if not conn.closed:
            conn.close()
    finally:
        time.sleep(0.1)
        peer.stop()
    for line in peer.events():
        tr.note("event: " + (line[6:] if line.startswith("EVENT ") else line).replace(SOH, "|"))
    return tr


# ---------------------------------------------------------------------------------------
# Scenarios against QuickFIX as initiator: the probe listens and plays the acceptor.

INIT_SCENARIOS = []


def init_scenario(name, title, hb=2, extra=""):
    def wrap(fn):
        INIT_SCENARIOS.append((name, title, fn, hb, extra))
        return fn
    return wrap


def accept_logon(c, seq=None, extra=()):
    got = c.read(quiet=2.0, until=lambda m: field(m, 35) == "A")
    if got and field(got[-1], 35) == "A":
        hb = field(got[-1], 108)
        c.send("A", [(98, "0"), (108, hb)] + list(extra), seq=seq)
        return True
    return False


@init_scenario("initiator_logon", "QuickFIX initiator (HeartBtInt=2): its Logon; probe answers; heartbeats; probe logs out", hb=2)
def i_logon(args, c):
    accept_logon(c)
    got = c.read(quiet=5.0, limit=5.0, stamp=True, until=lambda m: field(m, 35) == "1")
    for m in got:
        if field(m, 35) == "1":
            c.send("0", [(112, field(m, 112))])
    c.read(quiet=1.0)
    c.send("5")
    c.read(quiet=1.0)


@init_scenario("initiator_logon_reset_on_logon", "QuickFIX initiator with ResetOnLogon=Y: its Logon carries 141=Y?", extra="ResetOnLogon=Y\n")
def i_logon_reset(args, c):
    accept_logon(c, extra=[(141, "Y")])
    c.send("5")
    c.read(quiet=1.0)


@init_scenario("initiator_logon_answer_seq_high", "Probe answers QuickFIX's Logon with 34=5: QuickFIX's ResendRequest")
def i_logon_high(args, c):
    accept_logon(c, seq=5)
    c.read(quiet=1.0)


@init_scenario("initiator_logon_rejected", "Probe answers QuickFIX's Logon with Logout 58=not allowed")
def i_logon_rejected(args, c):
    c.read(quiet=2.0, until=lambda m: field(m, 35) == "A")
    c.send("5", [(58, "not allowed")])
    c.read(quiet=1.0)


@init_scenario("initiator_logon_answer_not_logon", "Probe answers QuickFIX's Logon with a Heartbeat")
def i_logon_hb(args, c):
    c.read(quiet=2.0, until=lambda m: field(m, 35) == "A")
    c.send("0")
    c.read(quiet=1.0)


@init_scenario("initiator_no_logon_answer", "Probe never answers QuickFIX's Logon (LogonTimeout default 10s)")
def i_no_answer(args, c):
    c.read(quiet=12.0, limit=13.0, stamp=True)


def run_initiator_scenario(args, name, title, fn, hb, extra):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    tr = Transcript(name, title)
    peer = Peer(args, INITIATOR_CFG.format(port=port, hb=hb, extra=extra), app="log")
    try:
        listener.settimeout(10)
        sock, _ = listener.accept()
        conn = Conn(tr, sock, sender="PROBE", target="QF")
        conn.peer = peer
        fn(args, conn)
        if not conn.closed:
            conn.close()
    finally:
        listener.close()
        time.sleep(0.1)
        peer.stop()
    for line in peer.events():
        tr.note("event: " + (line[6:] if line.startswith("EVENT ") else line).replace(SOH, "|"))
    return tr


# ---------------------------------------------------------------------------------------
# The tick-to-trade reference algo (tools/quickfix/algo-acceptor.cfg) end to end: the probe
# plays the venue (initiator of the VENUE_MD and VENUE_OE sessions).


def run_algo_scenario(args):
    port = free_port()
    tr = Transcript("algo_tick_to_trade", "qf_peer --app algo with tools/quickfix/algo-acceptor.cfg: "
                    "venue logs on MD and OE sessions, sends two 35=X, receives the 35=D each triggers")
    with open(os.path.join(ROOT, "tools", "quickfix", "algo-acceptor.cfg")) as f:
        config = f.read()
    peer = Peer(args, config, app="algo", store="file",
                extra_args=["--define", "PORT=%d" % port, "--define", "SPEC=%s" % args.spec,
                            "--define", "DIR=@DIR@"])
    try:
        oe = Conn.connect(tr, port, sender="VENUE_OE", target="ALGO_OE")
        tr.note("order session (VENUE_OE -> ALGO_OE):")
        oe.logon(hb=30)
        md = Conn.connect(tr, port, sender="VENUE_MD", target="ALGO_MD")
        tr.note("market data session (VENUE_MD -> ALGO_MD):")
        md.logon(hb=30)
        md.send("X", [(268, "1"), (279, "0"), (269, "0"), (55, "ABC"), (270, "10.25"), (271, "100"), (278, "1")])
        tr.note("order session:")
        oe.read(quiet=0.5, until=lambda m: field(m, 35) == "D")
        md.send("X", [(268, "1"), (279, "0"), (269, "1"), (55, "XYZ"), (270, "99.5"), (271, "7"), (278, "2")])
        tr.note("order session:")
        oe.read(quiet=0.5, until=lambda m: field(m, 35) == "D")
        got = [m for m in oe.received if field(m, 35) == "D"]
        ok = (len(got) == 2 and field(got[0], 11) == "1" and field(got[0], 54) == "1"
              and field(got[1], 11) == "2" and field(got[1], 54) == "2" and field(got[1], 44) == "99.5")
        tr.note("check: two orders with ClOrdID = MDEntryID and Side from MDEntryType: %s" % ("ok" if ok else "FAILED"))
        md.read(quiet=0.2)
        md.close()
        oe.close()
    finally:
        time.sleep(0.1)
        peer.stop()
    for line in peer.lines:
        if line.startswith("CPU"):
            tr.note("qf_peer at exit: CPU user_us=... (value varies)")
        elif not line.startswith("READY"):
            tr.note("qf_peer: " + line)
    return tr, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default=os.environ.get("FIX_SPEC_DIR", os.path.join(ROOT, "target", "fix-spec")),
                    help="directory with FIX42.xml and FIX44.xml (default target/fix-spec or $FIX_SPEC_DIR)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "quickfix", "bin", "qf_peer"))
    ap.add_argument("--out", default=os.path.join(ROOT, "crates", "fix", "testdata", "quickfix"))
    ap.add_argument("--list", action="store_true", help="list scenario names and exit")
    ap.add_argument("names", nargs="*", help="scenarios to run (default: all)")
    args = ap.parse_args()
    args.spec = os.path.abspath(args.spec)
    every = ([(n, "acc") for n, *_ in SCENARIOS] + [(n, "init") for n, *_ in INIT_SCENARIOS]
             + [("algo_tick_to_trade", "algo")])
    if args.list:
        for n, kind in every:
            print(n)
        return 0
    if not os.access(args.bin, os.X_OK):
        print("probe: %s not found; run scripts/install-quickfix.sh first" % args.bin, file=sys.stderr)
        return 2
    for f in ("FIX42.xml", "FIX44.xml"):
        if not os.path.exists(os.path.join(args.spec, f)):
            print("probe: %s not found in %s (use --spec)" % (f, args.spec), file=sys.stderr)
            return 2
    wanted = set(args.names)
    unknown = wanted - {n for n, _ in every}
    if unknown:
        print("probe: unknown scenarios: %s" % ", ".join(sorted(unknown)), file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    for name, title, fn, app, extra in SCENARIOS:
        if wanted and name not in wanted:
            continue
        tr = run_acceptor_scenario(args, name, title, fn, app, extra)
        write(args, tr)
    for name, title, fn, hb, extra in INIT_SCENARIOS:
        if wanted and name not in wanted:
            continue
        tr = run_initiator_scenario(args, name, title, fn, hb, extra)
        write(args, tr)
    status = 0
    if not wanted or "algo_tick_to_trade" in wanted:
        tr, ok = run_algo_scenario(args)
        write(args, tr)
        if not ok:
            print("probe: algo_tick_to_trade check FAILED", file=sys.stderr)
            status = 1
    return status


def write(args, tr):
    path = os.path.join(args.out, tr.name + ".txt")
    with open(path, "w") as f:
        f.write("\n".join(tr.lines) + "\n")
    print("wrote %s (%d lines)" % (os.path.relpath(path, ROOT), len(tr.lines)))


if __name__ == "__main__":
    sys.exit(main())
