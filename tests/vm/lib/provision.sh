# Provisioning: host tools from apt, Debian kernels fetched with
# shellcheck shell=bash disable=SC2034  # globals are read by the sourcing script
# `apt-get download` and unpacked with `dpkg-deb -x` (no install hooks run),
# and the uncompressed vmlinux extracted once for a PVH boot.
# Layout under $VM_CACHE:
#   alias-6.1                  the ABI name the alias resolved to (offline reruns)
#   debs/linux-image-*.deb     downloaded packages
#   k-<abi>/boot/vmlinuz-<abi> the unpacked package
#   k-<abi>/vmlinux            the ELF booted through its PVH entry note
#   k-<abi>/modules            the package's lib/modules/<abi> directory (symlink)
#   k-<abi>/modidx             "name path" per module, for dependency resolution
#   dbg-<abi>/vmlinux-<abi>    the kernel's DWARF (optional: `provision --dbg`),
#                              shared to the guest as /boot/vmlinux-<abi>

# The host tools the harness itself needs.
ensure_host_tools() {
  local missing=()
  command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
  [ -x /bin/busybox ] || missing+=(busybox-static)
  command -v xz >/dev/null || missing+=(xz-utils)
  command -v zstd >/dev/null || missing+=(zstd)
  command -v jq >/dev/null || missing+=(jq)
  command -v dpkg-deb >/dev/null || missing+=(dpkg)
  if [ ${#missing[@]} -gt 0 ]; then
    apt_update_once
    log "apt-get install ${missing[*]}"
    mkdir -p "$VM_CACHE"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
      >"$VM_CACHE/apt-install.log" 2>&1 || {
      tail -n 20 "$VM_CACHE/apt-install.log" >&2
      die "apt-get install ${missing[*]} failed (log: $VM_CACHE/apt-install.log)"
    }
  fi
  # busybox-static is the one that must be static: it runs before /usr is mounted.
  file_is_static /bin/busybox || die "/bin/busybox is not static (install busybox-static)"
}

file_is_static() {
  ! LC_ALL=C ldd "$1" >/dev/null 2>&1
}

# The metapackage whose Depends line names the current ABI package of an alias.
kernel_meta_package() {
  case $1 in
    6.1) echo linux-image-amd64 ;;
    *) echo "linux-image-$1-amd64" ;;
  esac
}

# alias (6.1, 6.12) -> ABI name (6.1.0-41-amd64, 6.12.57+deb12-amd64).
# Uses the alias recorded by the last provisioning unless $2 is "refresh".
resolve_kernel() {
  local alias=$1 mode=${2:-cached} meta abi
  case $alias in *-amd64) echo "$alias"; return ;; esac
  if [ "$mode" != refresh ] && [ -s "$VM_CACHE/alias-$alias" ]; then
    cat "$VM_CACHE/alias-$alias"
    return
  fi
  apt_lists_present || apt_update_once
  meta=$(kernel_meta_package "$alias")
  abi=$(apt-cache show --no-all-versions "$meta" 2>/dev/null \
    | sed -n 's/^Depends: //p' | tr ',' '\n' \
    | sed -n 's/^ *linux-image-\([^ ]*-amd64\)\( .*\)\{0,1\}$/\1/p' | head -1)
  [ -n "$abi" ] || die "cannot resolve kernel $alias: no linux-image Depends in $meta"
  mkdir -p "$VM_CACHE"
  echo "$abi" >"$VM_CACHE/alias-$alias"
  echo "$abi"
}

kernel_dir() { echo "$VM_CACHE/k-$1"; }

# Downloads and unpacks linux-image-<abi> unless already there.
fetch_kernel() {
  local abi=$1 dir debs deb
  dir=$(kernel_dir "$abi")
  [ -f "$dir/boot/vmlinuz-$abi" ] && return 0
  debs="$VM_CACHE/debs"
  mkdir -p "$debs"
  deb=$(find "$debs" -maxdepth 1 -name "linux-image-${abi}_*.deb" -print -quit)
  if [ -z "$deb" ]; then
    log "apt-get download linux-image-$abi"
    (cd "$debs" && apt-get download -qq -o APT::Sandbox::User=root "linux-image-$abi" >&2) \
      || die "apt-get download linux-image-$abi failed"
    deb=$(find "$debs" -maxdepth 1 -name "linux-image-${abi}_*.deb" -print -quit)
  fi
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp"
  dpkg-deb -x "$deb" "$dir.tmp" || die "dpkg-deb -x $deb failed"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
}

# bzImage -> vmlinux ELF. The compressed payload's place comes from the boot
# protocol header: setup_sects (0x1f1), payload_offset (0x248), payload_length (0x24c).
extract_vmlinux() {
  local image=$1 out=$2 setup_sects offset length start magic decompress
  setup_sects=$(od -An -tu1 -j $((0x1f1)) -N1 "$image" | tr -d ' ')
  [ "$setup_sects" = 0 ] && setup_sects=4
  offset=$(od -An -tu4 -j $((0x248)) -N4 "$image" | tr -d ' ')
  length=$(od -An -tu4 -j $((0x24c)) -N4 "$image" | tr -d ' ')
  start=$(((setup_sects + 1) * 512 + offset))
  magic=$(od -An -tx1 -j "$start" -N4 "$image" | tr -d ' ')
  case $magic in
    fd377a58) decompress="xz -dc" ;;
    28b52ffd) decompress="zstd -qdc" ;;
    1f8b*) decompress="gzip -dc" ;;
    *) die "unknown kernel payload compression ($magic) in $image" ;;
  esac
  # The payload may carry trailing bytes the decompressors complain about.
  tail -c +$((start + 1)) "$image" | head -c "$length" | $decompress >"$out.tmp" 2>/dev/null || true
  [ "$(head -c 4 "$out.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] \
    || die "extracting vmlinux from $image gave no ELF"
  mv "$out.tmp" "$out"
}

# Everything a boot of <abi> needs, made once: vmlinux, module index.
prepare_kernel() {
  local abi=$1 dir moddir
  fetch_kernel "$abi"
  dir=$(kernel_dir "$abi")
  if [ ! -f "$dir/vmlinux" ]; then
    log "extracting vmlinux from vmlinuz-$abi"
    extract_vmlinux "$dir/boot/vmlinuz-$abi" "$dir/vmlinux"
  fi
  if [ ! -e "$dir/modules" ]; then
    for moddir in "$dir/lib/modules/$abi" "$dir/usr/lib/modules/$abi"; do
      [ -d "$moddir" ] && ln -s "$moddir" "$dir/modules" && break
    done
    [ -e "$dir/modules" ] || die "no lib/modules/$abi in the linux-image-$abi package"
  fi
  if [ ! -s "$dir/modidx" ]; then
    find "$dir/modules/" -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst' -o -name '*.ko.gz' \
      | awk '{ n = $0; sub(/.*\//, "", n); sub(/\.ko.*/, "", n); gsub(/-/, "_", n); print n, $0 }' \
        >"$dir/modidx.tmp"
    mv "$dir/modidx.tmp" "$dir/modidx"
  fi
}

# The kernel's DWARF, from Debian's linux-image-<abi>-dbg (about 1 GB to
# download; only its vmlinux, ~350 MB, is kept), for the kernel.statement
# and `function("F@FILE")` tests, which skip without it.
fetch_kernel_dbg() {
  local abi=$1 dir debs deb
  dir="$VM_CACHE/dbg-$abi"
  [ -f "$dir/vmlinux-$abi" ] && return 0
  debs="$VM_CACHE/debs"
  mkdir -p "$debs"
  deb=$(find "$debs" -maxdepth 1 -name "linux-image-${abi}-dbg_*.deb" -print -quit)
  if [ -z "$deb" ]; then
    log "apt-get download linux-image-$abi-dbg"
    (cd "$debs" && apt-get download -qq -o APT::Sandbox::User=root "linux-image-$abi-dbg" >&2) \
      || die "apt-get download linux-image-$abi-dbg failed"
    deb=$(find "$debs" -maxdepth 1 -name "linux-image-${abi}-dbg_*.deb" -print -quit)
  fi
  log "extracting vmlinux-$abi from $(basename "$deb")"
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp"
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dir.tmp" "./usr/lib/debug/boot/vmlinux-$abi" \
    || die "no usr/lib/debug/boot/vmlinux-$abi in $deb"
  mv "$dir.tmp/usr/lib/debug/boot/vmlinux-$abi" "$dir.tmp/"
  rm -rf "$dir.tmp/usr" "$dir"
  mv "$dir.tmp" "$dir"
}

# `tests/vm/run provision [--dbg] [KERNEL...]`: installs the tools and
# (re)resolves and fetches the kernels, so a security update's new ABI is
# picked up; `--dbg` also fetches each kernel's DWARF.
provision() {
  local alias abi dbg=""
  if [ "${1:-}" = --dbg ]; then
    dbg=1
    shift
  fi
  ensure_host_tools
  apt_update_once
  [ $# -gt 0 ] || set -- "${VM_DEFAULT_KERNELS[@]}"
  for alias in "$@"; do
    abi=$(resolve_kernel "$alias" refresh)
    prepare_kernel "$abi"
    echo "$alias -> $abi ($(kernel_dir "$abi")/vmlinux)"
    if [ -n "$dbg" ]; then
      fetch_kernel_dbg "$abi"
      echo "$alias -> DWARF $VM_CACHE/dbg-$abi/vmlinux-$abi"
    fi
  done
}
