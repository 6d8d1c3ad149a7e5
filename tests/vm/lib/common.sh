# Shared settings and helpers for tests/vm/run (sourced, not executed).
# shellcheck shell=bash disable=SC2034  # globals are read by the sourcing script

# Where .debs, extracted kernels and the PVH vmlinux images are kept between runs.
VM_CACHE=${STAP_RS_VM_CACHE:-/var/tmp/stap-rs-vm}
# The kernels `tests/vm/run` boots when none is named.
VM_DEFAULT_KERNELS=(6.1 6.12)
# Marker lines the guest prints on the serial console; the host looks for them.
VM_READY_MARK='@@STAP-RS-VM-READY@@'
VM_EXIT_MARK='@@STAP-RS-VM-EXIT@@'

log() { echo "vm: $*" >&2; }
die() {
  echo "vm: error: $*" >&2
  exit 2
}

# Seconds (with fractions) since the epoch; bash 5 keeps it without forking.
now() { echo "${EPOCHREALTIME:-$(date +%s.%N)}"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

apt_lists_present() {
  [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -print -quit 2>/dev/null)" ]
}

apt_update_once() {
  if [ -z "${VM_APT_UPDATED:-}" ]; then
    log "apt-get update"
    apt-get update -qq >&2 || die "apt-get update failed"
    VM_APT_UPDATED=1
  fi
}

# Single-quotes $1 for sh.
sh_quote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
