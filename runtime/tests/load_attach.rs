//! Live tests of loading and attaching on this machine's kernel (root).
//! Each loads a tiny hand-assembled counter program, attaches it, triggers
//! the event and checks the counter moved. Without root they are skipped.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use stap_lang::bpf::{AttachKind, MapRole, MapSpec, Object, Program};
use stap_lang::ir::FuncId;
use stap_lang::source::{SourceMap, Span};
use stap_runtime::attach::attach;
use stap_runtime::load::{LoadError, describe, load};
use stap_runtime::sys;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("not root: live test skipped");
    }
    root
}

// ---- a tiny assembler: code | dst << 8 | src << 12 | off << 16 | imm << 32

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    u64::from(code)
        | u64::from(dst) << 8
        | u64::from(src) << 12
        | u64::from(off as u16) << 16
        | u64::from(imm as u32) << 32
}

const MOV64_IMM: u8 = 0xb7;
const MOV64_REG: u8 = 0xbf;
const ADD64_IMM: u8 = 0x07;
const STX_W: u8 = 0x63;
const LDX_DW: u8 = 0x79;
const ATOMIC_DW: u8 = 0xdb;
const LD_IMM64: u8 = 0x18;
/// `src_reg` of an `ld_imm64` that loads a map: the loader only fills in the fd.
const PSEUDO_MAP_FD: u8 = 1;
const CALL: u8 = 0x85;
const JEQ_IMM: u8 = 0x15;
const EXIT: u8 = 0x95;
const MAP_LOOKUP_ELEM: i32 = 1;

/// `counter[0] += 1` (atomically), or with `overrun` a read 8 bytes past
/// the 8-byte value, which the verifier must reject. The map reference
/// is instruction 4.
fn counter_program(overrun: bool) -> Vec<u64> {
    let mut insns = vec![
        insn(MOV64_IMM, 1, 0, 0, 0),
        insn(STX_W, 10, 1, -4, 0),
        insn(MOV64_REG, 2, 10, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, -4),
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, 0),
        0,
        insn(CALL, 0, 0, 0, MAP_LOOKUP_ELEM),
        insn(JEQ_IMM, 0, 0, 2, 0),
    ];
    if overrun {
        insns.push(insn(LDX_DW, 1, 0, 8, 0));
    } else {
        insns.push(insn(MOV64_IMM, 1, 0, 0, 1));
    }
    insns.push(insn(ATOMIC_DW, 0, 1, 0, 0)); // lock *(u64 *)(r0 + 0) += r1
    insns.push(insn(MOV64_IMM, 0, 0, 0, 0));
    insns.push(insn(EXIT, 0, 0, 0, 0));
    insns
}

fn counter_object(attach: AttachKind, overrun: bool, lines: Vec<(usize, Span)>) -> Object {
    Object {
        maps: vec![MapSpec {
            name: "stap_test_cnt".into(),
            map_type: sys::BPF_MAP_TYPE_ARRAY,
            key_size: 4,
            value_size: 8,
            max_entries: 1,
            flags: 0,
            role: MapRole::Counters,
        }],
        programs: vec![Program {
            name: "stap_test".into(),
            probe: 0,
            function: FuncId(0),
            attach,
            insns: counter_program(overrun),
            map_relocs: vec![(4, 0)],
            lines,
            stack_bytes: 4,
            func_info: vec![],
            line_info: vec![],
            plain_subprograms: 0,
        }],
        btf: vec![],
    }
}

fn read_counter(loaded: &stap_runtime::load::Loaded) -> u64 {
    let mut value = [0u8; 8];
    let found = sys::map_lookup(loaded.maps[0].as_fd(), &0u32.to_ne_bytes(), &mut value).unwrap();
    assert!(found, "array element 0 always exists");
    u64::from_ne_bytes(value)
}

/// Attaches a counter for `kind`, runs `trigger`, returns the count.
fn count_hits(kind: AttachKind, trigger: impl FnOnce()) -> u64 {
    let object = counter_object(kind, false, vec![]);
    let loaded = load(&object).unwrap_or_else(|e| panic!("load: {e}"));
    let attached = attach(&object, &loaded).unwrap_or_else(|e| panic!("{e}"));
    assert!(attached.attachment_count() >= 1);
    // Sampling events count once the session switches them on.
    attached
        .sampling
        .enable()
        .expect("enabling the sampling events");
    trigger();
    let count = read_counter(&loaded);
    drop(attached);
    count
}

#[test]
fn raw_tracepoint_sys_enter_counts_syscalls() {
    if !is_root() {
        return;
    }
    let count = count_hits(
        AttachKind::RawTracepoint {
            name: "sys_enter".into(),
        },
        || {
            for _ in 0..10 {
                // SAFETY: getppid has no preconditions.
                unsafe { libc::getppid() };
            }
        },
    );
    assert!(count >= 10, "count {count}");
}

#[test]
fn classic_tracepoint_counts_getppid() {
    if !is_root() {
        return;
    }
    let count = count_hits(
        AttachKind::Tracepoint {
            system: "syscalls".into(),
            name: "sys_enter_getppid".into(),
        },
        || {
            for _ in 0..5 {
                // SAFETY: getppid has no preconditions.
                unsafe { libc::getppid() };
            }
        },
    );
    assert!(count >= 5, "count {count}");
}

#[test]
fn perf_cpu_clock_samples() {
    if !is_root() {
        return;
    }
    let count = count_hits(
        AttachKind::PerfEvent {
            perf_type: sys::PERF_TYPE_SOFTWARE,
            config: sys::PERF_COUNT_SW_CPU_CLOCK,
            // Every millisecond of CPU time.
            sample_period: 1_000_000,
            frequency: false,
            every_cpu: true,
            chain: Default::default(),
        },
        || {
            let start = Instant::now();
            let mut spin = 0u64;
            while start.elapsed() < Duration::from_millis(50) {
                spin = std::hint::black_box(spin.wrapping_add(1));
            }
        },
    );
    assert!(count > 0, "count {count}");
}

/// The test program, built in a directory removed when the guard drops.
fn compile_target() -> Option<(tempfile::TempDir, PathBuf)> {
    let dir = tempfile::Builder::new()
        .prefix("stap-load-attach-")
        .tempdir()
        .ok()?;
    let source = dir.path().join("target.c");
    std::fs::write(
        &source,
        "__attribute__((noinline)) int stap_target(int x) { return x + 1; }\n\
         int main(void) { int s = 0; for (int i = 0; i < 3; i++) s += stap_target(i); return s == 6 ? 0 : 1; }\n",
    )
    .ok()?;
    let binary = dir.path().join("target");
    let ok = Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
        .ok()?
        .success();
    ok.then_some((dir, binary))
}

fn run(binary: &Path) {
    let status = Command::new(binary).status().unwrap();
    assert!(status.success());
}

#[test]
fn uprobe_counts_calls_in_a_test_binary() {
    if !is_root() {
        return;
    }
    let Some((_dir, binary)) = compile_target() else {
        eprintln!("no C compiler: skipped");
        return;
    };
    let path = binary.to_string_lossy().into_owned();
    let entry = count_hits(
        AttachKind::Uprobe {
            path: path.clone(),
            function: "stap_target".into(),
            is_return: false,
        },
        || run(&binary),
    );
    assert_eq!(entry, 3);
    let returns = count_hits(
        AttachKind::Uprobe {
            path,
            function: "stap_target".into(),
            is_return: true,
        },
        || run(&binary),
    );
    assert_eq!(returns, 3);
}

#[test]
fn missing_targets_are_named_errors() {
    if !is_root() {
        return;
    }
    let object = counter_object(
        AttachKind::RawTracepoint {
            name: "no_such_tracepoint_xyz".into(),
        },
        false,
        vec![],
    );
    let loaded = load(&object).unwrap();
    let error = attach(&object, &loaded).unwrap_err();
    assert_eq!(
        error.to_string(),
        "cannot attach probe kernel.trace(\"no_such_tracepoint_xyz\"): \
         the kernel has no raw tracepoint no_such_tracepoint_xyz"
    );

    let object = counter_object(
        AttachKind::Kprobe {
            function: "tcp_v4_connect".into(),
            offset: 0,
            is_return: false,
        },
        false,
        vec![],
    );
    let loaded = load(&object).unwrap();
    match attach(&object, &loaded) {
        // This machine has no CONFIG_KPROBES.
        Err(error) if !Path::new("/sys/bus/event_source/devices/kprobe").exists() => {
            assert!(
                error.reason.starts_with("kprobes are not available"),
                "{error}"
            );
        }
        Err(error) => panic!("{error}"),
        Ok(_) => {}
    }
}

#[test]
fn out_of_bounds_map_read_is_rejected_at_its_statement() {
    if !is_root() {
        return;
    }
    let mut map = SourceMap::new();
    let text = "probe kernel.trace(\"sys_enter\") {\n  key = 0\n  n = a[key]\n}\n";
    let file = map.add("oob.stp", text);
    let span_of = |needle: &str| {
        let start = text.find(needle).unwrap();
        Span::new(file, start, start + needle.len())
    };
    let lines = vec![(0, span_of("key = 0")), (4, span_of("n = a[key]"))];
    let object = counter_object(
        AttachKind::RawTracepoint {
            name: "sys_enter".into(),
        },
        true,
        lines,
    );
    let error = load(&object).unwrap_err();
    let LoadError::Verifier {
        program,
        insn,
        reason,
        log,
    } = &error
    else {
        panic!("expected a verifier error, got {error}");
    };
    assert_eq!(*program, 0);
    assert_eq!(*insn, Some(8), "log:\n{log}");
    assert!(
        reason.starts_with("invalid access to map value"),
        "reason {reason:?}, log:\n{log}"
    );
    let diag = describe(&error, &object, &map, false);
    assert!(
        diag.message
            .starts_with("the kernel's BPF verifier rejected probe kernel.trace(\"sys_enter\"): invalid access to map value"),
        "{}",
        diag.message
    );
    assert_eq!(
        diag.primary.as_ref().map(|p| p.0),
        Some(span_of("n = a[key]"))
    );
    let rendered = stap_lang::diag::render_plain(&map, &[diag]);
    assert!(rendered.contains("oob.stp:3:3"), "{rendered}");
}

/// Six distinct counter programs (each returns its own index), of which
/// those at `bad` read past their map value; each is padded to 400 more
/// instructions, enough for the loader to use several threads.
fn six_programs(bad: &[usize]) -> Object {
    let mut object = counter_object(
        AttachKind::RawTracepoint {
            name: "sys_enter".into(),
        },
        false,
        vec![],
    );
    let template = object.programs.remove(0);
    for index in 0..6 {
        let mut insns = counter_program(bad.contains(&index));
        let ret = insns.len() - 2;
        insns[ret] = insn(MOV64_IMM, 0, 0, 0, index as i32);
        let padding = std::iter::repeat_n(insn(MOV64_IMM, 1, 0, 0, 0), 400);
        insns.splice(ret..ret, padding);
        object.programs.push(Program {
            name: format!("stap_test{index}"),
            insns,
            ..template.clone()
        });
    }
    object
}

/// Programs load several at a time; the error is still the one a load in
/// order meets first, and every program of a good object is loaded.
#[test]
fn loads_in_parallel_report_the_first_rejected_program() {
    if !is_root() {
        return;
    }
    for _ in 0..5 {
        let error = load(&six_programs(&[2, 4, 5])).unwrap_err();
        let LoadError::Verifier { program, .. } = &error else {
            panic!("expected a verifier error, got {error}");
        };
        assert_eq!(*program, 2);
    }
    let loaded = load(&six_programs(&[])).unwrap_or_else(|e| panic!("load: {e}"));
    assert_eq!(loaded.programs.len(), 6);
    let ids: std::collections::BTreeSet<u32> = loaded
        .programs
        .iter()
        .map(|fd| sys::prog_info(fd.as_fd()).unwrap().id)
        .collect();
    assert_eq!(ids.len(), 6, "six distinct programs, six kernel programs");
}

#[test]
fn map_wrappers_round_trip() {
    if !is_root() {
        return;
    }
    let spec = MapSpec {
        name: "stap_test_hash".into(),
        map_type: sys::BPF_MAP_TYPE_HASH,
        key_size: 8,
        value_size: 16,
        max_entries: 64,
        flags: 0,
        role: MapRole::Scratch,
    };
    let fd = sys::map_create(&spec).unwrap();
    let map = sys::MapRef::new(fd.as_fd()).unwrap();
    assert_eq!(map.info().name(), "stap_test_hash");
    for k in 0..20u64 {
        let mut value = [0u8; 16];
        value[..8].copy_from_slice(&(k * 10).to_ne_bytes());
        map.update(&k.to_ne_bytes(), &value, sys::BPF_ANY).unwrap();
    }
    let mut value = [0u8; 16];
    assert!(sys::map_lookup(fd.as_fd(), &7u64.to_ne_bytes(), &mut value).unwrap());
    assert_eq!(u64::from_ne_bytes(value[..8].try_into().unwrap()), 70);
    assert!(!sys::map_lookup(fd.as_fd(), &99u64.to_ne_bytes(), &mut value).unwrap());
    // A short buffer is refused before the kernel could overrun it.
    assert!(map.lookup(&7u64.to_ne_bytes(), &mut [0u8; 8]).is_err());
    assert!(map.lookup(&7u32.to_ne_bytes(), &mut value).is_err());

    // Walk with next_key.
    let mut seen = Vec::new();
    let mut key = None;
    let mut next = [0u8; 8];
    while sys::map_next_key(
        fd.as_fd(),
        key.as_ref().map(|k: &[u8; 8]| &k[..]),
        &mut next,
    )
    .unwrap()
    {
        seen.push(u64::from_ne_bytes(next));
        key = Some(next);
    }
    seen.sort();
    assert_eq!(seen, (0..20).collect::<Vec<_>>());

    // Read everything in batches of 6.
    let mut batched = Vec::new();
    let mut cursor: Option<[u8; 8]> = None;
    loop {
        let mut next = [0u8; 8];
        let mut keys = [0u8; 6 * 8];
        let mut values = [0u8; 6 * 16];
        let batch = sys::map_lookup_batch(
            fd.as_fd(),
            cursor.as_ref().map(|c| &c[..]),
            &mut next,
            &mut keys,
            &mut values,
        )
        .unwrap();
        for i in 0..batch.count {
            let k = u64::from_ne_bytes(keys[i * 8..i * 8 + 8].try_into().unwrap());
            let v = u64::from_ne_bytes(values[i * 16..i * 16 + 8].try_into().unwrap());
            assert_eq!(v, k * 10);
            batched.push(k);
        }
        if batch.done {
            break;
        }
        cursor = Some(next);
    }
    batched.sort();
    assert_eq!(batched, (0..20).collect::<Vec<_>>());

    assert!(sys::map_delete(fd.as_fd(), &3u64.to_ne_bytes()).unwrap());
    assert!(!sys::map_delete(fd.as_fd(), &3u64.to_ne_bytes()).unwrap());
}

#[test]
fn per_cpu_values_span_every_possible_cpu() {
    if !is_root() {
        return;
    }
    let spec = MapSpec {
        name: "stap_test_pcpu".into(),
        map_type: sys::BPF_MAP_TYPE_PERCPU_ARRAY,
        key_size: 4,
        value_size: 12,
        max_entries: 1,
        flags: 0,
        role: MapRole::Counters,
    };
    let fd = sys::map_create(&spec).unwrap();
    let map = sys::MapRef::new(fd.as_fd()).unwrap();
    let cpus = sys::possible_cpus().unwrap();
    assert_eq!(map.value_len(), 16 * cpus);
    let mut value = vec![0u8; map.value_len()];
    assert!(map.lookup(&0u32.to_ne_bytes(), &mut value).unwrap());
    assert!(map.lookup(&0u32.to_ne_bytes(), &mut value[..12]).is_err());
}
