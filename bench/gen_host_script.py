#!/usr/bin/env python3
"""Writes a host-only stap script of about N lines (default 500) to stdout,
for measuring the host JIT's compile time: stap-rs -v -p4 FILE prints it in
the Pass 4 line (there are no kernel probes, so no BPF is compiled)."""
import sys

lines = int(sys.argv[1]) if len(sys.argv) > 1 else 500
# Each function is 6 lines plus one line calling it from the begin probe.
functions = max(1, (lines - 6) // 7)
out = ["global totals, names"]
for i in range(functions):
    out += [
        f"function f{i}:long(a:long, b:long) {{",
        f"  x = a * {i + 3} + b",
        f"  if (x % 7 == {i % 7}) {{ totals[{i}, \"k{i}\"] += x }} else {{ names[x] = sprintf(\"n%d\", x) }}",
        f"  for (j = 0; j < {i % 5 + 1}; j++) x += j",
        f"  return x",
        "}",
    ]
out.append("probe begin {")
out += [f"  s += f{k}({k}, {k + 1})" for k in range(functions)]
out += [
    "  printf(\"%d\\n\", s)",
    "  foreach ([k, n] in totals- limit 3) printf(\"%d %s %d\\n\", k, n, totals[k, n])",
    "  exit()",
    "}",
]
print("\n".join(out))
