//! Built-in functions evaluated on the host. JIT code calls them through
//! `rtlib::stap_builtin` with an index into [`TABLE`], resolved at compile
//! time, so an unknown name is a compile error rather than a run-time one.

use std::time::{SystemTime, UNIX_EPOCH};

use super::usymbols::AddressText;
use super::value::Value;
use super::{HostRuntime, RuntimeError};

/// Every built-in the host implements.
pub const TABLE: &[&str] = &[
    "strlen",
    "substr",
    "isinstr",
    "strpos",
    "str_replace",
    "tokenize",
    "text_str",
    "text_strn",
    "stringat",
    "strtol",
    "string_quoted",
    "isdigit",
    "abs",
    "gettimeofday_s",
    "gettimeofday_ms",
    "gettimeofday_us",
    "gettimeofday_ns",
    "ktime_get_ns",
    "local_clock_ns",
    "get_cycles",
    "ctime",
    "tz_ctime",
    "pid",
    "tid",
    "ppid",
    "uid",
    "gid",
    "euid",
    "execname",
    "target",
    "cpu",
    "symname",
    "symdata",
    "modname",
    "enum_name",
    "exit",
    "error",
    "warn",
    "system",
    "speculation",
    "speculate",
    "commit",
    "discard",
    "log",
    "print",
    "println",
    "sprint",
    "sprintln",
    "printd",
    "printdln",
    "sprintd",
    "assert",
    "abort",
    "pp",
    "pn",
    "ppfunc",
    "probe_type",
    "is_return",
    "probefunc",
    "probemod",
    "caller_addr",
    "user_mode",
    "pid2execname",
    "sprint_ubacktrace",
    "ubacktrace",
    "print_syms",
    "print_usyms",
    "print_ustack",
    "sprint_ustack",
    "print_backtrace",
    "sprint_backtrace",
    "backtrace",
    "print_ubacktrace",
    "print_stack",
    "sprint_stack",
    "cmdline_str",
    "cmdline_arg",
    "cmdline_args",
    "regex_match",
    "matched",
    "__procfs_value",
    "__procfs_set",
    "__procfs_append",
    "symfileline",
    "symfile",
    "symline",
    "kernel_string",
    "kernel_string2",
    "kernel_string_n",
    "kernel_long",
    "kernel_int",
    "kernel_short",
    "kernel_char",
    "kernel_pointer",
    "tz_gmtoff",
    "tz_name",
    "stp_pid",
    "get_loadavg_index",
    "sprint_loadavg",
    "__random_u32",
    "usymname",
    "usymdata",
    "umodname",
    "sprint_syms",
    "sprint_usyms",
    "print_ubacktrace_brief",
    "stack",
    "ustack",
];

pub fn lookup(name: &str) -> Option<usize> {
    TABLE.iter().position(|n| *n == name)
}

fn text(v: &Value) -> Vec<u8> {
    match v {
        Value::Str(s) => s.to_vec(),
        Value::Long(n) => n.to_string().into_bytes(),
    }
}

fn long(args: &[Value], i: usize) -> i64 {
    args.get(i).map_or(0, Value::long)
}

fn bytes(args: &[Value], i: usize) -> &[u8] {
    match args.get(i) {
        Some(Value::Str(s)) => s,
        _ => &[],
    }
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec)
}

/// `size` bytes of kernel memory at `addr`, sign- or zero-extended (the
/// host's `Op::ReadKernel` and the `kernel_long()` family).
pub fn read_kernel(
    rt: &mut HostRuntime,
    addr: u64,
    size: usize,
    signed: bool,
) -> Result<i64, RuntimeError> {
    let bytes = rt
        .kmem
        .read(addr, size)
        .filter(|b| b.len() == size && size <= 8)
        .ok_or(RuntimeError::KernelRead(addr))?;
    let mut word = [0u8; 8];
    word[..size].copy_from_slice(&bytes);
    let value = u64::from_le_bytes(word);
    let unused = 64 - 8 * size as u32;
    Ok(if signed && unused > 0 {
        ((value << unused) as i64) >> unused
    } else {
        value as i64
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Runs built-in `id`. Void built-ins return 0.
pub fn call(rt: &mut HostRuntime, id: usize, args: &[Value]) -> Result<Value, RuntimeError> {
    let name = *TABLE
        .get(id)
        .ok_or_else(|| RuntimeError::Internal(format!("no built-in {id}")))?;
    let s = |b: Vec<u8>| Ok(Value::Str(b.into()));
    let l = |n: i64| Ok(Value::Long(n));
    match name {
        "strlen" => l(bytes(args, 0).len() as i64),
        // As stap: "" unless 0 <= start < strlen; at most len bytes.
        "substr" => {
            let src = bytes(args, 0);
            let (start, len) = (long(args, 1), long(args, 2));
            if start < 0 || start >= src.len() as i64 || len < 0 {
                return s(Vec::new());
            }
            let start = start as usize;
            let end = src.len().min(start.saturating_add(len as usize));
            s(src[start..end].to_vec())
        }
        "isinstr" => l(find(bytes(args, 0), bytes(args, 1)).is_some() as i64),
        "strpos" => l(find(bytes(args, 0), bytes(args, 1)).map_or(-1, |i| i as i64)),
        "str_replace" => {
            let (src, from, to) = (bytes(args, 0), bytes(args, 1), bytes(args, 2));
            if from.is_empty() {
                return s(src.to_vec());
            }
            let mut out = Vec::new();
            let mut rest = src;
            while let Some(i) = find(rest, from) {
                out.extend_from_slice(&rest[..i]);
                out.extend_from_slice(to);
                rest = &rest[i + from.len()..];
            }
            out.extend_from_slice(rest);
            s(out)
        }
        "tokenize" => {
            let input = bytes(args, 0);
            if !input.is_empty() {
                rt.tokenize_rest = input.to_vec();
            }
            let delims = bytes(args, 1).to_vec();
            let rest = std::mem::take(&mut rt.tokenize_rest);
            let start = rest
                .iter()
                .position(|b| !delims.contains(b))
                .unwrap_or(rest.len());
            let end = rest[start..]
                .iter()
                .position(|b| delims.contains(b))
                .map_or(rest.len(), |i| start + i);
            rt.tokenize_rest = rest[end..].to_vec();
            s(rest[start..end].to_vec())
        }
        // Kernel memory through /proc/kcore, with the BPF side's limits
        // (MAXSTRINGLEN - 1 bytes) and faults.
        "kernel_string" | "kernel_string2" | "kernel_string_n" => {
            let addr = long(args, 0) as u64;
            let max = rt.max_string_len.saturating_sub(1);
            let (max, fallback) = match name {
                "kernel_string_n" => (long(args, 1).clamp(0, max as i64) as usize, None),
                _ => (max, args.get(1)),
            };
            match (rt.kmem.read_string(addr, max), fallback) {
                (Some(text), _) => s(text),
                (None, Some(fallback)) => s(text(fallback)),
                (None, None) => Err(RuntimeError::KernelString(addr)),
            }
        }
        "kernel_long" | "kernel_int" | "kernel_short" | "kernel_char" | "kernel_pointer" => {
            let addr = long(args, 0) as u64;
            let size = match name {
                "kernel_long" | "kernel_pointer" => 8,
                "kernel_int" => 4,
                "kernel_short" => 2,
                _ => 1,
            };
            l(read_kernel(rt, addr, size, name != "kernel_pointer")?)
        }
        "text_str" => s(escape(bytes(args, 0), rt.max_string_len.saturating_sub(1))),
        "text_strn" => s(text_strn(
            bytes(args, 0),
            long(args, 1),
            long(args, 2) != 0,
            rt.max_string_len,
        )),
        "string_quoted" => {
            let mut out = vec![b'"'];
            out.extend(escape(bytes(args, 0), usize::MAX));
            out.push(b'"');
            s(out)
        }
        "stringat" => {
            let src = bytes(args, 0);
            let i = long(args, 1);
            match usize::try_from(i).ok().and_then(|i| src.get(i)) {
                Some(b) => l(*b as i64),
                None => Err(RuntimeError::Explicit("Position out of bounds".into())),
            }
        }
        "strtol" => l(strtol(bytes(args, 0), long(args, 1))),
        "isdigit" => l(bytes(args, 0).first().is_some_and(u8::is_ascii_digit) as i64),
        "abs" => l(long(args, 0).wrapping_abs()),
        "gettimeofday_s" => l(now_ns() / 1_000_000_000),
        "gettimeofday_ms" => l(now_ns() / 1_000_000),
        "gettimeofday_us" => l(now_ns() / 1_000),
        "gettimeofday_ns" => l(now_ns()),
        "ktime_get_ns" | "local_clock_ns" | "get_cycles" => l(clock_ns(libc::CLOCK_MONOTONIC)),
        "ctime" => s(ctime(long(args, 0), false).into_bytes()),
        "tz_ctime" => s(ctime(long(args, 0), true).into_bytes()),
        // Host probes run in stap-rs itself, as stap's begin probes run in
        // its own process context.
        "pid" => l(std::process::id() as i64),
        // SAFETY (the libc calls below): plain getters without arguments.
        "tid" => l(unsafe { libc::gettid() } as i64),
        "ppid" => l(unsafe { libc::getppid() } as i64),
        "uid" => l(unsafe { libc::getuid() } as i64),
        "gid" => l(unsafe { libc::getgid() } as i64),
        "euid" => l(unsafe { libc::geteuid() } as i64),
        "cpu" => l(unsafe { libc::sched_getcpu() }.max(0) as i64),
        "execname" => s(std::fs::read("/proc/self/comm")
            .map(|mut c| {
                c.retain(|b| *b != b'\n');
                c
            })
            .unwrap_or_else(|_| b"stap-rs".to_vec())),
        // A host probe's process is stap-rs itself.
        "cmdline_str" => s(cmdline_args(0, -1, b" ")),
        "cmdline_arg" => s(cmdline_args(long(args, 0), long(args, 0), b"")),
        "cmdline_args" => s(cmdline_args(long(args, 0), long(args, 1), bytes(args, 2))),
        "target" => l(rt.target),
        "stp_pid" => l(std::process::id() as i64),
        "tz_gmtoff" => l(-local_time_zone().offset_east),
        "tz_name" => s(local_time_zone().name().as_bytes().to_vec()),
        "get_loadavg_index" => {
            let index = long(args, 0);
            let average = usize::try_from(index)
                .ok()
                .filter(|i| *i < 3)
                .and_then(|i| load_averages().and_then(|a| a.get(i).cloned()));
            match average {
                // The integer part: what the kernel prints before the dot.
                Some(text) => l(text
                    .split('.')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0)),
                None if !(0..3).contains(&index) => Err(RuntimeError::Explicit(format!(
                    "Invalid loadavg index {index} specified."
                ))),
                None => Err(RuntimeError::Explicit("cannot read /proc/loadavg".into())),
            }
        }
        "sprint_loadavg" => match load_averages() {
            Some(a) => s(a.join(" ").into_bytes()),
            None => Err(RuntimeError::Explicit("cannot read /proc/loadavg".into())),
        },
        "__random_u32" => {
            let mut bits = [0u8; 4];
            // SAFETY: `bits` is valid for 4 bytes of writes.
            unsafe { libc::getrandom(bits.as_mut_ptr().cast(), bits.len(), 0) };
            l(u32::from_ne_bytes(bits) as i64)
        }
        "pp" => s(probe_point(rt).into_bytes()),
        "pn" => s(rt
            .probe_names
            .get(rt.probe)
            .map_or_else(Vec::new, |p| p.to_vec())),
        "ppfunc" => s(stap_lang::ir::identity::ppfunc(&probe_point(rt)).into_bytes()),
        "probe_type" => s(rt
            .probe_types
            .get(rt.probe)
            .map_or_else(Vec::new, |t| t.as_bytes().to_vec())),
        // Host probes (begin, end, error, timers, procfs) are never returns.
        "is_return" => l(0),
        // Host probes run at no probed address, in no module, with no
        // caller, in no user context (stap's begin and end probes alike).
        "probefunc" | "probemod" => s(Vec::new()),
        "caller_addr" | "user_mode" => l(0),
        "pid2execname" => s(std::fs::read(format!("/proc/{}/comm", long(args, 0)))
            .map(|mut c| {
                c.retain(|b| *b != b'\n');
                c
            })
            .unwrap_or_default()),
        "sprint_ubacktrace" => {
            s(format!("<no user backtrace at {}>", probe_point(rt)).into_bytes())
        }
        "ubacktrace" => s(Vec::new()),
        "print_syms" => {
            let mut out = String::new();
            for addr in stack_addresses(bytes(args, 0)) {
                out.push_str(&rt.symbols.frame(addr, true));
            }
            rt.write_output(out.as_bytes());
            l(0)
        }
        // The current process of a host probe is stap-rs itself.
        "print_usyms" | "print_ustack" => {
            let addrs = stack_addresses(bytes(args, 0));
            let text = rt.usymbols.frames(std::process::id(), &addrs, true);
            rt.write_output(text.as_bytes());
            l(0)
        }
        "sprint_ustack" => {
            let addrs = stack_addresses(bytes(args, 0));
            s(rt.usymbols
                .frames(std::process::id(), &addrs, false)
                .into_bytes())
        }
        // A host probe, like stap's begin, end and timer probes, has no
        // registers to unwind from: stap then says so (in its build without
        // the inexact stack-guessing fallback), and `backtrace()` is empty.
        "print_backtrace" => {
            let text = format!("<no kernel backtrace at {}>\n", probe_point(rt));
            rt.write_output(text.as_bytes());
            l(0)
        }
        // stap copies the printed text less its last byte, the newline.
        "sprint_backtrace" => {
            s(format!("<no kernel backtrace at {}>", probe_point(rt)).into_bytes())
        }
        "backtrace" => s(Vec::new()),
        // No stack in a host probe: every depth is past its end.
        "stack" | "ustack" => l(0),
        // Like print_ubacktrace: a host probe has no user stack.
        "print_ubacktrace_brief" => {
            let text = format!("<no user backtrace at {}>\n", probe_point(rt));
            rt.write_output(text.as_bytes());
            l(0)
        }
        "usymname" | "usymdata" | "umodname" => {
            let how = match name {
                "usymname" => AddressText::Name,
                "usymdata" => AddressText::Data,
                _ => AddressText::Module,
            };
            let addr = long(args, 0) as u64;
            s(rt.usymbols
                .describe(std::process::id(), addr, how)
                .into_bytes())
        }
        "sprint_syms" => {
            let mut out = String::new();
            for addr in stack_addresses(bytes(args, 0)) {
                out.push_str(&rt.symbols.frame(addr, true));
            }
            s(out.into_bytes())
        }
        "sprint_usyms" => {
            let addrs = stack_addresses(bytes(args, 0));
            s(rt.usymbols
                .frames(std::process::id(), &addrs, true)
                .into_bytes())
        }
        "print_ubacktrace" => {
            let text = format!("<no user backtrace at {}>\n", probe_point(rt));
            rt.write_output(text.as_bytes());
            l(0)
        }
        "print_stack" => {
            let mut out = String::new();
            for addr in stack_addresses(bytes(args, 0)) {
                out.push_str(&rt.symbols.frame(addr, true));
            }
            rt.write_output(out.as_bytes());
            l(0)
        }
        "sprint_stack" => {
            let mut out = String::new();
            for addr in stack_addresses(bytes(args, 0)) {
                out.push_str(&rt.symbols.frame(addr, false));
            }
            out.pop();
            s(out.into_bytes())
        }
        "symname" => s(rt.symbols.name(long(args, 0) as u64).into_bytes()),
        "symdata" => s(rt.symbols.data(long(args, 0) as u64).into_bytes()),
        "modname" => s(rt.symbols.module(long(args, 0) as u64).into_bytes()),
        "symfileline" | "symfile" | "symline" => {
            let addr = long(args, 0) as u64;
            let text = match rt.symbols.file_line(addr) {
                Some((file, line)) => match name {
                    "symfileline" => format!("{file}:{line}"),
                    "symfile" => file,
                    _ => line.to_string(),
                },
                None => format!("0x{addr:x}"),
            };
            s(text.into_bytes())
        }
        "enum_name" => {
            let enum_type = String::from_utf8_lossy(bytes(args, 0)).into_owned();
            s(rt.enums.name(&enum_type, long(args, 1)).into_bytes())
        }
        "exit" => {
            rt.exit_requested = true;
            l(0)
        }
        "abort" => {
            rt.exit_requested = true;
            rt.aborted = true;
            // Leave the handler at once (JIT code returns on `failed`),
            // with no error to report.
            rt.failed = 1;
            l(0)
        }
        "error" => Err(RuntimeError::Explicit(
            String::from_utf8_lossy(bytes(args, 0)).into_owned(),
        )),
        "assert" => {
            if long(args, 0) == 0 {
                let msg = match args.get(1) {
                    Some(Value::Str(m)) => String::from_utf8_lossy(m).into_owned(),
                    _ => "Assertion failed".into(),
                };
                Err(RuntimeError::Explicit(msg))
            } else {
                l(0)
            }
        }
        "warn" => {
            warn(&mut rt.output, bytes(args, 0));
            l(0)
        }
        "speculation" => l(rt.speculation.next_host_id()),
        "speculate" => {
            rt.speculation.add(long(args, 0), bytes(args, 1));
            l(0)
        }
        "commit" => {
            let text = rt.speculation.take(long(args, 0));
            rt.write_output(&text);
            l(0)
        }
        "discard" => {
            rt.speculation.discard(long(args, 0));
            l(0)
        }
        "system" => {
            rt.commands.queue(bytes(args, 0));
            l(0)
        }
        "log" | "println" | "print" | "printd" | "printdln" => {
            let mut out = joined(name, args);
            if matches!(name, "log" | "println" | "printdln") {
                out.push(b'\n');
            }
            rt.write_output(&out);
            l(0)
        }
        "sprint" | "sprintln" | "sprintd" => {
            let mut out = joined(name, args);
            if name == "sprintln" {
                out.push(b'\n');
            }
            s(out)
        }
        "regex_match" => l(rt.regexes.is_match(bytes(args, 0), bytes(args, 1))? as i64),
        "matched" => s(rt.regexes.group(long(args, 0))?),
        "__procfs_value" => s(rt.procfs.get().to_vec()),
        "__procfs_set" => {
            rt.procfs.set(bytes(args, 0));
            l(0)
        }
        "__procfs_append" => {
            rt.procfs.append(bytes(args, 0));
            l(0)
        }
        other => Err(RuntimeError::Unsupported(format!("{other}() on the host"))),
    }
}

/// `warn(msg)`: `WARNING: msg` on stderr, one newline whether or not the
/// message ends in one (as stap's `_stp_warn`).
/// `warn(msg)`: after the script's output so far, as in stap; a
/// `warning` event with `--format json`.
pub fn warn(output: &mut super::Output, message: &[u8]) {
    let message = message.strip_suffix(b"\n").unwrap_or(message);
    let _ = output.flush();
    let text = String::from_utf8_lossy(message);
    output.notice(super::Level::Warning, "warn", &text, &[]);
}

/// The running probe's point, as `pp()` gives it.
fn probe_point(rt: &HostRuntime) -> String {
    rt.probe_points
        .get(rt.probe)
        .map_or_else(String::new, |p| String::from_utf8_lossy(p).into_owned())
}

/// The addresses of a `backtrace()` string: hex numbers separated by
/// single spaces, read as stap does (up to the first empty token; a
/// token that is not hex reads as its leading hex digits, or 0).
pub(super) fn stack_addresses(stack: &[u8]) -> Vec<u64> {
    stack
        .split(|b| *b == b' ')
        .take_while(|token| !token.is_empty())
        .map(|token| {
            let digits = token
                .strip_prefix(b"0x")
                .or_else(|| token.strip_prefix(b"0X"))
                .unwrap_or(token);
            digits
                .iter()
                .map_while(|b| (*b as char).to_digit(16))
                .fold(0u64, |n, d| n.wrapping_mul(16).wrapping_add(d as u64))
        })
        .collect()
}

/// The text of a print-family call: `printd`/`sprintd` join with their
/// first argument, the others concatenate.
fn joined(name: &str, args: &[Value]) -> Vec<u8> {
    let (sep, values) = match name {
        "printd" | "printdln" | "sprintd" => (
            args.first().map(text).unwrap_or_default(),
            args.get(1..).unwrap_or(&[]),
        ),
        _ => (Vec::new(), args),
    };
    let mut out = Vec::new();
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(&sep);
        }
        out.extend(text(v));
    }
    out
}

/// `strtol` as the kernel's `simple_strtol` (which stap calls): an
/// optional `-`; base 0 chooses 16 for a `0x` prefix, 8 for a leading
/// `0`, else 10; base 16 skips a `0x`; digits end at the first byte that
/// is not one below the base. The kernel emitter does the same in BPF.
fn strtol(text: &[u8], base: i64) -> i64 {
    let neg = text.first() == Some(&b'-');
    let mut i = neg as usize;
    let zero_x =
        |i: usize| text.get(i) == Some(&b'0') && text.get(i + 1).is_some_and(|c| c | 0x20 == b'x');
    let mut base = base;
    if base == 0 || base == 16 {
        if zero_x(i) {
            base = 16;
            i += 2;
        } else if base == 0 {
            base = if text.get(i) == Some(&b'0') { 8 } else { 10 };
        }
    }
    let mut value: i64 = 0;
    for &c in &text[i.min(text.len())..] {
        let digit = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'z' => c - b'a' + 10,
            b'A'..=b'Z' => c - b'A' + 10,
            _ => break,
        } as i64;
        if digit >= base {
            break;
        }
        value = value.wrapping_mul(base).wrapping_add(digit);
    }
    if neg { value.wrapping_neg() } else { value }
}

/// `text_str`: C-style escapes for non-printable bytes.
/// stap's `cmdline_args(n, m, delim)` over this process's arguments:
/// arguments n to m (all from n when m < 0; none when 0 <= m < n) joined
/// by `delim`, an empty one after the first written as `""`. The kernel
/// side (`bpf::emit::strfuncs`) follows the same rule.
fn cmdline_args(first: i64, last: i64, delim: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (nr, arg) in std::env::args_os().enumerate() {
        let nr = nr as i64;
        if last >= 0 && nr > last {
            break;
        }
        let arg = arg.into_encoded_bytes();
        if nr == first {
            out = arg;
        } else if nr > first {
            out.extend_from_slice(delim);
            if arg.is_empty() {
                out.extend_from_slice(b"\"\"");
            } else {
                out.extend_from_slice(&arg);
            }
        }
    }
    out
}

/// `src` with stap's escapes, stopping before an escape that would take
/// the text past `limit` bytes (stap does not split one).
fn escape(src: &[u8], limit: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for &b in src {
        let piece = escape_byte(b);
        if out.len() + piece.len() > limit {
            break;
        }
        out.extend(piece);
    }
    out
}

/// One byte as `text_str` writes it: stap's C escapes (its
/// `_stp_text_str`); the kernel side (`bpf::emit::strfuncs`) writes the
/// same.
fn escape_byte(b: u8) -> Vec<u8> {
    match b {
        7 => b"\\a".to_vec(),
        8 => b"\\b".to_vec(),
        12 => b"\\f".to_vec(),
        11 => b"\\v".to_vec(),
        b'\n' => b"\\n".to_vec(),
        b'\t' => b"\\t".to_vec(),
        b'\r' => b"\\r".to_vec(),
        b'"' => b"\\\"".to_vec(),
        b'\\' => b"\\\\".to_vec(),
        0x20..=0x7e => vec![b],
        _ => format!("\\{b:03o}").into_bytes(),
    }
}

/// `text_strn(s, len, quoted)` with stap's rules (`_stp_text_str`): at most
/// `len` bytes of escapes (0, or more than MAXSTRINGLEN - 1: that), never
/// half an escape; `quoted` adds the quotes within `len` (at least 5), and
/// a text cut short ends in `"...`, moved back over the last bytes so the
/// whole is `max(len, 5)` bytes. At most MAXSTRINGLEN - 1 input bytes are
/// read; stap calls a text cut at exactly that many bytes complete.
fn text_strn(src: &[u8], len: i64, quoted: bool, max_string_len: usize) -> Vec<u8> {
    let limit = max_string_len.saturating_sub(1);
    let mut room = match usize::try_from(len) {
        Ok(n) if n > 0 && n <= limit => n,
        _ => limit,
    };
    let mut out = Vec::new();
    if quoted {
        room = room.max(5) - 2;
        out.push(b'"');
    }
    let mut unread = limit;
    // The byte that ended the walk; 0 at the end of the string.
    let mut last = 0u8;
    let mut at = 0;
    while unread > 0 {
        last = src.get(at).copied().unwrap_or(0);
        if last == 0 || room == 0 {
            break;
        }
        at += 1;
        unread -= 1;
        let piece = escape_byte(last);
        if room < piece.len() {
            break;
        }
        room -= piece.len();
        out.extend(piece);
    }
    if quoted {
        if last != 0 && unread > 0 {
            // `room` is below 4 here (no escape fitted), so this backs up
            // by 3 - room bytes, never over the opening quote.
            out.truncate(out.len() + room - 3);
            out.extend_from_slice(b"\"...");
        } else {
            out.push(b'"');
        }
    }
    out
}

/// The 1, 5 and 15 minute load averages as /proc/loadavg has them
/// ("0.52"): the kernel's avenrun[] rounded as stap's sprint_loadavg
/// rounds it.
fn load_averages() -> Option<Vec<String>> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let fields: Vec<String> = text
        .split_whitespace()
        .take(3)
        .map(str::to_string)
        .collect();
    (fields.len() == 3).then_some(fields)
}

/// The local time zone now: its offset east of UTC and its name, which
/// `tz_ctime` in kernel probes formats with (UTC when libc cannot tell).
pub fn local_time_zone() -> stap_lang::bpf::LocalTime {
    let t = now_ns() / 1_000_000_000;
    // SAFETY: zeroed `tm` is a valid output buffer for localtime_r.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call.
    if unsafe { libc::localtime_r(&(t as libc::time_t), &mut tm) }.is_null() || tm.tm_zone.is_null()
    {
        return stap_lang::bpf::LocalTime::default();
    }
    // SAFETY: tm_zone points to a NUL-terminated zone name from libc.
    let zone = unsafe { std::ffi::CStr::from_ptr(tm.tm_zone) };
    stap_lang::bpf::LocalTime::new(tm.tm_gmtoff, &zone.to_string_lossy())
}

/// `ctime`: `Thu Jan  1 00:00:00 1970` (UTC, or local time for `tz_ctime`).
pub fn ctime(secs: i64, local: bool) -> String {
    let t = secs as libc::time_t;
    // SAFETY: zeroed `tm` is a valid output buffer for the _r functions.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call.
    let ok = unsafe {
        if local {
            !libc::localtime_r(&t, &mut tm).is_null()
        } else {
            !libc::gmtime_r(&t, &mut tm).is_null()
        }
    };
    if !ok {
        return "<invalid time>".into();
    }
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let mut text = format!(
        "{} {} {:2} {:02}:{:02}:{:02} {}",
        DAYS[tm.tm_wday.rem_euclid(7) as usize],
        MONTHS[tm.tm_mon.rem_euclid(12) as usize],
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        tm.tm_year as i64 + 1900
    );
    if local && !tm.tm_zone.is_null() {
        // SAFETY: tm_zone points to a NUL-terminated zone name from libc.
        let zone = unsafe { std::ffi::CStr::from_ptr(tm.tm_zone) };
        text = format!("{text} {}", zone.to_string_lossy());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::text_strn;

    fn strn(s: &str, len: i64, quoted: bool) -> String {
        String::from_utf8(text_strn(s.as_bytes(), len, quoted, 512)).expect("ASCII")
    }

    #[test]
    fn text_strn_cuts_between_escapes_and_marks_a_quoted_cut() {
        assert_eq!(strn("hello", 0, false), "hello");
        assert_eq!(strn("hello", -4, false), "hello");
        assert_eq!(strn("hello", 3, false), "hel");
        // `\n` needs two bytes: with one left it is not started.
        assert_eq!(strn("a\nb", 2, false), "a");
        assert_eq!(strn("a\nb", 3, false), "a\\n");
        assert_eq!(strn("hello", 0, true), "\"hello\"");
        assert_eq!(strn("ab", 3, true), "\"ab\"");
        // Cut short: `"...` ends it and the whole is max(len, 5) bytes.
        assert_eq!(strn("hello world", 8, true), "\"hel\"...");
        assert_eq!(strn("abcdef", 1, true), "\"\"...");
        // stap backs up over whole bytes, even into an escape.
        assert_eq!(strn("a\x01bcdef", 7, true), "\"a\\\"...");
        let long = "x".repeat(600);
        assert_eq!(strn(&long, 0, false).len(), 511);
    }
}
