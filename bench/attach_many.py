#!/usr/bin/env python3
"""Attach and detach times of one wildcard over many kernel functions.

Runs inside a guest with kprobes (tests/vm/run 6.12 --exec, see
bench/attach-many): for each tracer, N rounds of
  start -> every probe live   (stap-rs: "Pass 5: starting run." on stderr
                               with -v; bpftrace: its BEGIN probe, which
                               runs after every probe is attached)
  SIGINT -> the process exits (detach included)
and prints the medians as a Markdown table.
"""

import os
import signal
import statistics
import subprocess
import sys
import time

PATTERN = sys.argv[1] if len(sys.argv) > 1 else "tcp_*"
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
STAP_RS = os.environ.get("STAP_RS", "stap-rs")

TRACERS = {
    "stap-rs": (
        [STAP_RS, "-v", "-e",
         f'global n probe kernel.function("{PATTERN}") {{ n++ }} probe end {{ printf("%d\\n", n) }}'],
        "Pass 5: starting run.",
    ),
    "bpftrace kprobe": (
        ["bpftrace", "-e",
         f'BEGIN {{ printf("READY\\n"); }} kprobe:{PATTERN} {{ @n = count(); }}'],
        "READY",
    ),
    "bpftrace kfunc": (
        ["bpftrace", "-e",
         f'BEGIN {{ printf("READY\\n"); }} kfunc:{PATTERN} {{ @n = count(); }}'],
        "READY",
    ),
}


def one_round(argv, ready_line):
    """Seconds to live and seconds from SIGINT to exit, or None."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    live = None
    for line in proc.stdout:
        if ready_line in line:
            live = time.monotonic() - started
            break
    if live is None:
        proc.wait()
        return None
    time.sleep(0.5)
    stopping = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.stdout.read()
    proc.wait()
    return live, time.monotonic() - stopping


def main():
    print(f"| tracer, `{PATTERN}` | start to live, ms | SIGINT to exit, ms | rounds |")
    print("|---|---|---|---|")
    for name, (argv, ready) in TRACERS.items():
        results = [r for r in (one_round(argv, ready) for _ in range(ROUNDS)) if r]
        if not results:
            print(f"| {name} | failed | failed | 0 |")
            continue
        live = statistics.median(r[0] for r in results) * 1000
        exit_ = statistics.median(r[1] for r in results) * 1000
        print(f"| {name} | {live:.0f} | {exit_:.0f} | {len(results)} |")


main()
