//! Live: the BPF backend's sample programs (`stap_lang::bpf::samples`) are
//! loaded into this machine's kernel, proving the verifier accepts them.
//! Maps are created from the object's specs, map fds patched into the
//! `ld_imm64`s, and `BPF_PROG_LOAD` issued with the program type the attach
//! kind implies. On failure the verifier log is printed.
//!
//! Needs root (CAP_BPF + CAP_PERFMON); skips with a message otherwise.
//! Uses only `stap_runtime::sys`'s bpf(2) wrappers (not the loader), so it
//! depends on nothing but the backend's `Object`.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use stap_lang::bpf::{self, Object, Options, Program, samples};
use stap_runtime::ringbuf::RingBuf;
use stap_runtime::sys::{self, ProgBtf, ProgLoad, TestRun};

/// The object's program BTF, loaded as the runtime does (BPF_BTF_LOAD).
fn load_object_btf(object: &Object) -> OwnedFd {
    let mut log = vec![0u8; 1 << 16];
    sys::btf_load(&object.btf, Some(&mut log)).unwrap_or_else(|e| {
        let end = log.iter().position(|b| *b == 0).unwrap_or(0);
        panic!(
            "BPF_BTF_LOAD: {e}\n{}",
            String::from_utf8_lossy(&log[..end])
        )
    })
}

/// Loads one program with the object's program BTF, func_info and
/// line_info (needed by kernel `foreach` callbacks).
fn load_btf(
    object: &Object,
    program: &Program,
    fds: &[OwnedFd],
) -> Result<(OwnedFd, String), String> {
    let btf = load_object_btf(object);
    let with = Some(&btf);
    load_with_log(program, fds, 4, with).or_else(|first| {
        load_with_log(program, fds, 1, with)
            .map_err(|log| format!("{first}\n--- full log (tail) ---\n{log}"))
    })
}

fn create_maps(object: &Object) -> Vec<OwnedFd> {
    object
        .maps
        .iter()
        .map(|spec| {
            let fd =
                sys::map_create(spec).unwrap_or_else(|e| panic!("BPF_MAP_CREATE {:?}: {e}", spec));
            if let bpf::MapRole::Formats(data) = &spec.role {
                fill_and_freeze(&fd, data);
            }
            fd
        })
        .collect()
}

/// The formats map: entry 0 = the bytes, then frozen (the verifier reads
/// `bpf_snprintf` formats from frozen read-only maps only).
fn fill_and_freeze(fd: &OwnedFd, data: &[u8]) {
    sys::map_update(fd.as_fd(), &0u32.to_le_bytes(), data, 0)
        .unwrap_or_else(|e| panic!("formats map update: {e}"));
    sys::map_freeze(fd.as_fd()).unwrap_or_else(|e| panic!("formats map freeze: {e}"));
}

/// Loads one program; `Err` carries the errno and the verifier log. The
/// first attempt asks only for statistics (a full log of a program with
/// bounded loops can exceed any buffer); a failure is retried with the
/// full log, whose tail (the kernel keeps the end) names the error.
fn load(program: &Program, fds: &[OwnedFd]) -> Result<(OwnedFd, String), String> {
    load_with_log(program, fds, 4, None).or_else(|first| {
        load_with_log(program, fds, 1, None)
            .map_err(|log| format!("{first}\n--- full log (tail) ---\n{log}"))
    })
}

fn load_with_log(
    program: &Program,
    fds: &[OwnedFd],
    log_level: u32,
    btf: Option<&OwnedFd>,
) -> Result<(OwnedFd, String), String> {
    let mut insns = program.insns.clone();
    for &(at, map) in &program.map_relocs {
        let mut bytes = insns[at].to_le_bytes();
        bytes[4..8].copy_from_slice(&fds[map].as_raw_fd().to_le_bytes());
        insns[at] = u64::from_le_bytes(bytes);
    }
    let request = ProgLoad {
        prog_type: program.attach.program_type(),
        expected_attach_type: 0,
        name: &program.name,
        insns: &insns,
        attach_btf_id: 0,
        attach_btf_obj: None,
    };
    let func_info = bpf::btf::FuncInfo::encode_all(&program.func_info);
    let line_info = bpf::btf::LineInfo::encode_all(&program.line_info);
    let btf = btf.map(|fd| ProgBtf {
        fd: fd.as_fd(),
        func_info: &func_info,
        func_info_rec_size: bpf::btf::FUNC_INFO_BYTES,
        line_info: &line_info,
        line_info_rec_size: bpf::btf::LINE_INFO_BYTES,
    });
    let mut log = vec![0u8; 4 << 20];
    let result = sys::prog_load_with_btf(&request, btf.as_ref(), Some((log_level, &mut log)));
    let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
    let text = String::from_utf8_lossy(&log[..end]).into_owned();
    match result {
        Ok(fd) => Ok((fd, text)),
        Err(e) => Err(format!("{e}\n{text}")),
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn options() -> Options {
    Options {
        max_string_len: 512,
        test_out_of_bounds: false,
        cpus: bpf::DEFAULT_CPUS,
        tracepoint_mechanism: Default::default(),
        kernel: Default::default(),
        local_time: Default::default(),
    }
}

/// The verifier's "processed N insns" figure, for the report line.
fn processed(log: &str) -> &str {
    log.lines()
        .find(|line| line.starts_with("processed"))
        .unwrap_or("")
}

#[test]
fn every_sample_passes_the_verifier() {
    if !is_root() {
        eprintln!("skipped: loading BPF programs needs root");
        return;
    }
    let mut failures = Vec::new();
    for sample in samples::all(512) {
        let object = bpf::compile(&sample.module, &options())
            .unwrap_or_else(|e| panic!("{}: compile failed: {e:?}", sample.name));
        let fds = create_maps(&object);
        for program in &object.programs {
            match load(program, &fds) {
                Ok((_, log)) => eprintln!(
                    "{}: loaded {} insns; {}",
                    sample.name,
                    program.insns.len(),
                    processed(&log)
                ),
                Err(error) => {
                    let listing = bpf::listing(&object, &sample.map);
                    failures.push(format!("{}: {error}\n{listing}", sample.name));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn small_max_string_len_also_loads() {
    if !is_root() {
        eprintln!("skipped: loading BPF programs needs root");
        return;
    }
    for sample in samples::all(64) {
        let options = Options {
            max_string_len: 64,
            test_out_of_bounds: false,
            cpus: bpf::DEFAULT_CPUS,
            tracepoint_mechanism: Default::default(),
            kernel: Default::default(),
            local_time: Default::default(),
        };
        let object = bpf::compile(&sample.module, &options).expect("compiles");
        let fds = create_maps(&object);
        for program in &object.programs {
            if let Err(error) = load(program, &fds) {
                panic!("{} (MAXSTRINGLEN=64): {error}", sample.name);
            }
        }
    }
}

#[test]
fn verifier_rejection_maps_back_to_the_statement() {
    if !is_root() {
        eprintln!("skipped: loading BPF programs needs root");
        return;
    }
    let sample = samples::all(512)
        .into_iter()
        .find(|s| s.name == "counter")
        .unwrap();
    let options = Options {
        test_out_of_bounds: true,
        ..options()
    };
    let object = bpf::compile(&sample.module, &options).expect("compiles");
    let fds = create_maps(&object);
    let program = &object.programs[0];
    let error = load(program, &fds).expect_err("the out-of-bounds read must be rejected");
    // The verifier names the failing instruction as its last "N: (..)" line.
    let failing = error
        .lines()
        .filter_map(|line| line.split(':').next()?.trim().parse::<usize>().ok())
        .next_back()
        .expect("the log names an instruction");
    let span = program
        .lines
        .iter()
        .rev()
        .find(|(at, _)| *at <= failing)
        .map(|(_, span)| *span)
        .expect("a line entry before the failing instruction");
    assert_eq!(
        sample.map.text(span),
        "drops[$location] <<< 1",
        "verifier log:\n{error}"
    );
}

// ---------------------------------------------------------------------------
// Running programs: BPF_PROG_TEST_RUN executes a raw-tracepoint program in
// this thread's context with a chosen ctx[], so the emitted code's results
// (maps, ring-buffer records) can be checked, not just its acceptance.
// ---------------------------------------------------------------------------

struct Running {
    object: Object,
    fds: Vec<OwnedFd>,
    program: OwnedFd,
    ring: Ring,
}

impl Running {
    fn start(sample: &samples::Sample) -> Running {
        let object = bpf::compile(&sample.module, &options()).expect("compiles");
        let fds = create_maps(&object);
        let (program, _) = load(&object.programs[0], &fds).unwrap_or_else(|e| panic!("{e}"));
        let events = role_index(&object, |r| matches!(r, bpf::MapRole::Events));
        let ring = Ring::new(&fds[events], object.maps[events].max_entries as usize);
        let running = Running {
            object,
            fds,
            program,
            ring,
        };
        running.set_run_flag();
        running
    }

    /// Sets the run flag, as the host does after the begin probes.
    fn set_run_flag(&self) {
        let control = role_index(&self.object, |r| matches!(r, bpf::MapRole::Control));
        // The whole value: sys checks buffers against the map's value size
        // (a shorter one would have the kernel read past it).
        let mut value = vec![0u8; self.object.maps[control].value_size as usize];
        value[..8].copy_from_slice(&1u64.to_le_bytes());
        self.update(control, &0u32.to_le_bytes(), &value);
    }

    fn update(&self, map: usize, key: &[u8], value: &[u8]) {
        sys::map_update(self.fds[map].as_fd(), key, value, 0)
            .unwrap_or_else(|e| panic!("map update: {e}"));
    }

    fn lookup(&self, map: usize, key: &[u8]) -> Option<Vec<u8>> {
        let spec = &self.object.maps[map];
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) * 4;
        let mut value = vec![0u8; spec.value_size as usize * cpus];
        let found = sys::map_lookup(self.fds[map].as_fd(), key, &mut value)
            .unwrap_or_else(|e| panic!("map lookup: {e}"));
        found.then(|| {
            value.truncate(spec.value_size as usize);
            value
        })
    }

    fn global(&self, id: u32) -> usize {
        role_index(&self.object, |r| {
            *r == bpf::MapRole::Global(stap_lang::ir::GlobalId(id))
        })
    }

    /// Runs the program once with `args` as the raw tracepoint's ctx[], in
    /// this thread's context.
    fn run(&self, args: &[u64]) {
        self.run_with(args, false)
    }

    /// Runs it on CPU 0 (`BPF_F_TEST_RUN_ON_CPU`), so per-CPU state is
    /// predictable; the task is then whatever CPU 0 was running.
    fn run_on_cpu0(&self, args: &[u64]) {
        self.run_with(args, true)
    }

    fn run_with(&self, args: &[u64], on_cpu0: bool) {
        self.run_on(args, on_cpu0.then_some(0))
    }

    /// Runs it on `cpu` when given, else wherever the caller runs.
    fn run_on(&self, args: &[u64], cpu: Option<u32>) {
        let run = TestRun {
            ctx: args,
            cpu,
            ..TestRun::default()
        };
        sys::prog_test_run(self.program.as_fd(), &run)
            .unwrap_or_else(|e| panic!("BPF_PROG_TEST_RUN: {e}"));
    }
}

fn role_index(object: &Object, want: impl Fn(&bpf::MapRole) -> bool) -> usize {
    object
        .maps
        .iter()
        .position(|m| want(&m.role))
        .expect("map exists")
}

/// The events ring buffer, read with the runtime's own consumer.
struct Ring(std::cell::RefCell<RingBuf>);

impl Ring {
    fn new(fd: &OwnedFd, size: usize) -> Ring {
        let ring = RingBuf::new(fd.as_fd(), size as u32).expect("mapping the ring buffer");
        Ring(std::cell::RefCell::new(ring))
    }

    /// Every record written since the last drain, in order.
    fn drain(&self) -> Vec<Vec<u8>> {
        let mut records = Vec::new();
        self.0
            .borrow_mut()
            .consume(u64::MAX, |bytes| records.push(bytes.to_vec()))
            .expect("reading the ring buffer");
        records
    }
}

fn sample(name: &str) -> samples::Sample {
    samples::all(512)
        .into_iter()
        .find(|s| s.name == name)
        .expect("sample exists")
}

fn long_at(bytes: &[u8], slot: usize) -> i64 {
    i64::from_le_bytes(bytes[slot * 8..slot * 8 + 8].try_into().unwrap())
}

fn my_comm() -> String {
    std::fs::read_to_string("/proc/thread-self/comm")
        .unwrap()
        .trim_end()
        .to_string()
}

#[test]
fn division_is_signed_and_reports_zero_divisors() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let sample = sample("division");
    let running = Running::start(&sample);
    let ratio = running.global(0);
    for (a, b) in [
        (100i64, 7i64),
        (-100, 7),
        (100, -7),
        (-100, -7),
        (i64::MIN, -1),
        (-3, 1000),
    ] {
        running.run(&[0, a as u64, b as u64, 0]);
        let value = running.lookup(ratio, &0u32.to_le_bytes()).unwrap();
        let expected = a.wrapping_div(b).wrapping_rem(7);
        assert_eq!(long_at(&value, 0), expected, "({a} / {b}) % 7");
    }
    assert!(running.ring.drain().is_empty());
    running.run(&[0, 5, 0, 0]);
    let records = running.ring.drain();
    assert_eq!(records.len(), 1);
    let record = bpf::records::decode(&records[0], &sample.module, 512).unwrap();
    match record.body {
        bpf::records::RecordBody::Error { kind, span } => {
            assert_eq!(kind, bpf::records::ErrorKind::DivisionByZero);
            assert_eq!(sample.map.text(span), "$location / $reason");
        }
        other => panic!("expected an error record, got {other:?}"),
    }
}

#[test]
fn printf_record_carries_string_long_and_symbol() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let sample = sample("printf");
    let running = Running::start(&sample);
    running.run(&[0, 0, 0xffff_ffff_8100_0000]);
    let records = running.ring.drain();
    assert_eq!(records.len(), 1);
    let record = bpf::records::decode(&records[0], &sample.module, 512).unwrap();
    let bpf::records::RecordBody::Printf { args, .. } = record.body else {
        panic!("expected printf, got {:?}", record.body);
    };
    assert_eq!(args[0], bpf::records::Arg::Str(my_comm().as_bytes()));
    assert_eq!(args[1], bpf::records::Arg::Long(std::process::id() as i64));
    assert_eq!(
        args[2],
        bpf::records::Arg::Symbol {
            addr: 0xffff_ffff_8100_0000,
            how: stap_lang::ir::SymbolText::Name
        }
    );
}

#[test]
fn concat_store_and_compare() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let sample = sample("concat");
    let running = Running::start(&sample);
    running.run(&[0, 0, 0]);
    let last = running
        .lookup(running.global(0), &0u32.to_le_bytes())
        .unwrap();
    let expected = format!("{}-exec", my_comm());
    assert_eq!(&last[..expected.len()], expected.as_bytes());
    assert!(last[expected.len()..].iter().all(|b| *b == 0), "NUL padded");
    let count = running
        .lookup(running.global(1), &0u32.to_le_bytes())
        .unwrap();
    assert_eq!(long_at(&count, 0), 0, "the comm is not bash");
}

#[test]
fn loop_with_ticks_and_map_set() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let sample = sample("while_loop");
    let running = Running::start(&sample);
    running.run(&[0, 0, 0, 0]);
    let pid = std::process::id() as u64;
    let steps = running
        .lookup(running.global(0), &pid.to_le_bytes())
        .unwrap();
    assert_eq!(long_at(&steps, 0), 10);
}

#[test]
fn spilled_longs_keep_their_values() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let sample = sample("many_longs");
    let running = Running::start(&sample);
    running.run(&[1000, 200, 30, 4]);
    let total = running
        .lookup(running.global(0), &0u32.to_le_bytes())
        .unwrap();
    let pid = std::process::id() as i64;
    // cpu() is 0 or 1 here: the sum is exact up to the CPU number.
    let rest = long_at(&total, 0) - 1234 - pid;
    assert!((0..1024).contains(&rest), "total {}", long_at(&total, 0));
}

#[test]
fn kernel_read_fault_reports_the_address() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let sample = sample("kernel_string");
    let running = Running::start(&sample);
    running.run(&[0, 0, 0x1000]);
    let records = running.ring.drain();
    assert_eq!(records.len(), 1);
    let record = bpf::records::decode(&records[0], &sample.module, 512).unwrap();
    match record.body {
        bpf::records::RecordBody::Error { kind, span } => {
            assert_eq!(kind, bpf::records::ErrorKind::KernelRead(0x1060));
            assert_eq!(sample.map.text(span), "$bprm->filename");
        }
        other => panic!("expected an error record, got {other:?}"),
    }
}

#[test]
fn statistics_match_the_host_arithmetic() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    use stap_lang::bpf::layout::StatLayout;
    use stap_runtime::host::stats::StatShape;
    let sample = sample("hist_log");
    let running = Running::start(&sample);
    let values = [
        0i64,
        1,
        2,
        3,
        -1,
        -5,
        24,
        25,
        100,
        101,
        -100,
        -150,
        1000,
        i64::MIN,
        i64::MAX,
    ];
    for v in values {
        running.run_on_cpu0(&[0, 0, v as u64, 0]);
    }
    let map = running.global(0);
    let spec = &running.object.maps[map];
    let mut raw = vec![0u8; spec.value_size as usize * possible_cpus()];
    let key = 0u32.to_le_bytes();
    let found = sys::map_lookup(running.fds[map].as_fd(), &key, &mut raw).expect("lookup");
    assert!(found);
    let stap_lang::ir::Storage::Stats { needs, .. } = &sample.module.globals[0].storage else {
        unreachable!()
    };
    // Every run was on CPU 0: its slots must be exactly what the host's
    // statistics code computes for the same samples.
    let shape = StatShape {
        layout: StatLayout::new(needs),
        shift: 0,
    };
    let mut expected = shape.empty();
    for v in values {
        shape.add(&mut expected, v);
    }
    let cpu0: Vec<i64> = (0..shape.layout.slots as usize)
        .map(|slot| long_at(&raw, slot))
        .collect();
    assert_eq!(cpu0, expected);
}

fn possible_cpus() -> usize {
    // "0-1" or "0": the highest index plus one.
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
    let last = text.trim().rsplit(['-', ',']).next().unwrap();
    last.parse::<usize>().unwrap() + 1
}

fn kallsyms_address(name: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap();
    text.lines()
        .find_map(|line| {
            let mut parts = line.split_whitespace();
            let addr = parts.next()?;
            let _kind = parts.next()?;
            (parts.next()? == name).then(|| u64::from_str_radix(addr, 16).ok())?
        })
        .expect("symbol in kallsyms")
}

fn c_string(bytes: &[u8]) -> &str {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    std::str::from_utf8(&bytes[..end]).unwrap()
}

#[test]
fn sprintf_and_symname_format_in_the_kernel() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let sample = sample("sprintf");
    let running = Running::start(&sample);
    let tcp_v4_rcv = kallsyms_address("tcp_v4_rcv");
    running.run(&[0, tcp_v4_rcv + 0x10, 0x2a, 0]);
    let label = running
        .lookup(running.global(0), &0u32.to_le_bytes())
        .unwrap();
    assert_eq!(
        c_string(&label),
        format!("{}-{}-2a", my_comm(), std::process::id())
    );
    assert!(label[c_string(&label).len()..].iter().all(|b| *b == 0));
    let sym = running
        .lookup(running.global(1), &0u32.to_le_bytes())
        .unwrap();
    assert_eq!(c_string(&sym), "tcp_v4_rcv");
}

// ---------------------------------------------------------------------------
// Real scripts: elaborated against this machine's kernel, lowered by
// `ir::lower`, compiled and loaded.
// ---------------------------------------------------------------------------

/// Elaborates and lowers `script` against the running kernel.
fn lower_script(script: &str) -> (stap_lang::source::SourceMap, stap_lang::ir::Module) {
    let kernel = stap_runtime::kernel::BtfKernel::open_default().expect("kernel BTF");
    let (module, map) = stap_lang::testing::lower_script(script, &kernel);
    (map, module)
}

const SCRIPTS: &[(&str, &str)] = &[
    (
        "kernel_foreach.stp",
        "global seen, names\nprobe kernel.trace(\"sched:sched_switch\") {\n  seen[$next->pid] += 1\n  names[$next->pid, execname()] = $prev->pid\n  if (seen[$next->pid] == 3) {\n    n = 0\n    s = 0\n    foreach ([p] in seen limit 4) {\n      n++\n      s += p + seen[p]\n      if (s > 1000000) break\n    }\n    foreach (v = [q, c] in names) {\n      if (c == \"swapper/0\") continue\n      s += v + q + strlen(c)\n    }\n    printf(\"%d %d\\n\", n, s)\n  }\n}\n",
    ),
    (
        "exec.stp",
        "probe kernel.trace(\"sched:sched_process_exec\") {\n  printf(\"%s %d %s\\n\", execname(), pid(), kernel_string($bprm->filename))\n}\n",
    ),
    (
        "openat.stp",
        "global opens\nprobe kernel.trace(\"syscalls:sys_enter_openat\") {\n  opens[execname(), user_string($filename)]++\n}\n",
    ),
    (
        "profile.stp",
        "global samples\nprobe timer.profile {\n  samples[cpu()] <<< 1\n}\n",
    ),
    (
        "loop.stp",
        "probe kernel.trace(\"sched:sched_switch\") {\n  x = 0\n  while (x < 100) x += 3\n  if (x % 7 == 2) printf(\"%d\\n\", x / -3)\n}\n",
    ),
    (
        "sprintf.stp",
        "global names\nprobe kernel.trace(\"kfree_skb\") {\n  names[sprintf(\"%s-%d-%x\", execname(), pid(), $reason)]++\n  if (symname($location) == \"tcp_v4_rcv\") printf(\"tcp %s\\n\", symdata($location))\n}\n",
    ),
    (
        "stats.stp",
        "global lat\nprobe kernel.trace(\"sched:sched_switch\") {\n  lat[$prev->pid] <<< $prev->prio\n}\nprobe end {\n  foreach (p in lat) printf(\"%d %d %d\\n\", p, @variance(lat[p], 2), @max(lat[p]))\n  print(@hist_log(lat[0]))\n}\n",
    ),
];

#[test]
fn lowered_scripts_pass_the_verifier() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let drops = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/drops.stp"
    ))
    .unwrap();
    let mut scripts: Vec<(&str, String)> = vec![("drops.stp", drops)];
    scripts.extend(SCRIPTS.iter().map(|(n, s)| (*n, s.to_string())));
    let mut failures = Vec::new();
    for (name, script) in &scripts {
        let (map, module) = lower_script(script);
        let object = match bpf::compile_with_source(&module, &options(), &map) {
            Ok(object) => object,
            Err(diags) => {
                failures.push(format!(
                    "{name}: {}",
                    stap_lang::diag::render_plain(&map, &diags)
                ));
                continue;
            }
        };
        assert!(!object.programs.is_empty(), "{name}: no kernel programs");
        let fds = create_maps(&object);
        for program in &object.programs {
            match load_btf(&object, program, &fds) {
                Ok((_, log)) => eprintln!(
                    "{name}/{}: loaded {} insns; {}",
                    program.name,
                    program.insns.len(),
                    processed(&log)
                ),
                Err(error) => {
                    let tail: Vec<&str> = error.lines().rev().take(40).collect();
                    let tail: Vec<&str> = tail.into_iter().rev().collect();
                    failures.push(format!(
                        "{name}/{}: {}\n{}",
                        program.name,
                        tail.join("\n"),
                        bpf::listing(&object, &map)
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn statistics_are_extracted_over_every_cpu() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let sample = sample("stat_get");
    let running = Running::start(&sample);
    let out = running.global(1);
    let values = [7i64, -3, 12, 5, -20, 9];
    for (i, v) in values.iter().enumerate() {
        // Alternate CPU 0 and this thread's CPU so the values spread.
        if i % 2 == 0 {
            running.run_on_cpu0(&[0, 0, *v as u64, 0]);
        } else {
            running.run(&[0, 0, *v as u64, 0]);
        }
    }
    let read = |slot: u64| long_at(&running.lookup(out, &slot.to_le_bytes()).unwrap(), 0);
    let sum: i64 = values.iter().sum();
    assert_eq!(read(0), values.len() as i64);
    assert_eq!(read(1), sum);
    assert_eq!(read(2), -20);
    assert_eq!(read(3), 12);
    assert_eq!(read(4), sum / values.len() as i64);
}

#[test]
fn extraction_past_the_compiled_cpu_count_is_an_error() {
    if !is_root() || possible_cpus() < 2 {
        eprintln!("skipped: needs root and two CPUs");
        return;
    }
    let sample = sample("stat_get");
    let options = Options {
        cpus: 1,
        ..options()
    };
    let object = bpf::compile(&sample.module, &options).unwrap();
    let fds = create_maps(&object);
    let (program, _) = load(&object.programs[0], &fds).unwrap();
    let events = role_index(&object, |r| matches!(r, bpf::MapRole::Events));
    let running = Running {
        ring: Ring::new(&fds[events], object.maps[events].max_entries as usize),
        object,
        fds,
        program,
    };
    running.set_run_flag();
    running.run(&[0, 0, 5, 0]);
    let records = running.ring.drain();
    assert_eq!(records.len(), 1);
    let record = bpf::records::decode(&records[0], &sample.module, 512).unwrap();
    assert!(
        matches!(
            record.body,
            bpf::records::RecordBody::Error {
                kind: bpf::records::ErrorKind::TooManyCpus,
                ..
            }
        ),
        "{record:?}"
    );
}

/// A kernel `foreach` (a `bpf_for_each_map_elem` callback) run in the
/// kernel: the probe fills arrays on one call, walks them on the next, and
/// the printf records carry what the loops computed.
#[test]
fn kernel_foreach_walks_the_map_in_the_kernel() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let script = "global a, b\nprobe kernel.trace(\"raw_syscalls:sys_enter\") {\n  if ($id == 1000) {\n    a[10] = 1; a[20] = 2; a[30] = 3\n    b[\"x\", 7] = 5; b[\"yy\", 8] = 6\n  }\n  if ($id == 2000) {\n    n = 0; s = 0; t = 0; l = 0; found = 0\n    foreach ([k] in a) { n++; s += k * 100 + a[k] }\n    foreach (v = [k] in a) t += v\n    foreach ([k] in a limit 2) l++\n    foreach ([k] in a) { if (k == 20) { found = k; break } }\n    u = 0\n    foreach (w = [name, m] in b) u += strlen(name) * 1000 + m * 10 + w\n    printf(\"%d %d %d %d %d %d\\n\", n, s, t, l, found, u)\n  }\n  if ($id == 3000) {\n    foreach ([k] in a) if (k == 20) next\n    printf(\"after\\n\")\n  }\n}\n";
    let (map, module) = lower_script(script);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", stap_lang::diag::render_plain(&map, &d)));
    assert!(object.programs[0].needs_btf(), "the loops are callbacks");
    let fds = create_maps(&object);
    let (program, log) = load_btf(&object, &object.programs[0], &fds).unwrap_or_else(|e| {
        panic!("{e}\n{}", bpf::listing(&object, &map));
    });
    eprintln!("kernel foreach: {}", processed(&log));
    let events = role_index(&object, |r| matches!(r, bpf::MapRole::Events));
    let running = Running {
        ring: Ring::new(&fds[events], object.maps[events].max_entries as usize),
        object,
        fds,
        program,
    };
    running.set_run_flag();
    running.run(&[0, 1000]);
    running.run(&[0, 2000]);
    running.run(&[0, 3000]);
    let records = running.ring.drain();
    assert_eq!(records.len(), 1, "`next` inside the loop ends the probe");
    let record = bpf::records::decode(&records[0], &module, 512).unwrap();
    let bpf::records::RecordBody::Printf { args, .. } = record.body else {
        panic!("{record:?}");
    };
    let longs: Vec<i64> = args
        .iter()
        .map(|a| match a {
            bpf::records::Arg::Long(v) => *v,
            other => panic!("{other:?}"),
        })
        .collect();
    // "x",7 → 1000 + 70 + 5; "yy",8 → 2000 + 80 + 6.
    assert_eq!(longs, vec![3, 6006, 6, 2, 20, 3161]);
}

/// Script functions with a `foreach`, inlined twice each into one probe:
/// each copy is its own loop and callback (the copies share iterator ids),
/// and a `return` inside the loop leaves it with the value.
#[test]
fn kernel_foreach_in_a_function_inlined_twice() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let script = "global a\nfunction walk(m) {\n  s = 0\n  foreach ([k] in a) s += k * m\n  return s\n}\nfunction find(x) {\n  foreach ([k] in a) if (k == x) return k * 100\n  return -1\n}\nprobe kernel.trace(\"raw_syscalls:sys_enter\") {\n  if ($id == 1000) { a[1] = 1; a[2] = 1 }\n  if ($id == 2000) printf(\"%d %d %d %d\\n\", walk(1), walk(10), find(2), find(5))\n}\n";
    let (map, module) = lower_script(script);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", stap_lang::diag::render_plain(&map, &d)));
    assert_eq!(
        object.programs[0].func_info.len(),
        6,
        "four callbacks and the output flush subprogram"
    );
    let fds = create_maps(&object);
    let (program, _) = load_btf(&object, &object.programs[0], &fds)
        .unwrap_or_else(|e| panic!("{e}\n{}", bpf::listing(&object, &map)));
    let events = role_index(&object, |r| matches!(r, bpf::MapRole::Events));
    let running = Running {
        ring: Ring::new(&fds[events], object.maps[events].max_entries as usize),
        object,
        fds,
        program,
    };
    running.set_run_flag();
    running.run(&[0, 1000]);
    running.run(&[0, 2000]);
    let records = running.ring.drain();
    assert_eq!(records.len(), 1);
    let record = bpf::records::decode(&records[0], &module, 512).unwrap();
    let bpf::records::RecordBody::Printf { args, .. } = record.body else {
        panic!("{record:?}");
    };
    assert_eq!(
        args,
        vec![
            bpf::records::Arg::Long(3),
            bpf::records::Arg::Long(30),
            bpf::records::Arg::Long(200),
            bpf::records::Arg::Long(-1)
        ]
    );
}

/// A kernel that refuses the program BTF (here: a blob with a broken
/// magic): programs without callbacks still load; one with a kernel
/// `foreach` fails, saying why.
#[test]
fn refused_program_btf_fails_only_programs_with_callbacks() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let plain = "global a\nprobe kernel.trace(\"raw_syscalls:sys_enter\") { a[$id]++ }\n";
    let looping = "global a\nprobe kernel.trace(\"raw_syscalls:sys_enter\") {\n  a[$id]++\n  foreach ([k] in a) n++\n  printf(\"%d\\n\", n)\n}\n";
    for (script, needs) in [(plain, false), (looping, true)] {
        let (map, module) = lower_script(script);
        let mut object = bpf::compile_with_source(&module, &options(), &map).unwrap();
        assert_eq!(object.programs[0].needs_btf(), needs);
        object.btf[0] ^= 0xff;
        match stap_runtime::load::load(&object) {
            Ok(_) => assert!(!needs, "a callback cannot load without BTF"),
            Err(error) => {
                assert!(needs, "{error}");
                let text = error.to_string();
                eprintln!("{text}");
                assert!(
                    text.contains("needs program BTF") && text.contains("BPF_BTF_LOAD"),
                    "{text}"
                );
            }
        }
    }
}

/// Each iteration of a kernel `foreach` is a MAXACTION tick: past the
/// limit the probe stops with stap's error, inside the callback.
#[test]
fn kernel_foreach_iterations_count_towards_maxaction() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let script = "global a\nprobe kernel.trace(\"raw_syscalls:sys_enter\") {\n  if ($id == 1000) { a[1] = 1; a[2] = 2; a[3] = 3; a[4] = 4 }\n  if ($id == 2000) {\n    foreach ([k] in a) n++\n    printf(\"%d\\n\", n)\n  }\n}\n";
    let (map, mut module) = lower_script(script);
    module.limits.max_action = 2;
    let object = bpf::compile_with_source(&module, &options(), &map).unwrap();
    let fds = create_maps(&object);
    let (program, _) =
        load_btf(&object, &object.programs[0], &fds).unwrap_or_else(|e| panic!("{e}"));
    let events = role_index(&object, |r| matches!(r, bpf::MapRole::Events));
    let running = Running {
        ring: Ring::new(&fds[events], object.maps[events].max_entries as usize),
        object,
        fds,
        program,
    };
    running.set_run_flag();
    running.run(&[0, 1000]);
    running.run(&[0, 2000]);
    let records = running.ring.drain();
    assert_eq!(
        records.len(),
        1,
        "the error ends the probe before its printf"
    );
    let record = bpf::records::decode(&records[0], &module, 512).unwrap();
    assert!(
        matches!(
            record.body,
            bpf::records::RecordBody::Error {
                kind: bpf::records::ErrorKind::MaxAction,
                ..
            }
        ),
        "{record:?}"
    );
}

/// `delete` of whole arrays in the kernel: a hash array, an LRU array, a
/// statistics array (per-CPU hash, through the delete callback) and a
/// scalar statistic (zeroed per CPU); the next call counts what is left.
#[test]
fn kernel_delete_empties_arrays_in_the_kernel() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let script = "global a, b%[16], s, t\nprobe kernel.trace(\"raw_syscalls:sys_enter\") {\n  if ($id == 1000) {\n    a[1] = 1; a[2] = 2; a[3] = 3\n    b[\"x\"] = 1; b[\"y\"] = 2\n    s[1] <<< 5; s[2] <<< 6\n    t <<< 7; t <<< 8\n  }\n  if ($id == 2000 || $id == 4000) {\n    n = 0; m = 0; k = 0\n    foreach ([x] in a) n++\n    foreach ([y] in b) m++\n    foreach ([z] in s) k++\n    printf(\"%d %d %d %d\\n\", n, m, k, @count(t))\n  }\n  if ($id == 3000) { delete a; delete b; delete s; delete t }\n}\n";
    let (map, module) = lower_script(script);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", stap_lang::diag::render_plain(&map, &d)));
    assert!(object.programs[0].needs_btf(), "delete uses a callback");
    let fds = create_maps(&object);
    let (program, log) = load_btf(&object, &object.programs[0], &fds).unwrap_or_else(|e| {
        panic!("{e}\n{}", bpf::listing(&object, &map));
    });
    eprintln!("kernel delete: {}", processed(&log));
    let events = role_index(&object, |r| matches!(r, bpf::MapRole::Events));
    let running = Running {
        ring: Ring::new(&fds[events], object.maps[events].max_entries as usize),
        object,
        fds,
        program,
    };
    running.set_run_flag();
    running.run(&[0, 1000]);
    running.run(&[0, 2000]);
    running.run(&[0, 3000]);
    running.run(&[0, 4000]);
    let records = running.ring.drain();
    let lines: Vec<Vec<i64>> = records
        .iter()
        .map(|bytes| {
            let record = bpf::records::decode(bytes, &module, 512).unwrap();
            let bpf::records::RecordBody::Printf { args, .. } = record.body else {
                panic!("{record:?}");
            };
            args.iter()
                .map(|a| match a {
                    bpf::records::Arg::Long(v) => *v,
                    other => panic!("{other:?}"),
                })
                .collect()
        })
        .collect();
    assert_eq!(lines, vec![vec![3, 2, 2, 2], vec![0, 0, 0, 0]]);
}

/// `print(@hist_*(...))` in a kernel probe: the kernel accepts the record
/// code, and each record names the statistic and carries the element's key.
#[test]
fn kernel_print_hist_sends_the_key() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let script = "global s, n, t\nprobe kernel.trace(\"raw_syscalls:sys_enter\") {\n  if ($id == 1000) {\n    s[$id] <<< 5\n    n[\"cat\", 7] <<< 3\n    t <<< 1\n    print(@hist_log(s[$id]))\n    println(@hist_linear(n[\"cat\", 7], 0, 10, 2))\n    print(@hist_log(t))\n  }\n}\n";
    let (map, module) = lower_script(script);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", stap_lang::diag::render_plain(&map, &d)));
    let fds = create_maps(&object);
    let (program, log) = load_btf(&object, &object.programs[0], &fds).unwrap_or_else(|e| {
        panic!("{e}\n{}", bpf::listing(&object, &map));
    });
    eprintln!("kernel print hist: {}", processed(&log));
    let events = role_index(&object, |r| matches!(r, bpf::MapRole::Events));
    let running = Running {
        ring: Ring::new(&fds[events], object.maps[events].max_entries as usize),
        object,
        fds,
        program,
    };
    running.set_run_flag();
    running.run(&[0, 1000]);
    let records = running.ring.drain();
    let global = |name: &str| {
        stap_lang::ir::GlobalId(module.globals.iter().position(|g| g.name == name).unwrap() as u32)
    };
    let decoded: Vec<bpf::records::RecordBody<'_>> = records
        .iter()
        .map(|bytes| bpf::records::decode(bytes, &module, 512).unwrap().body)
        .collect();
    use bpf::records::{Arg, RecordBody};
    assert_eq!(decoded.len(), 4, "{decoded:?}");
    assert_eq!(
        decoded[0],
        RecordBody::Hist {
            global: global("s"),
            linear: false,
            keys: vec![Arg::Long(1000)]
        }
    );
    assert_eq!(
        decoded[1],
        RecordBody::Hist {
            global: global("n"),
            linear: true,
            keys: vec![Arg::Str(b"cat"), Arg::Long(7)]
        }
    );
    assert!(
        matches!(decoded[2], RecordBody::Printf { .. }),
        "println's newline"
    );
    assert_eq!(
        decoded[3],
        RecordBody::Hist {
            global: global("t"),
            linear: false,
            keys: vec![]
        }
    );
}

/// `@variance` in a kernel probe combines the per-CPU Welford states
/// exactly as the host does (`StatShape::aggregate`), with and without a
/// shift, over samples spread across the CPUs.
#[test]
fn kernel_variance_matches_the_host_combination() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    use stap_lang::bpf::layout::StatLayout;
    use stap_runtime::host::stats::StatShape;
    let script = "global x, y\nprobe kernel.trace(\"raw_syscalls:sys_enter\") {\n  if ($id < 100000) { x <<< $id - 3000; y <<< $id - 3000 }\n  if ($id == 200000) printf(\"%d %d %d\\n\", @variance(x), @variance(y, 2), @count(x))\n}\n";
    let (map, module) = lower_script(script);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", stap_lang::diag::render_plain(&map, &d)));
    let fds = create_maps(&object);
    let (program, log) = load_btf(&object, &object.programs[0], &fds).unwrap_or_else(|e| {
        panic!("{e}\n{}", bpf::listing(&object, &map));
    });
    eprintln!("kernel variance: {}", processed(&log));
    let events = role_index(&object, |r| matches!(r, bpf::MapRole::Events));
    let running = Running {
        ring: Ring::new(&fds[events], object.maps[events].max_entries as usize),
        object,
        fds,
        program,
    };
    running.set_run_flag();
    let cpus = possible_cpus().min(2);
    let samples: [u64; 9] = [3001, 2999, 3100, 7, 50000, 3000, 3333, 12, 99999];
    let mut per_cpu: Vec<Vec<i64>> = vec![Vec::new(); cpus];
    for (i, v) in samples.iter().enumerate() {
        let cpu = i % cpus;
        running.run_on(&[0, *v], Some(cpu as u32));
        per_cpu[cpu].push(*v as i64 - 3000);
    }
    running.run(&[0, 200000]);
    let records = running.ring.drain();
    assert_eq!(records.len(), 1);
    let record = bpf::records::decode(&records[0], &module, 512).unwrap();
    let bpf::records::RecordBody::Printf { args, .. } = record.body else {
        panic!("{record:?}");
    };
    let got: Vec<i64> = args
        .iter()
        .map(|a| match a {
            bpf::records::Arg::Long(v) => *v,
            other => panic!("{other:?}"),
        })
        .collect();
    let expected = |name: &str, shift: u32| {
        let global = module.globals.iter().find(|g| g.name == name).unwrap();
        let stap_lang::ir::Storage::Stats { needs, .. } = &global.storage else {
            unreachable!()
        };
        let shape = StatShape {
            layout: StatLayout::new(needs),
            shift,
        };
        let slots: Vec<Vec<i64>> = per_cpu
            .iter()
            .map(|values| {
                let mut slots = shape.empty();
                for v in values {
                    shape.add(&mut slots, *v);
                }
                slots
            })
            .collect();
        shape.aggregate(slots.iter().map(|s| s.as_slice())).variance
    };
    eprintln!("kernel variance over {cpus} CPU(s): {got:?}");
    assert_eq!(
        got,
        vec![expected("x", 0), expected("y", 2), samples.len() as i64]
    );
}
