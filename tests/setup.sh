#!/usr/bin/env bash
# Installs what building and testing stap-rs needs on a fresh machine.
# Idempotent and quiet when everything is already there.
set -euo pipefail

need_apt=()
command -v bpftool >/dev/null || need_apt+=(bpftool)
command -v ip >/dev/null || need_apt+=(iproute2)
command -v cc >/dev/null || need_apt+=(gcc)   # live tests compile their trigger programs
command -v tmux >/dev/null || need_apt+=(tmux)   # tests/repl.rs drives the REPL through a pty
command -v prometheus >/dev/null || need_apt+=(prometheus)   # the fleet test scrapes stap-rs (also brings promtool)
command -v curl >/dev/null || need_apt+=(curl)   # the procfs/HTTP tests fetch /metrics as a user would
command -v dot >/dev/null || need_apt+=(graphviz)   # --callgraph -o X.svg renders with dot
command -v trace-cmd >/dev/null || need_apt+=(trace-cmd)   # the call-graph test compares with function_graph
[ -e /usr/include/x86_64-linux-gnu/sys/sdt.h ] || [ -e /usr/include/sys/sdt.h ] ||
  need_apt+=(systemtap-sdt-dev)   # the SDT marker tests build a program with <sys/sdt.h>
command -v stap >/dev/null || need_apt+=(systemtap)   # the stap.* marker tapset test runs stap -p1
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt

# BPF programs need tracefs; it is usually mounted already.
if [ ! -d /sys/kernel/tracing/events ] && [ -d /sys/kernel/tracing ]; then
  mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || true
fi
