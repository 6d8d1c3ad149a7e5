#!/usr/bin/env python3
"""The per-event cost of issue #20's concurrency mechanism: two stap-rs
binaries (say, main before and after) side by side on a counting script
and on printing scripts, interleaved over several rounds.

    bench/concurrency.py [--rounds R] [--n N] LABEL=BINARY [LABEL=BINARY...]

Needs root and a built bench/workload.c (bench/run builds it into
$BENCH_OUT, default /tmp/stap-rs-bench; or pass --workload PATH). For each
script and binary, per round: the tracer starts (`-v`, its output read
from a pipe, counted and discarded), then `taskset -c 1 workload getppid
N` runs once with it and once without, and the figures are

- added ns per getppid: the workload's ns per call with the tracer minus
  without (the round's own baseline);
- in-BPF ns/run: bpftool's run_time_ns summed over every new program of
  the tracer, over the run_cnt of its busiest one (kernel.bpf_stats_enabled=1;
  the same figure as bench/bench.py's `in_bpf_ns_per_event`, so that a
  program that runs on every event beside the handler is counted too);
- peak RSS of the tracer (MiB, from wait4);
- lines: output lines delivered (printing scripts print one per hit).

Prints a markdown table of medians (with min and max) per script and
binary. No figure is asserted: this is a measurement, not a test.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import threading
import time

from bench import in_bpf_ns_per_event

PROBE = 'probe kernel.trace("syscalls:sys_enter_getppid") '
SCRIPTS = [
    ("count: x = x + 1 (atomic add)", "global x\n" + PROBE + "{ x = x + 1 }\n"),
    (
        "count: a[pid()] = a[pid()] + 1 (atomic add)",
        "global a\n" + PROBE + "{ a[pid()] = a[pid()] + 1 }\n",
    ),
    ("print: one printf", PROBE + '{ printf("E %d %s\\n", pid(), execname()) }\n'),
    ("print: two printfs (one unit)", PROBE + '{ printf("A%d", pid()); printf("B%d\\n", pid()) }\n'),
]


def prog_stats():
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True).stdout
    return {p["id"]: p for p in json.loads(out or "[]")}


def workload(path, n):
    out = subprocess.run(
        ["taskset", "-c", "1", path, "getppid", str(n)], capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip())


def one_run(binary, script, workload_path, n):
    """Figures of one tracer run, or None when it did not start."""
    base = workload(workload_path, n)
    before = set(prog_stats())
    tracer = subprocess.Popen([binary, "-v", "-e", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = [0]

    def drain():
        while chunk := tracer.stdout.read1(65536):
            lines[0] += chunk.count(b"\n")

    reader = threading.Thread(target=drain)
    reader.start()
    ready = False
    while line := tracer.stderr.readline():
        if b"Pass 5: starting run" in line:
            ready = True
            break
    if not ready:
        tracer.kill()
        reader.join()
        tracer.wait()
        return None
    with_tracer = workload(workload_path, n)
    progs = [p for i, p in prog_stats().items() if i not in before and p.get("run_cnt")]
    time.sleep(0.3)  # let the host drain the ring buffer before SIGINT
    tracer.send_signal(signal.SIGINT)
    tracer.stderr.read()
    reader.join()
    _, _, usage = os.wait4(tracer.pid, 0)
    return {
        "added": with_tracer - base,
        "bpf": in_bpf_ns_per_event(progs) if progs else float("nan"),
        "rss": usage.ru_maxrss / 1024,
        "lines": lines[0],
    }


def spread(values, digits=0):
    if not values:
        return "no data"
    fmt = "%%.%df" % digits
    return "%s (%s–%s)" % (fmt % statistics.median(values), fmt % min(values), fmt % max(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binaries", nargs="+", metavar="LABEL=BINARY")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=1_000_000)
    out = os.environ.get("BENCH_OUT", "/tmp/stap-rs-bench")
    parser.add_argument("--workload", default=os.path.join(out, "workload"))
    args = parser.parse_args()
    binaries = [b.split("=", 1) for b in args.binaries]
    subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=1"], check=True)
    results = {}
    for _ in range(args.rounds):
        for name, script in SCRIPTS:
            for label, binary in binaries:
                figures = one_run(binary, script, args.workload, args.n)
                if figures:
                    for key, value in figures.items():
                        results.setdefault((name, label), {}).setdefault(key, []).append(value)
    print("%d × getppid per run, %d rounds; median (min–max)\n" % (args.n, args.rounds))
    print("| script | stap-rs | added ns per getppid | in-BPF ns/run | peak RSS MiB | lines delivered |")
    print("|---|---|---|---|---|---|")
    for name, _ in SCRIPTS:
        for label, _ in binaries:
            r = results.get((name, label), {})
            print(
                "| %s | %s | %s | %s | %s | %s |"
                % (
                    name,
                    label,
                    spread(r.get("added", [])),
                    spread(r.get("bpf", [])),
                    spread(r.get("rss", []), 1),
                    spread(r.get("lines", [])),
                )
            )


if __name__ == "__main__":
    main()
