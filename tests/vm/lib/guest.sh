# One guest boot: the initramfs, the qemu command line, the console watch.
# shellcheck shell=bash disable=SC2034  # globals are read by the sourcing script

# The modules the guest's 9p mounts need, dependencies resolved from each
# module's .modinfo "depends=" (Debian's package has no modules.dep: depmod
# runs in its postinst, which dpkg-deb -x skips). veth is for the live tests'
# network namespace pairs: the guest has no modprobe to load it on demand.
VM_BASE_MODULES=(virtio_pci 9pnet_virtio 9p veth)

module_bytes() {
  case $1 in
    *.xz) xz -dc "$1" ;;
    *.zst) zstd -qdc "$1" ;;
    *.gz) gzip -dc "$1" ;;
    *) cat "$1" ;;
  esac
}

# Appends NAME and its dependencies (first) to MODULE_ORDER.
declare -A MODULE_SEEN=()
MODULE_ORDER=()
resolve_module() {
  local name=${1//-/_} kdir=$2 path dep
  [ -n "${MODULE_SEEN[$name]:-}" ] && return 0
  MODULE_SEEN[$name]=1
  path=$(awk -v n="$name" '$1 == n { print $2; exit }' "$kdir/modidx")
  if [ -z "$path" ]; then
    grep -q "/$name\.ko" "$kdir/modules/modules.builtin" 2>/dev/null \
      || log "warning: module $name is neither a module nor built in"
    return 0
  fi
  for dep in $(module_bytes "$path" | tr '\0' '\n' | sed -n 's/^depends=//p' | tr ',' ' '); do
    resolve_module "$dep" "$kdir"
  done
  MODULE_ORDER+=("$name $path")
}

# Writes the initramfs for one boot to $1. Globals read: GUEST_* (see boot_guest).
make_initramfs() {
  local out=$1 abi=$2 root entry name path
  root=$(mktemp -d "$RUN_TMP/root.XXXX")
  mkdir -p "$root"/{usr,etc,proc,sys,dev,tmp,run,root,mnt,boot,var/tmp,vmtest/mod}
  ln -s usr/bin "$root/bin"
  ln -s usr/sbin "$root/sbin"
  # /lib is a directory of links into the host's /usr/lib, so that the
  # guest kernel's own /lib/modules/<abi> (from the package) can be
  # mounted beside them: /usr is the host's, read-only, without it.
  mkdir "$root/lib"
  for entry in /usr/lib/*; do
    [ "${entry##*/}" = modules ] || ln -s "$entry" "$root/lib/${entry##*/}"
  done
  ln -s usr/lib64 "$root/lib64"
  ln -s ../run "$root/var/run"
  cp /bin/busybox "$root/vmtest/busybox"
  cp "$VM_HERE/guest/init" "$root/init"
  cp "$VM_HERE/guest/run-tests" "$root/vmtest/run-tests"
  # Debian kernels have no /proc/config.gz; the package's config is here.
  cp "$(kernel_dir "$abi")/boot/config-$abi" "$root/boot/"
  # The kernel's DWARF (its share is mounted at /vmtest/dbg) at stap's
  # /boot/vmlinux-<abi>, linked rather than mounted over /boot, which
  # would hide the config above (then no kprobe_multi is seen).
  [ -d "$VM_CACHE/dbg-$abi" ] && ln -s "/vmtest/dbg/vmlinux-$abi" "$root/boot/vmlinux-$abi"

  MODULE_SEEN=()
  MODULE_ORDER=()
  for name in "${VM_BASE_MODULES[@]}" "${EXTRA_MODULES[@]}"; do
    resolve_module "$name" "$(kernel_dir "$abi")"
  done
  : >"$root/vmtest/modules"
  for entry in "${MODULE_ORDER[@]}"; do
    name=${entry%% *} path=${entry#* }
    module_bytes "$path" >"$root/vmtest/mod/$name.ko"
    echo "$name" >>"$root/vmtest/modules"
  done

  printf '%s\n' "${GUEST_MOUNTS[@]}" >"$root/vmtest/mounts"
  printf '%s\n' "${GUEST_TMPFS[@]}" >"$root/vmtest/tmpfs"
  printf 'READY_MARK=%s\nEXIT_MARK=%s\n' "$VM_READY_MARK" "$VM_EXIT_MARK" >"$root/vmtest/marks"
  printf '%s\n' "$GUEST_CMD" >"$root/vmtest/cmd"

  (cd "$root" && find . -mindepth 1 | LC_ALL=C sort | /bin/busybox cpio -o -H newc 2>/dev/null) \
    | gzip -1 >"$out"
  rm -rf "$root"
}

# Console lines worth showing while tests run: run-tests' per-test lines,
# the guest's own errors, kernel crashes.
is_progress_line() {
  case $1 in
    "["*"/"*"] "* | *"vm-init:"* | *"run-tests:"* | *"Kernel panic"* | *"BUG:"* | *"Oops"*) return 0 ;;
    *) return 1 ;;
  esac
}

# Boots <abi> once with the initramfs $2; the console goes to $3 and, one
# line per test, to stdout. Sets BOOT_SECONDS, WALL_SECONDS, GUEST_RC.
run_qemu() {
  local abi=$1 initrd=$2 console=$3 t0 line accel
  local virtfs=() share
  for share in "${QEMU_SHARES[@]}"; do virtfs+=(-virtfs "$share"); done
  case ${STAP_RS_VM_ACCEL:-tcg} in
    # The host's /dev/kvm is kvm-pvm: stock kernels crawl and die under it.
    tcg) accel=(-accel "tcg,thread=multi" -cpu max) ;;
    # One host thread for both vCPUs. Under multi-threaded TCG, live ftrace
    # patching (kprobe_multi, fprobe, function_graph) while another vCPU runs
    # the patched code has oopsed the guest ("Oops: int3" in the patched
    # function); serialised vCPUs have not. Slower, so opt-in.
    tcg-single) accel=(-accel "tcg,thread=single" -cpu max) ;;
    kvm) accel=(-enable-kvm -cpu host) ;;
    *) die "STAP_RS_VM_ACCEL must be tcg, tcg-single or kvm" ;;
  esac
  BOOT_SECONDS="" GUEST_RC=""
  t0=$(now)
  : >"$console"
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line%$'\r'}
    printf '%s\n' "$line" >>"$console"
    case $line in
      *"$VM_READY_MARK"*) BOOT_SECONDS=$(elapsed "$t0" "$(now)") ;;
      *"$VM_EXIT_MARK="*) GUEST_RC=${line##*"$VM_EXIT_MARK="} ;;
      *) if [ "${ECHO_CONSOLE:-0}" = 1 ] || is_progress_line "$line"; then printf '  %s\n' "$line"; fi ;;
    esac
  done < <(timeout -k 5 "$VM_TIMEOUT" qemu-system-x86_64 \
    "${accel[@]}" -m "$VM_MEMORY" -smp "${VM_CPUS:-2}" \
    -nodefaults -no-user-config -display none -no-reboot \
    -chardev stdio,id=console,signal=off -serial chardev:console \
    "${virtfs[@]}" -pidfile "$RUN_TMP/qemu.pid" \
    -kernel "$(kernel_dir "$abi")/vmlinux" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 rdinit=/init quiet loglevel=3" \
    </dev/null 2>&1)
  WALL_SECONDS=$(elapsed "$t0" "$(now)")
  rm -f "$RUN_TMP/qemu.pid"
}

# A qemu still running when the harness exits (an error, Ctrl-C) is stopped.
stop_qemu() {
  local pid
  pid=$(cat "$RUN_TMP/qemu.pid" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null || true
}

# Boots kernel <alias> once and runs the sh command $3 in it (after the
# guest's setup, as root, with the shares mounted); $2 is the writable share
# (/vmtest/out in the guest) where the console log lands too. Returns
# non-zero when the guest did not report an exit status.
boot_guest() {
  local alias=$1 out=$2 abi initrd dir mode tag n=0
  GUEST_CMD=$3
  abi=$(resolve_kernel "$alias")
  prepare_kernel "$abi"
  GUEST_ABI=$abi
  GUEST_MOUNTS=() GUEST_TMPFS=() QEMU_SHARES=()
  add_share() { # host dir, guest dir, ro|rw
    tag="s$n"
    n=$((n + 1))
    mode=""
    [ "$3" = ro ] && mode=",readonly=on"
    QEMU_SHARES+=("local,path=$1,mount_tag=$tag,security_model=none,multidevs=remap$mode")
    GUEST_MOUNTS+=("$tag $2 $3")
  }
  add_share /usr /usr ro
  add_share /etc /etc ro
  # The kernel's modules where modprobe (and stap-rs, for the BTF of a
  # module that is not loaded) look for them.
  add_share "$(kernel_dir "$abi")/lib/modules/$abi" "/lib/modules/$abi" ro
  for dir in "${SAME_PATH_SHARES[@]}"; do add_share "$dir" "$dir" ro; done
  # The kernel's DWARF where `provision --dbg` fetched it; make_initramfs
  # links /boot/vmlinux-<abi> to it (the guest's / is its initramfs).
  [ -d "$VM_CACHE/dbg-$abi" ] && add_share "$VM_CACHE/dbg-$abi" /vmtest/dbg ro
  add_share "$out" /vmtest/out rw
  # Tests write into CARGO_TARGET_TMPDIR (target/tmp): give it a tmpfs.
  mkdir -p "$TARGET_DIR/tmp"
  GUEST_TMPFS=("$TARGET_DIR/tmp")

  initrd="$RUN_TMP/initrd-$alias.cpio.gz"
  make_initramfs "$initrd" "$abi"
  run_qemu "$abi" "$initrd" "$out/console.log"
  [ -n "$GUEST_RC" ]
}
