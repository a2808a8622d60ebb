#!/usr/bin/env python3
"""The FIX acceptor's pre-Logon attacks of issue 12 item 2, against a binary of your choice:

    scripts/hostile-fix.py target/release/tickwire bigbody 200   # 200 x '9=4000000', 1 MiB each, never read
    scripts/hostile-fix.py target/release/tickwire idle 10000    # 10,000 connections that never log on

Starts `tickwire fix acceptor --app echo` on 127.0.0.1:29555 with a throwaway settings file
and store, opens the connections, waits 2 s and prints the acceptor's VmRSS (raise
`ulimit -n` first for 10,000 connections). Figures: docs/reliability.md, "FIX engine".
"""
import tempfile
CFG = """[DEFAULT]
ConnectionType=acceptor
SocketAcceptPort=29555
SocketAcceptHost=127.0.0.1
StartTime=00:00:00
EndTime=00:00:00
FileStorePath=/tmp/fixprobe/store
[SESSION]
BeginString=FIX.4.4
SenderCompID=VENUE
TargetCompID=CLIENT
"""
_dir = tempfile.mkdtemp(prefix="tw-hostile-fix-")
open(f"{_dir}/acc.cfg", "w").write(CFG.replace("/tmp/fixprobe/store", f"{_dir}/store"))
import socket, sys, time, subprocess, os
binary, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = subprocess.Popen([binary, "fix", "acceptor", "--config", f"{_dir}/acc.cfg", "--app", "echo"],
                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(1.0)
def rss():
    for l in open(f"/proc/{p.pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1]) // 1024
socks = []; sent = 0; refused = 0
chunk = b"x" * 65536
deadline = time.time() + 60
for i in range(n):
    try:
        s = socket.create_connection(("127.0.0.1", 29555), timeout=2)
        s.setblocking(False)
        if mode == "bigbody":
            s.send(b"8=FIX.4.4\x019=4000000\x0135=A\x01")
            for _ in range(16):  # up to 1 MiB each, without reading
                try: sent += s.send(chunk)
                except (BlockingIOError, OSError): break
        socks.append(s)
    except OSError:
        refused += 1
    if time.time() > deadline: break
time.sleep(2.0)
r = rss(); alive = p.poll() is None
print(f"{os.path.basename(binary)} {mode} x{n}: acceptor VmRSS {r} MiB, alive {alive}, connects refused {refused}, bytes sent {sent/1e6:.0f} MB")
for s in socks: s.close()
p.terminate(); p.wait(timeout=10)
