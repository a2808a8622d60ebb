#!/usr/bin/env bash
# Ping-pong through a router holding N TCP subscribers that stopped reading (their
# socket buffers and router egress full): the stuck ones must cost the others nothing.
#
#     scripts/bench-stuck-subscribers.sh target/release/tickwire 1000
#
# Starts a spinning router (CPU 1, no guaranteed messaging, max_clients 3000), connects N
# raw subscribers to stall/x with 2 KiB receive buffers that never read, fills them with
# 2,000 messages of 1,000 bytes, then runs `bench pingpong --transports tickwire` (100 B,
# 20,000 pings, spin, --pin 0,1) against it. Run with N=0 for the baseline.
# BENCHMARKS.md, 2026-12-02 16:54.
set -eu
bin=$1; n=$2
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
taskset -c 1 "$bin" router --listen "127.0.0.1:$port" --idle spin --no-guaranteed --max-clients 3000 > /dev/null 2>&1 &
router=$!
holder=""
trap 'kill $router $holder 2>/dev/null; wait 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do
    "$bin" stats --router "127.0.0.1:$port" > /dev/null 2>&1 && break
    sleep 0.1
done
ready=$(mktemp)
python3 - "$port" "$n" > "$ready" <<'PY' &
import socket, struct, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
def frame(kind, body):
    return struct.pack('<IBBH', 8 + len(body), kind, 0, 0) + body
hello = frame(0x01, struct.pack('<HHI', 1, 0, 0) + b'stuck')
socks = []
for _ in range(n):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    s.connect(('127.0.0.1', port))
    s.sendall(hello + frame(0x10, struct.pack('<I', 1) + b'stall/x'))
    socks.append(s)
time.sleep(0.5)
for s in socks:
    s.recv(4096)  # WELCOME and the subscription's ACK; nothing more is ever read
print('stuck', n, flush=True)
time.sleep(300)
PY
holder=$!
for _ in $(seq 1 300); do grep -q stuck "$ready" && break; sleep 0.2; done
rm -f "$ready"
"$bin" pub stall/x --router "127.0.0.1:$port" --count 2000 --size 1000 > /dev/null 2>&1 || true
sleep 1
echo "router with $n stuck subscribers: tickwire (TCP) ping-pong, 100 B, half round trip in µs"
nice -n -20 "$bin" bench pingpong --transports tickwire --router "127.0.0.1:$port" --sizes 100 \
    --iterations 20000 --warmup 2000 --idle spin --pin 0,1 2>&1 | grep -A1 "size  *mean"
