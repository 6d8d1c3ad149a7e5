//! Loading a compiled [`Object`]: create its maps, patch their fds into the
//! programs, and BPF_PROG_LOAD each program with the type its attach kind
//! needs. No ELF and no aya loader: a handful of bpf() calls (aya's
//! `EbpfLoader::new` alone parses all of vmlinux BTF, 25-30 ms).
//!
//! A rejected program is loaded a second time with the verifier log on
//! (the first try goes without one, the fast path); the log is then reduced
//! to the failing instruction and the verifier's reason, which
//! [`describe`] turns into a diagnostic at the script statement.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use stap_lang::bpf::btf::{FUNC_INFO_BYTES, FuncInfo, LINE_INFO_BYTES, LineInfo};
use stap_lang::bpf::{AttachKind, MapRole, MapSpec, Object, Program};
use stap_lang::diag::Diagnostic;
use stap_lang::source::{SourceMap, Span};

use crate::btf::Btf;
use crate::sys::{self, ProgBtf, ProgLoad};

mod early;
mod targets;
mod verifier_log;

pub use early::create_events_ring;
pub use verifier_log::{VerifierFailure, parse_verifier_log};

use targets::BtfTargets;

/// Verifier log buffers tried in turn when the log does not fit (kernels
/// before 6.4 keep the head of the log, and the error is at its end).
const LOG_SIZES: [usize; 3] = [1 << 20, 1 << 24, 1 << 27];
const LOG_LEVEL: u32 = 1;

/// The kernel objects of a loaded [`Object`]. Dropping closes them.
#[derive(Debug)]
pub struct Loaded {
    /// Same index as `Object::maps`.
    pub maps: Vec<OwnedFd>,
    /// Same index as `Object::programs`.
    pub programs: Vec<OwnedFd>,
}

#[derive(Debug)]
pub enum LoadError {
    /// BPF_MAP_CREATE failed.
    Map {
        map: usize,
        name: String,
        error: io::Error,
    },
    /// The verifier rejected a program.
    Verifier {
        program: usize,
        /// The failing instruction, when the log names one.
        insn: Option<usize>,
        /// The verifier's reason, one line.
        reason: String,
        /// The whole verifier log.
        log: String,
    },
    /// BPF_PROG_LOAD failed before verification (EPERM, a missing attach
    /// target, ...) or a step around it did.
    Kernel {
        program: usize,
        what: String,
        error: io::Error,
    },
    /// The object itself is inconsistent (a compiler bug).
    Object { program: usize, reason: String },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Map { name, error, .. } => {
                write!(f, "cannot create BPF map {name}: {error}")
            }
            LoadError::Verifier {
                program,
                insn,
                reason,
                ..
            } => {
                write!(f, "the BPF verifier rejected program {program}: {reason}")?;
                if let Some(insn) = insn {
                    write!(f, " (instruction {insn})")?;
                }
                Ok(())
            }
            LoadError::Kernel {
                program,
                what,
                error,
            } => write!(f, "program {program}: {what}: {error}"),
            LoadError::Object { program, reason } => {
                write!(f, "program {program} is malformed: {reason}")
            }
        }
    }
}

impl std::error::Error for LoadError {}

/// Creates the maps and loads the programs of `object`. Kernel BTF is read
/// only if a program is fentry/fexit (to find its function's BTF id).
pub fn load(object: &Object) -> Result<Loaded, LoadError> {
    load_with_btf(object, None)
}

/// [`load`] with the vmlinux BTF the caller has already opened.
pub fn load_with_btf(object: &Object, vmlinux: Option<&Arc<Btf>>) -> Result<Loaded, LoadError> {
    let maps = object
        .maps
        .iter()
        .enumerate()
        .map(|(index, spec)| {
            let early = match spec.role {
                MapRole::Events => early::take(spec),
                _ => None,
            };
            early
                .map_or_else(|| create_map(spec), Ok)
                .map_err(|error| LoadError::Map {
                    map: index,
                    name: spec.name.clone(),
                    error,
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Each program's fd comes from the first program with the same load
    // request (itself, most often).
    let mut first_with_body: HashMap<SameLoad, usize> = HashMap::new();
    let source: Vec<usize> = (object.programs.iter().enumerate())
        .map(|(index, program)| match SameLoad::of(program) {
            Some(same) => *first_with_body.entry(same).or_insert(index),
            None => index,
        })
        .collect();
    let distinct: Vec<usize> = (0..source.len())
        .filter(|&index| source[index] == index)
        .collect();
    let shared = Shared {
        maps: &maps,
        targets: Mutex::new(BtfTargets::new(vmlinux)),
        program_btf: ProgramBtf::new(&object.btf),
    };
    let mut loaded = load_in_parallel(object, &distinct, &shared)?;
    let mut programs: Vec<OwnedFd> = Vec::with_capacity(source.len());
    for (index, &first) in source.iter().enumerate() {
        let fd = match loaded[index].take() {
            Some(fd) => fd,
            // `first < index`: already in `programs`.
            None => programs[first]
                .try_clone()
                .map_err(|error| LoadError::Kernel {
                    program: index,
                    what: "duplicating the fd of an identical program".into(),
                    error,
                })?,
        };
        programs.push(fd);
    }
    drop(shared);
    Ok(Loaded { maps, programs })
}

/// What every loading thread shares: the maps, the fentry/tp_btf targets
/// (kernel BTF, opened on first need) and the object's program BTF.
struct Shared<'a> {
    maps: &'a [OwnedFd],
    targets: Mutex<BtfTargets>,
    program_btf: ProgramBtf<'a>,
}

/// At most this many programs are verified at once.
const MAX_LOAD_THREADS: usize = 4;

/// One loading thread per this many instructions to verify: a thread
/// costs its start and its join (on a loaded machine, a wait for it to be
/// scheduled again), more than the verifier takes on a small program.
const INSNS_PER_LOAD_THREAD: usize = 2_000;

/// Loads the programs `distinct` (indexes into `object.programs`, in
/// order), several at a time: the kernel verifies privileged loads
/// concurrently, and the verifier is most of a large script's start-up
/// (ten 2,083-instruction programs take ~50 ms one after another). The
/// result is indexed like `object.programs`, `None` where not loaded.
///
/// Threads take the programs in index order, and none takes another after
/// a failure; so when one fails, every lower-indexed program was loaded
/// too, and the lowest failure reported is the one a load in order would
/// have stopped at.
fn load_in_parallel(
    object: &Object,
    distinct: &[usize],
    shared: &Shared,
) -> Result<Vec<Option<OwnedFd>>, LoadError> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Mutex<Vec<(usize, Result<OwnedFd, LoadError>)>> = Mutex::new(Vec::new());
    let work = || {
        while !failed.load(Ordering::Relaxed) {
            let Some(&index) = distinct.get(next.fetch_add(1, Ordering::Relaxed)) else {
                break;
            };
            let result = load_program(index, &object.programs[index], shared);
            if result.is_err() {
                failed.store(true, Ordering::Relaxed);
            }
            lock(&results).push((index, result));
        }
    };
    let insns: usize = (distinct.iter())
        .map(|&index| object.programs[index].insns.len())
        .sum();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(distinct.len())
        .min(insns.div_ceil(INSNS_PER_LOAD_THREAD))
        .clamp(1, MAX_LOAD_THREADS);
    std::thread::scope(|scope| {
        // This thread loads too; one that cannot be spawned is not missed.
        for _ in 1..threads {
            let _ = std::thread::Builder::new()
                .name("stap-rs-load".into())
                .stack_size(256 << 10)
                .spawn_scoped(scope, work);
        }
        work();
    });
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by_key(|(index, _)| *index);
    let mut loaded: Vec<Option<OwnedFd>> = (0..object.programs.len()).map(|_| None).collect();
    for (index, result) in results {
        loaded[index] = Some(result?);
    }
    Ok(loaded)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What makes two programs' loads the same request: one loaded program
/// then serves both, attached once per probe point. `kernel.trace("sched:*")
/// { c++ }` compiles to one identical body per tracepoint; the verifier
/// would check each copy again (most of a wildcard's start-up), for the
/// same result. Only for programs whose load names no attach target (a
/// fentry or tp_btf program is bound to its function at load) and needs no
/// program BTF (whose line info differs per probe).
#[derive(PartialEq, Eq, Hash)]
struct SameLoad<'a> {
    prog_type: u32,
    expected_attach_type: u32,
    insns: &'a [u64],
    map_relocs: &'a [(usize, usize)],
}

impl<'a> SameLoad<'a> {
    fn of(program: &'a Program) -> Option<SameLoad<'a>> {
        let bound_at_load = matches!(
            program.attach,
            AttachKind::Fentry { .. } | AttachKind::TpBtf { .. } | AttachKind::Lsm { .. }
        );
        if bound_at_load || program.needs_btf() {
            return None;
        }
        Some(SameLoad {
            prog_type: program.attach.program_type(),
            expected_attach_type: program.attach.expected_attach_type(),
            insns: &program.insns,
            map_relocs: &program.map_relocs,
        })
    }
}

/// What [`load_added`] loaded: `maps` has the same index as `Object::maps`
/// (a duplicate of the caller's fd for a shared map, else a new map);
/// `programs` holds the chosen programs with their index.
#[derive(Debug)]
pub struct Added {
    pub maps: Vec<OwnedFd>,
    pub programs: Vec<(usize, OwnedFd)>,
}

/// Loading for the interactive session: map N uses the caller's fd
/// `shared(N)` when it gives one (no new map, so new programs share the
/// running ones' globals), else is created; only the programs `chosen`
/// picks are loaded.
pub fn load_added<'fd>(
    object: &Object,
    shared: &dyn Fn(usize) -> Option<std::os::fd::BorrowedFd<'fd>>,
    chosen: &dyn Fn(usize) -> bool,
) -> Result<Added, LoadError> {
    let maps = object
        .maps
        .iter()
        .enumerate()
        .map(|(index, spec)| {
            let made = match shared(index) {
                Some(fd) => fd.try_clone_to_owned(),
                None => create_map(spec),
            };
            made.map_err(|error| LoadError::Map {
                map: index,
                name: spec.name.clone(),
                error,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let shared = Shared {
        maps: &maps,
        targets: Mutex::new(BtfTargets::new(None)),
        program_btf: ProgramBtf::new(&object.btf),
    };
    let programs = object
        .programs
        .iter()
        .enumerate()
        .filter(|(index, _)| chosen(*index))
        .map(|(index, program)| load_program(index, program, &shared).map(|fd| (index, fd)))
        .collect::<Result<Vec<_>, _>>()?;
    drop(shared);
    Ok(Added { maps, programs })
}

/// Creates one map. A read-only formats map gets its contents and is frozen
/// before any program loads, because the verifier reads the formats.
fn create_map(spec: &MapSpec) -> io::Result<OwnedFd> {
    let fd = sys::map_create(spec)?;
    if let MapRole::Formats(bytes) = &spec.role {
        sys::map_update(fd.as_fd(), &0u32.to_ne_bytes(), bytes, 0)?;
        sys::map_freeze(fd.as_fd())?;
    }
    Ok(fd)
}

fn prog_btf<'a>(fd: &'a OwnedFd, func_info: &'a [u8], line_info: &'a [u8]) -> ProgBtf<'a> {
    ProgBtf {
        fd: fd.as_fd(),
        func_info,
        func_info_rec_size: FUNC_INFO_BYTES,
        line_info,
        line_info_rec_size: LINE_INFO_BYTES,
    }
}

/// The object's program BTF, loaded (once) only when a program needs it:
/// a program with callbacks always, any other only on the retry that asks
/// for the verifier log, where line_info makes the log quote script lines.
/// The fast path of an ordinary program thus costs no BTF work.
#[derive(Debug)]
struct ProgramBtf<'a> {
    blob: &'a [u8],
    /// `Err`: the kernel's BTF checker's last log line, and the error.
    loaded: OnceLock<Result<OwnedFd, (String, io::Error)>>,
}

impl<'a> ProgramBtf<'a> {
    fn new(blob: &'a [u8]) -> ProgramBtf<'a> {
        ProgramBtf {
            blob,
            loaded: OnceLock::new(),
        }
    }

    /// Loads the blob if that was not tried yet (and there is one).
    fn ensure(&self) -> &Self {
        if !self.blob.is_empty() {
            self.loaded.get_or_init(|| Self::load(self.blob));
        }
        self
    }

    fn fd(&self) -> Option<&OwnedFd> {
        self.loaded.get().and_then(|r| r.as_ref().ok())
    }

    fn refused(&self) -> Option<&(String, io::Error)> {
        self.loaded.get().and_then(|r| r.as_ref().err())
    }

    fn load(blob: &[u8]) -> Result<OwnedFd, (String, io::Error)> {
        let error = match sys::btf_load(blob, None) {
            Ok(fd) => return Ok(fd),
            Err(error) => error,
        };
        // Again with the log, only to say why.
        let mut log = vec![0u8; 1 << 16];
        match sys::btf_load(blob, Some(&mut log)) {
            Ok(fd) => Ok(fd),
            Err(_) => {
                let reason = log_text(&log)
                    .lines()
                    .rev()
                    .map(str::trim)
                    .find(|line| !line.is_empty())
                    .unwrap_or("no BTF log")
                    .to_string();
                Err((reason, error))
            }
        }
    }
}

fn load_program(index: usize, program: &Program, shared: &Shared) -> Result<OwnedFd, LoadError> {
    let program_btf = &shared.program_btf;
    let insns = patch_map_fds(program, shared.maps).map_err(|reason| LoadError::Object {
        program: index,
        reason,
    })?;
    let prog_type = program.attach.program_type();
    let expected_attach_type = program.attach.expected_attach_type();
    let kernel_error = |(what, error)| LoadError::Kernel {
        program: index,
        what,
        error,
    };
    let target = match &program.attach {
        AttachKind::Fentry {
            function, module, ..
        } => Some(
            lock(&shared.targets)
                .find(function, module.as_deref())
                .map_err(kernel_error)?,
        ),
        AttachKind::TpBtf { name } => Some(
            lock(&shared.targets)
                .tracepoint(name)
                .map_err(kernel_error)?,
        ),
        AttachKind::Lsm { hook } => Some(
            lock(&shared.targets)
                .find(
                    &format!("{}{hook}", stap_lang::kernel::LSM_STUB_PREFIX),
                    None,
                )
                .map_err(kernel_error)?,
        ),
        _ => None,
    };
    let request = ProgLoad {
        prog_type,
        expected_attach_type,
        name: &program.name,
        insns: &insns,
        attach_btf_id: target.as_ref().map_or(0, |t| t.btf_id),
        attach_btf_obj: target
            .as_ref()
            .and_then(|t| t.module_btf.as_ref().map(|fd| fd.as_fd())),
    };
    let func_info = FuncInfo::encode_all(&program.func_info);
    let line_info = LineInfo::encode_all(&program.line_info);
    if program.needs_btf()
        && let Some((reason, error)) = program_btf.ensure().refused()
    {
        return Err(LoadError::Kernel {
            program: index,
            what: format!(
                "a foreach in a kernel probe runs as a callback, which needs program BTF, \
                 and this kernel refused ours (BPF_BTF_LOAD: {reason})"
            ),
            error: io::Error::new(error.kind(), error.to_string()),
        });
    }
    // Fast path: no log, and BTF only if the program cannot do without.
    let fast = match program.needs_btf() {
        true => program_btf
            .fd()
            .map(|fd| prog_btf(fd, &func_info, &line_info)),
        false => None,
    };
    let first = match sys::prog_load_with_btf(&request, fast.as_ref(), None) {
        Ok(fd) => return Ok(fd),
        Err(error) => error,
    };
    // The retry with the log takes line_info too, so the log quotes the
    // script (when the kernel takes our BTF).
    let btf = program_btf
        .ensure()
        .fd()
        .map(|fd| prog_btf(fd, &func_info, &line_info));
    let mut last_error = first;
    for size in LOG_SIZES {
        let mut buffer = vec![0u8; size];
        match sys::prog_load_with_btf(&request, btf.as_ref(), Some((LOG_LEVEL, &mut buffer))) {
            // Loading with a log succeeded where loading without failed:
            // a transient failure (ENOMEM, EAGAIN); take the program.
            Ok(fd) => return Ok(fd),
            // The log did not fit. Kernels since 6.4 keep its tail, which
            // ends with the "processed N insns" statistics line: that is
            // enough. Older kernels keep the head: grow and retry.
            Err(error)
                if error.raw_os_error() == Some(libc::ENOSPC)
                    && size < LOG_SIZES[LOG_SIZES.len() - 1]
                    && !has_final_statistics(&log_text(&buffer)) =>
            {
                last_error = error;
            }
            Err(error) => {
                let log = log_text(&buffer);
                return Err(rejection(index, program, log, error));
            }
        }
    }
    Err(LoadError::Kernel {
        program: index,
        what: "BPF_PROG_LOAD".into(),
        error: last_error,
    })
}

/// The verifier ends every log with `processed N insns (limit ...)`.
fn has_final_statistics(log: &str) -> bool {
    log.lines()
        .any(|line| line.starts_with("processed ") && line.contains(" insns"))
}

fn log_text(buffer: &[u8]) -> String {
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    String::from_utf8_lossy(&buffer[..end]).into_owned()
}

/// A failed load with its log: a verifier error when the log says why,
/// otherwise a kernel error (EPERM with an empty log, ...).
fn rejection(index: usize, program: &Program, log: String, error: io::Error) -> LoadError {
    match parse_verifier_log(&log) {
        Some(failure) => LoadError::Verifier {
            program: index,
            insn: failure.insn,
            reason: failure.reason,
            log,
        },
        None => LoadError::Kernel {
            program: index,
            what: format!(
                "BPF_PROG_LOAD of {} failed ({}){}",
                program.name,
                sys::errno_name(&error),
                match (error.raw_os_error(), &program.attach) {
                    (Some(libc::EPERM), AttachKind::Lsm { .. }) => {
                        " with no verifier log: lockdown or a kernel policy forbids BPF LSM \
                         programs here (they need BPF trampolines, as fentry does, and `bpf` \
                         in the active LSM list, /sys/kernel/security/lsm)"
                    }
                    (Some(libc::EPERM), _) => {
                        " with no verifier log: lockdown or a kernel policy forbids this program type"
                    }
                    _ => "",
                }
            ),
            error,
        },
    }
}
/// The program's instructions with each map reference's `ld_imm64`
/// immediate set to the map's fd (the emitter already set `src_reg`).
pub fn patch_map_fds(program: &Program, maps: &[OwnedFd]) -> Result<Vec<u64>, String> {
    use std::os::fd::AsRawFd;
    let fds: Vec<i32> = maps.iter().map(|fd| fd.as_raw_fd()).collect();
    patch_with(program, &fds)
}

fn patch_with(program: &Program, fds: &[i32]) -> Result<Vec<u64>, String> {
    const LD_IMM64: u64 = 0x18;
    let mut insns = program.insns.clone();
    for &(at, map) in &program.map_relocs {
        let fd = *fds
            .get(map)
            .ok_or_else(|| format!("instruction {at} refers to map {map}, which does not exist"))?;
        if at + 1 >= insns.len() || insns[at] & 0xff != LD_IMM64 {
            return Err(format!(
                "map relocation at instruction {at}, which is not an ld_imm64"
            ));
        }
        // Only the fd goes in (the first slot's immediate, the upper 32
        // bits): the emitter already chose src_reg (BPF_PSEUDO_MAP_FD for
        // the map, BPF_PSEUDO_MAP_VALUE for a pointer into its value, whose
        // offset is in the second slot's immediate).
        insns[at] = (insns[at] & 0xffff_ffff) | (u64::from(fd as u32) << 32);
    }
    Ok(insns)
}

// ---- diagnostics -------------------------------------------------------------

/// The script span of instruction `insn`: the last line-table entry at or
/// before it.
pub fn span_of(program: &Program, insn: usize) -> Option<Span> {
    let after = program.lines.partition_point(|(at, _)| *at <= insn);
    after.checked_sub(1).map(|i| program.lines[i].1)
}

/// The user-facing diagnostic for a load failure: for a rejection, the
/// probe and the verifier's reason at the script statement of the failing
/// instruction; the full verifier log only when `verbose`.
pub fn describe(err: &LoadError, object: &Object, _map: &SourceMap, verbose: bool) -> Diagnostic {
    let probe = |index: usize| object.programs.get(index);
    match err {
        LoadError::Verifier {
            program,
            insn,
            reason,
            log,
        } => {
            let Some(prog) = probe(*program) else {
                return Diagnostic::error(format!(
                    "the kernel's BPF verifier rejected a probe: {reason}"
                ));
            };
            let mut diag = Diagnostic::error(format!(
                "the kernel's BPF verifier rejected probe {}: {reason}",
                prog.attach.point_text()
            ));
            if let Some(span) = insn.and_then(|at| span_of(prog, at)) {
                diag = diag.at(span, "this statement");
            }
            diag = diag.note(match insn {
                Some(at) => format!(
                    "at BPF instruction {at} of {} program {} ({} instructions)",
                    prog.name,
                    program,
                    prog.insns.len()
                ),
                None => format!(
                    "in BPF program {} ({} instructions)",
                    prog.name,
                    prog.insns.len()
                ),
            });
            if verbose {
                diag.note(format!("verifier log:\n{}", log.trim_end()))
            } else {
                diag.note("run with -v to see the verifier's log")
            }
        }
        LoadError::Kernel {
            program,
            what,
            error,
        } => {
            let point =
                probe(*program).map_or_else(|| format!("#{program}"), |p| p.attach.point_text());
            Diagnostic::error(format!("cannot load probe {point}: {what}"))
                .note(format!("the kernel said: {error}"))
        }
        LoadError::Map { name, error, .. } => {
            let mut diag = Diagnostic::error(format!("cannot create BPF map {name}: {error}"));
            if matches!(error.raw_os_error(), Some(libc::ENOMEM) | Some(libc::E2BIG)) {
                diag =
                    diag.note("the map may be too large: lower MAXMAPENTRIES or a global's size");
            }
            diag
        }
        LoadError::Object { program, reason } => Diagnostic::error(format!(
            "internal error: BPF program {program} is malformed: {reason}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::verifier_log::MAP_VALUE_OOB;
    use super::*;
    use stap_lang::ir::FuncId;
    use stap_lang::source::FileId;

    fn program(insns: Vec<u64>, relocs: Vec<(usize, usize)>, lines: Vec<(usize, Span)>) -> Program {
        Program {
            name: "stap_p0".into(),
            probe: 0,
            function: FuncId(0),
            attach: AttachKind::RawTracepoint {
                name: "sys_enter".into(),
            },
            insns,
            map_relocs: relocs,
            lines,
            stack_bytes: 0,
            func_info: vec![],
            line_info: vec![],
            plain_subprograms: 0,
        }
    }

    #[test]
    fn map_fds_are_patched_into_ld_imm64() {
        // r1 = <map 0> (ld_imm64 dst=1, src=BPF_PSEUDO_MAP_FD), then exit;
        // and r2 = <map 0 value + 8> (src=BPF_PSEUDO_MAP_VALUE).
        let prog = program(
            vec![
                0x18 | 1 << 8 | 1 << 12,
                0,
                0x18 | 2 << 8 | 2 << 12,
                8 << 32,
                0x95,
            ],
            vec![(0, 0), (2, 0)],
            vec![],
        );
        let insns = patch_with(&prog, &[7]).unwrap();
        assert_eq!(insns[0], 0x18 | 1 << 8 | 1 << 12 | 7 << 32);
        assert_eq!(insns[1], 0);
        assert_eq!(insns[2], 0x18 | 2 << 8 | 2 << 12 | 7 << 32);
        assert_eq!(insns[3], 8 << 32, "the value offset is kept");
        assert!(patch_with(&prog, &[]).is_err());
        let bad = program(vec![0xb7, 0x95], vec![(0, 0)], vec![]);
        assert!(patch_with(&bad, &[7]).is_err());
    }

    #[test]
    fn spans_come_from_the_last_line_entry_at_or_before() {
        let span = |s| Span::new(FileId(0), s, s + 1);
        let prog = program(
            vec![0; 10],
            vec![],
            vec![(0, span(0)), (4, span(10)), (9, span(20))],
        );
        assert_eq!(span_of(&prog, 3), Some(span(0)));
        assert_eq!(span_of(&prog, 4), Some(span(10)));
        assert_eq!(span_of(&prog, 8), Some(span(10)));
        assert_eq!(span_of(&prog, 12), Some(span(20)));
        let empty = program(vec![], vec![], vec![]);
        assert_eq!(span_of(&empty, 3), None);
    }

    #[test]
    fn describe_points_at_the_statement() {
        let mut map = SourceMap::new();
        let file = map.add(
            "t.stp",
            "probe kernel.trace(\"sys_enter\") {\n  x = a[1]\n}\n",
        );
        let stmt = Span::new(file, 37, 45);
        let prog = program(
            vec![0; 10],
            vec![],
            vec![(0, Span::new(file, 0, 5)), (6, stmt)],
        );
        let object = Object {
            maps: vec![],
            programs: vec![prog],
            btf: vec![],
        };
        let err = LoadError::Verifier {
            program: 0,
            insn: Some(8),
            reason: "invalid access to map value, value_size=8 off=8 size=8".into(),
            log: MAP_VALUE_OOB.into(),
        };
        let diag = describe(&err, &object, &map, false);
        assert_eq!(
            diag.message,
            "the kernel's BPF verifier rejected probe kernel.trace(\"sys_enter\"): \
             invalid access to map value, value_size=8 off=8 size=8"
        );
        assert_eq!(diag.primary, Some((stmt, "this statement".to_string())));
        assert!(diag.notes.iter().all(|n| !n.contains("processed 9 insns")));
        let verbose = describe(&err, &object, &map, true);
        assert!(
            verbose
                .notes
                .iter()
                .any(|n| n.contains("processed 9 insns"))
        );
    }
}
