#!/usr/bin/env python3
"""Attach and detach times of one wildcard over many kernel functions.

Runs inside a guest with kprobes (see docs/callgraph.md for the
`tests/vm/run 6.12 --exec` line): for each tracer, N rounds of
  start -> the wildcard probe fires   (loopback TCP traffic runs the whole
                                       time; the handler prints LIVE on its
                                       first hit)
  SIGINT -> the process exits          (detach included)
and prints the medians as a Markdown table.

Why the first hit and not a "ready" line: bpftrace 0.17 runs its BEGIN
probe before it attaches the other probes, so BEGIN says nothing about
them. With one multi-attach link (what both tools use for a kprobe
wildcard when the kernel has kprobe_multi) the first hit is the moment
every function went live; with per-function attachment it is an earlier
bound, which favours that tracer.

  attach_many.py [PATTERN] [ROUNDS]
  ATTACH_TRACERS="stap-rs,bpftrace kprobe"   only these tracers
  ATTACH_TIMEOUT=S                           give up on one round after S s
"""

import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

PATTERN = sys.argv[1] if len(sys.argv) > 1 else "tcp_*"
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
STAP_RS = os.environ.get("STAP_RS", "stap-rs")
TIMEOUT = float(os.environ.get("ATTACH_TIMEOUT", "1200"))

TRACERS = {
    "stap-rs": [
        STAP_RS, "-e",
        f'global n probe kernel.function("{PATTERN}") {{ if (n++ == 0) println("LIVE") }}',
    ],
    "bpftrace kprobe": [
        "bpftrace", "-B", "line", "-e",
        f'kprobe:{PATTERN} {{ if (@n == 0) {{ printf("LIVE\\n"); }} @n = 1; }}',
    ],
    "bpftrace kfunc": [
        "bpftrace", "-B", "line", "-e",
        f'kfunc:{PATTERN} {{ if (@n == 0) {{ printf("LIVE\\n"); }} @n = 1; }}',
    ],
}


def loopback_traffic(stop):
    """Small TCP sends over loopback every 20 ms until `stop` is set."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    threading.Thread(target=lambda: drain(server), daemon=True).start()
    while not stop.is_set():
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(b"x" * 100)
        time.sleep(0.02)


def drain(server):
    while True:
        conn, _ = server.accept()
        conn.recv(4096)
        conn.close()


def one_round(argv):
    """(seconds to the first hit, seconds from SIGINT to exit), or None."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(TIMEOUT, proc.kill)
    timer.start()
    live = None
    for line in proc.stdout:
        if "LIVE" in line:
            live = time.monotonic() - started
            break
    timer.cancel()
    if live is None:
        proc.wait()
        return None
    stopping = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.stdout.read()
    proc.wait()
    return live, time.monotonic() - stopping


def main():
    wanted = os.environ.get("ATTACH_TRACERS")
    names = [n for n in TRACERS if wanted is None or n in wanted.split(",")]
    stop = threading.Event()
    threading.Thread(target=loopback_traffic, args=(stop,), daemon=True).start()
    print(f"| tracer, `{PATTERN}` | start to first hit, ms | SIGINT to exit, ms | rounds |")
    print("|---|---|---|---|")
    for name in names:
        results = [r for r in (one_round(TRACERS[name]) for _ in range(ROUNDS)) if r]
        if not results:
            print(f"| {name} | no hit within {TIMEOUT:.0f} s | — | 0 of {ROUNDS} |", flush=True)
            continue
        live = statistics.median(r[0] for r in results) * 1000
        exit_ = statistics.median(r[1] for r in results) * 1000
        print(f"| {name} | {live:.0f} | {exit_:.0f} | {len(results)} |", flush=True)
    stop.set()


main()
