//! The built-in function table: every function a script may call without
//! defining it, with its signature and where it can run.
//!
//! Signatures follow SystemTap's tapset reference (`function::NAME(3stap)`).
//! The network helpers (`ip_ntop`, `tcp_sockstate_str`, ...) are not here:
//! they are stdlib functions written in .stp.
//!
//! `host`/`kernel` say where a call can be evaluated. A function with only
//! `kernel` needs probe context (the current task, kernel memory, the
//! stack), so code calling it must run in a kernel probe; one with only
//! `host` forces the value to be computed on the host (in a host probe, or
//! from data a kernel probe sent up).

use ParamType::{Any, Long as L, String as S};

/// The type of one parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    Long,
    String,
    /// A long or a string (the printing functions).
    Any,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReturnType {
    Long,
    String,
    Void,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Builtin {
    pub name: &'static str,
    /// Fixed parameters, in order.
    pub params: &'static [ParamType],
    /// How many trailing entries of `params` may be omitted.
    pub optional: usize,
    /// Any number of further arguments of this type after `params`.
    pub variadic: Option<ParamType>,
    pub ret: ReturnType,
    /// Can be evaluated in host-side code.
    pub host: bool,
    /// Can be evaluated in a kernel (BPF) probe.
    pub kernel: bool,
    /// One line for completion and `--dump-functions`-style listings.
    pub doc: &'static str,
    /// A lowering target, not callable by name from a script.
    pub internal: bool,
    /// The kernel type the returned address points to, for autocast
    /// (`task_current()->pid`): stap types these returns through DWARF.
    pub pointee: Option<&'static str>,
}

impl Builtin {
    /// The smallest number of arguments a call may pass.
    pub fn min_args(&self) -> usize {
        self.params.len() - self.optional
    }

    /// The largest number of arguments, or `None` for a variadic function.
    pub fn max_args(&self) -> Option<usize> {
        match self.variadic {
            Some(_) => None,
            None => Some(self.params.len()),
        }
    }

    /// The expected type of argument `index`, or `None` past the end.
    pub fn param(&self, index: usize) -> Option<ParamType> {
        self.params.get(index).copied().or(self.variadic)
    }
}

/// Looks a built-in up by name (internal ones too: the IR names them).
pub fn lookup(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// Looks up a built-in a script may call by name.
pub fn callable(name: &str) -> Option<&'static Builtin> {
    lookup(name).filter(|b| !b.internal)
}

/// The register arguments of the probed function (`int_arg(N)`, ...).
pub const REGISTER_ARGS: &[&str] = &[
    "int_arg",
    "uint_arg",
    "long_arg",
    "ulong_arg",
    "pointer_arg",
];

/// stap's fixed-width names of the register arguments (`s32_arg(N)` is
/// `int_arg(N)`, ...): the built-in each stands for.
pub fn register_arg_alias(name: &str) -> Option<&'static str> {
    Some(match name {
        "s32_arg" => "int_arg",
        "u32_arg" => "uint_arg",
        "s64_arg" | "longlong_arg" => "long_arg",
        "u64_arg" | "ulonglong_arg" => "ulong_arg",
        _ => return None,
    })
}

/// The built-in `s =~ re` lowers to: 1 on a match, else 0.
pub const REGEX_MATCH: &str = "regex_match";
/// The random bits `randint(n)` lowers to (`ir::lower::builtin`).
pub const RANDOM_U32: &str = "__random_u32";
/// What `$value` in a procfs probe lowers to: reading it, `$value = s`
/// and `$value .= s` (see `sema::lower`).
pub const PROCFS_VALUE: &str = "__procfs_value";
pub const PROCFS_SET: &str = "__procfs_set";
pub const PROCFS_APPEND: &str = "__procfs_append";
/// What `$ctx` in an LSM probe lowers to (the address of the hook's
/// argument array).
pub const LSM_CTX: &str = "__lsm_ctx";
/// What setting a kernel program's verdict under -g lowers to: `$return = e`
/// in an LSM probe, `$verdict = e` in a netfilter probe.
pub const SET_VERDICT: &str = "__set_verdict";

/// Every built-in, grouped as in the tapset reference.
pub fn all() -> &'static [Builtin] {
    BUILTINS
}

/// Table rows are built with these, to keep each entry on one line.
const fn both(
    name: &'static str,
    params: &'static [ParamType],
    ret: ReturnType,
    doc: &'static str,
) -> Builtin {
    Builtin {
        name,
        params,
        optional: 0,
        variadic: None,
        ret,
        host: true,
        kernel: true,
        doc,
        internal: false,
        pointee: None,
    }
}

const fn kernel_only(
    name: &'static str,
    params: &'static [ParamType],
    ret: ReturnType,
    doc: &'static str,
) -> Builtin {
    Builtin {
        host: false,
        ..both(name, params, ret, doc)
    }
}

const fn host_only(
    name: &'static str,
    params: &'static [ParamType],
    ret: ReturnType,
    doc: &'static str,
) -> Builtin {
    Builtin {
        kernel: false,
        ..both(name, params, ret, doc)
    }
}

/// `b` as a lowering target that scripts cannot call by name.
const fn internal(b: Builtin) -> Builtin {
    Builtin {
        internal: true,
        ..b
    }
}

/// `b` with its last `n` parameters optional.
const fn optional(n: usize, b: Builtin) -> Builtin {
    Builtin { optional: n, ..b }
}

/// `b` returning the address of a kernel object of type `ty`.
const fn points_to(ty: &'static str, b: Builtin) -> Builtin {
    Builtin {
        pointee: Some(ty),
        ..b
    }
}

/// `b` taking any number of extra arguments of type `ty`.
const fn variadic(ty: ParamType, b: Builtin) -> Builtin {
    Builtin {
        variadic: Some(ty),
        ..b
    }
}

const LONG: ReturnType = ReturnType::Long;
const STRING: ReturnType = ReturnType::String;
const VOID: ReturnType = ReturnType::Void;

// One row per built-in; rustfmt would spread each over eight lines.
#[rustfmt::skip]
const BUILTINS: &[Builtin] = &[
    // Output. Kernel probes print through the ring buffer; the host formats.
    variadic(Any, both("print", &[Any], VOID, "Print values with no separator (stap documents one value; more are concatenated)")),
    variadic(Any, both("println", &[], VOID, "Print values followed by a newline (none: just the newline, as stap)")),
    variadic(Any, both("printf", &[S], VOID, "Print values under a literal format string")),
    variadic(Any, both("sprintf", &[S], STRING, "Format values under a literal format string into a string")),
    variadic(Any, both("printd", &[S, Any, Any], VOID, "Print two or more values separated by a delimiter")),
    variadic(Any, both("printdln", &[S, Any, Any], VOID, "Print two or more values separated by a delimiter, then a newline")),
    variadic(Any, both("sprintd", &[S, Any, Any], STRING, "Join two or more values with a delimiter into a string")),
    both("sprint", &[Any], STRING, "Convert one value to a string"),
    both("sprintln", &[Any], STRING, "Convert one value to a string followed by a newline"),
    // Process context.
    both("execname", &[], STRING, "Name of the current process"),
    both("pid", &[], LONG, "Process (thread group) id of the current task"),
    both("tid", &[], LONG, "Thread id of the current task"),
    both("ppid", &[], LONG, "Process id of the current task's parent"),
    both("uid", &[], LONG, "Real user id of the current task"),
    both("gid", &[], LONG, "Real group id of the current task"),
    both("euid", &[], LONG, "Effective user id of the current task"),
    both("cpu", &[], LONG, "Number of the current CPU"),
    both("cmdline_str", &[], STRING, "Command line of the current process, arguments joined by spaces"),
    both("cmdline_arg", &[L], STRING, "Argument n of the current process's command line (0 is the program)"),
    both("cmdline_args", &[L, L, S], STRING, "Arguments n to m (-1: to the last) of the current process, joined by a delimiter"),
    both("target", &[], LONG, "Process id given with -x, or of the command started with -c"),
    both("pp", &[], STRING, "The probe point that fired, as written after resolution"),
    both("probefunc", &[], STRING, "Name of the function being probed"),
    both("probemod", &[], STRING, "Name of the module the probed function lives in"),
    both("ppfunc", &[], STRING, "Function name parsed from the probe point"),
    both("pn", &[], STRING, "The probe point as the script wrote it, wildcards included"),
    both("probe_type", &[], STRING, "Kind of low-level probe handler the probe runs in (stap's names: kprobe, kernel_tracepoint, begin_end, ...)"),
    both("is_return", &[], LONG, "1 in a return probe (a kernel or user function's .return), else 0"),
    both("caller_addr", &[], LONG, "Address in the caller of the probed function (0 in host probes)"),
    both("user_mode", &[], LONG, "1 if the probe fired in user mode, else 0"),
    points_to("struct task_struct", kernel_only("task_current", &[], LONG, "Address of the current task_struct")),
    both("pid2execname", &[L], STRING, "Name of the task with this pid (\"\" if none)"),
    points_to("struct task_struct", kernel_only("pid2task", &[L], LONG, "Address of the task_struct with this pid (0 if none)")),
    both("stp_pid", &[], LONG, "Process id of the stap-rs process that runs the script (stap: stapio's)"),
    // The kernel's avenrun[] is a global BPF cannot name: /proc/loadavg.
    host_only("get_loadavg_index", &[L], LONG, "Integer part of the load average: index 0, 1, 2 for 1, 5, 15 minutes"),
    host_only("sprint_loadavg", &[], STRING, "The 1, 5 and 15 minute load averages as /proc/loadavg prints them"),
    both("randint", &[L], LONG, "Random number in [0, n), n at most 2**20"),
    internal(both(RANDOM_U32, &[], LONG, "Internal: 32 random bits, what randint() scales (not callable by name)")),
    kernel_only("addr", &[], LONG, "Address of the probed function in kernel.function and process probes (0 in other kernel probes)"),
    // Time.
    both("gettimeofday_s", &[], LONG, "Seconds since the epoch"),
    both("gettimeofday_ms", &[], LONG, "Milliseconds since the epoch"),
    both("gettimeofday_us", &[], LONG, "Microseconds since the epoch"),
    both("gettimeofday_ns", &[], LONG, "Nanoseconds since the epoch"),
    both("get_cycles", &[], LONG, "Processor cycle counter"),
    kernel_only("jiffies", &[], LONG, "Kernel jiffies count"),
    both("ktime_get_ns", &[], LONG, "Nanoseconds of monotonic time since boot"),
    both("local_clock_ns", &[], LONG, "Nanoseconds of the CPU-local clock"),
    // stap passes the zone to the module when it starts; here it is the
    // host's zone when the script is compiled, the same moment.
    both("tz_gmtoff", &[], LONG, "Offset of the local time zone in seconds west of UTC, when the script started"),
    both("tz_name", &[], STRING, "Name of the local time zone, when the script started"),
    both("ctime", &[L], STRING, "Format seconds since the epoch as a UTC date"),
    both("tz_ctime", &[L], STRING, "Format seconds since the epoch as a date in the local time zone"),
    // Kernel memory: BPF reads it in kernel probes, the host through
    // /proc/kcore (`runtime/src/host/kmem.rs`).
    optional(1, both("kernel_string", &[L, S], STRING, "NUL-terminated string at a kernel address (optional string to return on fault)")),
    both("kernel_string_n", &[L, L], STRING, "String of at most n bytes at a kernel address"),
    both("kernel_string2", &[L, S], STRING, "String at a kernel address, or the given string on fault"),
    both("kernel_long", &[L], LONG, "Long at a kernel address"),
    both("kernel_int", &[L], LONG, "Int at a kernel address"),
    both("kernel_short", &[L], LONG, "Short at a kernel address"),
    both("kernel_char", &[L], LONG, "Char at a kernel address"),
    both("kernel_pointer", &[L], LONG, "Pointer at a kernel address"),
    // User memory of the current task.
    optional(1, kernel_only("user_string", &[L, S], STRING, "NUL-terminated string at a user address (optional string to return on fault)")),
    optional(1, kernel_only("user_string_n", &[L, L, S], STRING, "String of at most n bytes at a user address (optional string to return on fault)")),
    // Integers at a user address (`read_kind` in the BPF emitter): the
    // plain name returns 0 when the memory cannot be read, the `_error`
    // one raises stap's fault error (the `_warn` ones are stdlib).
    kernel_only("user_char", &[L], LONG, "Char (signed 8-bit) at a user address (0 on fault)"),
    kernel_only("user_short", &[L], LONG, "Short (signed 16-bit) at a user address (0 on fault)"),
    kernel_only("user_ushort", &[L], LONG, "Unsigned short at a user address (0 on fault)"),
    kernel_only("user_int", &[L], LONG, "Int (signed 32-bit) at a user address (0 on fault)"),
    kernel_only("user_long", &[L], LONG, "Long (signed 64-bit) at a user address (0 on fault)"),
    kernel_only("user_ulong", &[L], LONG, "Unsigned long at a user address (0 on fault)"),
    kernel_only("user_int8", &[L], LONG, "Signed 8-bit integer at a user address (0 on fault)"),
    kernel_only("user_uint8", &[L], LONG, "Unsigned 8-bit integer at a user address (0 on fault)"),
    kernel_only("user_int16", &[L], LONG, "Signed 16-bit integer at a user address (0 on fault)"),
    kernel_only("user_uint16", &[L], LONG, "Unsigned 16-bit integer at a user address (0 on fault)"),
    kernel_only("user_int32", &[L], LONG, "Signed 32-bit integer at a user address (0 on fault)"),
    kernel_only("user_uint32", &[L], LONG, "Unsigned 32-bit integer at a user address (0 on fault)"),
    kernel_only("user_int64", &[L], LONG, "Signed 64-bit integer at a user address (0 on fault)"),
    kernel_only("user_uint64", &[L], LONG, "Unsigned 64-bit integer at a user address (0 on fault)"),
    kernel_only("user_char_error", &[L], LONG, "Char (signed 8-bit) at a user address (a run-time error on fault)"),
    kernel_only("user_short_error", &[L], LONG, "Short (signed 16-bit) at a user address (a run-time error on fault)"),
    kernel_only("user_ushort_error", &[L], LONG, "Unsigned short at a user address (a run-time error on fault)"),
    kernel_only("user_int_error", &[L], LONG, "Int (signed 32-bit) at a user address (a run-time error on fault)"),
    kernel_only("user_long_error", &[L], LONG, "Long (signed 64-bit) at a user address (a run-time error on fault)"),
    kernel_only("user_ulong_error", &[L], LONG, "Unsigned long at a user address (a run-time error on fault)"),
    kernel_only("user_int8_error", &[L], LONG, "Signed 8-bit integer at a user address (a run-time error on fault)"),
    kernel_only("user_uint8_error", &[L], LONG, "Unsigned 8-bit integer at a user address (a run-time error on fault)"),
    kernel_only("user_int16_error", &[L], LONG, "Signed 16-bit integer at a user address (a run-time error on fault)"),
    kernel_only("user_uint16_error", &[L], LONG, "Unsigned 16-bit integer at a user address (a run-time error on fault)"),
    kernel_only("user_int32_error", &[L], LONG, "Signed 32-bit integer at a user address (a run-time error on fault)"),
    kernel_only("user_uint32_error", &[L], LONG, "Unsigned 32-bit integer at a user address (a run-time error on fault)"),
    kernel_only("user_int64_error", &[L], LONG, "Signed 64-bit integer at a user address (a run-time error on fault)"),
    kernel_only("user_uint64_error", &[L], LONG, "Unsigned 64-bit integer at a user address (a run-time error on fault)"),
    // Register arguments of the probed function ("DWARF-less" probing in
    // kernel.function and process probes, and the arguments of a system
    // call at its syscalls:sys_enter_* event); N is a constant 1..6.
    // (In a system call's return they are the call's arguments, read at
    // its enter event: `lower.rs`, `at_syscall_entry`.)
    kernel_only("int_arg", &[L], LONG, "Argument N of the probed function as a signed 32-bit int"),
    kernel_only("uint_arg", &[L], LONG, "Argument N of the probed function as an unsigned 32-bit int"),
    kernel_only("long_arg", &[L], LONG, "Argument N of the probed function as a signed long"),
    kernel_only("ulong_arg", &[L], LONG, "Argument N of the probed function as an unsigned long"),
    kernel_only("pointer_arg", &[L], LONG, "Argument N of the probed function as a pointer"),
    kernel_only("returnval", &[], LONG, "The probed function's return value (in a .return probe or at a system call's exit)"),
    // Named registers of a kprobe's or uprobe's `pt_regs` (x86_64 names).
    kernel_only("register", &[S], LONG, "The named CPU register at the probe (rax, edi, r8...), signed"),
    kernel_only("u_register", &[S], LONG, "The named CPU register at the probe, unsigned"),
    // Symbols and backtraces. Addresses are symbolized on the host.
    both("symname", &[L], STRING, "Symbol name of a kernel address"),
    both("symdata", &[L], STRING, "Symbol, offset and size of a kernel address: name+0x12/0x40"),
    both("modname", &[L], STRING, "Module name of a kernel address"),
    // Source lines come from the kernel's DWARF, read on the host.
    host_only("symfileline", &[L], STRING, "Source file:line of a kernel address, from the kernel's DWARF (the address in hex when unknown)"),
    host_only("symfile", &[L], STRING, "Source file of a kernel address, from the kernel's DWARF (the address in hex when unknown)"),
    host_only("symline", &[L], STRING, "Source line of a kernel address, from the kernel's DWARF (the address in hex when unknown)"),
    both("print_backtrace", &[], VOID, "Print the kernel stack of the probe, symbolized (host probes have none)"),
    both("backtrace", &[], STRING, "Kernel stack of the probe as hex addresses (host probes have none)"),
    both("sprint_backtrace", &[], STRING, "Kernel stack of the probe, symbolized, as a string (host probes have none)"),
    both("print_ubacktrace", &[], VOID, "Print the user stack of the current task, symbolized (host probes have none)"),
    both("sprint_ubacktrace", &[], STRING, "User stack of the current task, symbolized, as a string (host probes have none)"),
    both("ubacktrace", &[], STRING, "User stack of the current task as hex addresses (host probes have none)"),
    both("print_syms", &[S], VOID, "Print a backtrace() string, symbolized (as print_stack)"),
    both("print_usyms", &[S], VOID, "Print a ubacktrace() string, symbolized against the current process"),
    both("print_ustack", &[S], VOID, "Print a ubacktrace() string, symbolized against the current process (as print_usyms)"),
    both("sprint_ustack", &[S], STRING, "Symbolize a ubacktrace() string against the current process"),
    // One user address of the current process, named on the host when
    // printed (kernel probes) or against stap-rs itself (host probes).
    both("usymname", &[L], STRING, "Symbol of a user address in the current process (the address in hex when unknown)"),
    both("usymdata", &[L], STRING, "Symbol, offset, size and file of a user address: name+0x12/0x40 [/usr/bin/prog]"),
    both("umodname", &[L], STRING, "File mapped at a user address of the current process (<unknown> when none)"),
    both("sprint_syms", &[S], STRING, "A backtrace() string symbolized, one ' ADDR : symdata' line per address"),
    both("sprint_usyms", &[S], STRING, "A ubacktrace() string symbolized against the current process, as print_usyms prints it"),
    both("print_ubacktrace_brief", &[], VOID, "Print the user stack of the current task, one name+offset a line (host probes have none)"),
    both("stack", &[L], LONG, "Address at depth n of the kernel stack, as backtrace() lists it (0 past its end; host probes have none)"),
    both("ustack", &[L], LONG, "Address at depth n of the user stack, as ubacktrace() lists it (0 past its end; host probes have none)"),
    kernel_only("task_backtrace", &[L], STRING, "Kernel stack of the given task as hex addresses"),
    both("print_stack", &[S], VOID, "Print a backtrace() string, symbolized"),
    both("sprint_stack", &[S], STRING, "Symbolize a backtrace() string"),
    // Strings.
    both("strlen", &[S], LONG, "Length of a string in bytes"),
    both("substr", &[S, L, L], STRING, "Substring from a start offset with a length"),
    both("isinstr", &[S, S], LONG, "1 if the second string occurs in the first"),
    both("strpos", &[S, S], LONG, "Offset of the first occurrence of the second string, or -1"),
    both("stringat", &[S, L], LONG, "Byte at an offset of a string"),
    both("str_replace", &[S, S, S], STRING, "Replace every occurrence of a substring"),
    host_only("tokenize", &[S, S], STRING, "Next token of a string split on delimiters; empty input continues the last string"),
    both("text_str", &[S], STRING, "String with non-printable characters escaped"),
    host_only("string_quoted", &[S], STRING, "String quoted, with non-printable characters escaped"),
    both("text_strn", &[S, L, L], STRING, "String with non-printable characters escaped, at most len bytes, optionally quoted"),
    both("strtol", &[S, L], LONG, "Parse a string as an integer in the given base (0: by its prefix)"),
    both("isdigit", &[S], LONG, "1 if the string starts with an ASCII digit"),
    both("abs", &[L], LONG, "Absolute value"),
    host_only("matched", &[L], STRING, "Text matched by subexpression n of the last =~ match"),
    internal(both(REGEX_MATCH, &[S, S], LONG, "Internal: what `s =~ re` lowers to, 1 on a match (not callable by name)")),
    internal(host_only(PROCFS_VALUE, &[], STRING, "Internal: `$value` in a procfs probe")),
    internal(host_only(PROCFS_SET, &[S], VOID, "Internal: `$value = s` in a procfs probe")),
    internal(host_only(PROCFS_APPEND, &[S], VOID, "Internal: `$value .= s` in a procfs probe")),
    internal(kernel_only(LSM_CTX, &[], LONG, "Internal: `$ctx` in an LSM probe, the address of the hook's arguments")),
    internal(kernel_only(SET_VERDICT, &[L], VOID, "Internal: `$return = e` in an LSM probe, `$verdict = e` in a netfilter probe (-g)")),
    both("enum_name", &[S, L], STRING, "stap-rs: name of a value of a kernel enum, e.g. enum_name(\"skb_drop_reason\", $reason)"),
    // Control.
    both("exit", &[], VOID, "End the session after the current probe: end probes run"),
    both("error", &[S], VOID, "Raise a run-time error with a message"),
    both("warn", &[S], VOID, "Print a warning to stderr"),
    both("speculation", &[], LONG, "A new id for speculative output"),
    both("speculate", &[L, S], VOID, "Add text to the speculative output of id, printed only if it is committed"),
    both("commit", &[L], VOID, "Print the speculative output of id, in the order it was added, and free it"),
    both("discard", &[L], VOID, "Drop the speculative output of id"),
    both("system", &[S], VOID, "Run a shell command on the host, in the background, once the probe is done"),
    both("abort", &[], VOID, "End the session at once: end probes do not run"),
    both("log", &[S], VOID, "Print a message and a newline"),
    optional(1, both("assert", &[L, S], VOID, "Raise an error if the expression is false")),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every function named in subset.md's "Built-in functions" list, except
    /// the network ones (stdlib .stp functions).
    #[rustfmt::skip]
    const SUBSET_BUILTINS: &[&str] = &[
        // Output
        "print", "println", "printf", "sprintf", "printd", "printdln", "sprintd",
        // Process context
        "execname", "pid", "tid", "ppid", "uid", "gid", "euid", "cpu", "cmdline_str", "target", "pp",
        "probefunc", "probemod", "ppfunc",
        // Time
        "gettimeofday_s", "gettimeofday_ms", "gettimeofday_us", "gettimeofday_ns", "get_cycles",
        "jiffies", "ktime_get_ns", "local_clock_ns", "ctime", "tz_ctime",
        // Kernel memory
        "kernel_string", "kernel_string_n", "kernel_string2", "kernel_long", "kernel_int",
        "kernel_short", "kernel_char", "kernel_pointer",
        // User memory
        "user_string", "user_string_n", "user_long", "user_int",
        // Symbols and backtraces
        "symname", "symdata", "modname", "print_backtrace", "backtrace", "sprint_backtrace",
        "print_ubacktrace", "task_backtrace",
        // Strings
        "strlen", "substr", "isinstr", "strpos", "str_replace", "tokenize", "text_str", "stringat",
        "strtol", "string_quoted", "sprint_stack",
        // Control
        "exit", "error", "warn", "abort", "log", "assert", "print_stack",
        // Extensions named in the brief
        "enum_name", "matched", "abs", "isdigit",
    ];

    #[test]
    fn every_subset_builtin_is_present() {
        let missing: Vec<_> = SUBSET_BUILTINS
            .iter()
            .filter(|n| lookup(n).is_none())
            .collect();
        assert!(missing.is_empty(), "missing built-ins: {missing:?}");
    }

    #[test]
    fn names_are_unique_and_entries_consistent() {
        for (i, b) in all().iter().enumerate() {
            assert!(
                all()[..i].iter().all(|o| o.name != b.name),
                "duplicate {}",
                b.name
            );
            assert!(
                b.optional <= b.params.len(),
                "{}: too many optional params",
                b.name
            );
            assert!(b.host || b.kernel, "{} runs nowhere", b.name);
            assert!(!b.doc.is_empty(), "{} has no doc", b.name);
        }
    }

    #[test]
    fn stap_register_arg_names_stand_for_the_builtins() {
        assert_eq!(register_arg_alias("s32_arg"), Some("int_arg"));
        assert_eq!(register_arg_alias("ulonglong_arg"), Some("ulong_arg"));
        assert_eq!(register_arg_alias("int_arg"), None);
        assert!(callable(RANDOM_U32).is_none() && lookup(RANDOM_U32).is_some());
    }

    #[test]
    fn regex_match_is_internal() {
        assert!(lookup(REGEX_MATCH).is_some_and(|b| b.host && b.kernel));
        assert!(callable(REGEX_MATCH).is_none());
        assert!(callable("matched").is_some());
    }

    #[test]
    fn network_helpers_are_not_builtins() {
        for name in ["ip_ntop", "htons", "tcp_sockstate_str", "format_ipaddr"] {
            assert!(lookup(name).is_none(), "{name} belongs to the stdlib");
        }
    }

    #[test]
    fn signatures() {
        let printf = lookup("printf").unwrap();
        assert_eq!((printf.min_args(), printf.max_args()), (1, None));
        assert_eq!(printf.param(0), Some(ParamType::String));
        assert_eq!(printf.param(5), Some(ParamType::Any));
        assert_eq!(printf.ret, ReturnType::Void);

        let exit = lookup("exit").unwrap();
        assert_eq!((exit.min_args(), exit.max_args()), (0, Some(0)));
        assert!(exit.host && exit.kernel);

        let ks = lookup("kernel_string").unwrap();
        assert_eq!((ks.min_args(), ks.max_args()), (1, Some(2)));
        assert_eq!(ks.ret, ReturnType::String);
        assert!(ks.kernel && ks.host);
        assert!(!lookup("user_string").unwrap().host);

        let printd = lookup("printd").unwrap();
        assert_eq!(printd.min_args(), 3);

        assert!(!lookup("task_backtrace").unwrap().host);
        assert!(!lookup("tokenize").unwrap().kernel);
        assert!(lookup("ctime").unwrap().host && lookup("ctime").unwrap().kernel);
        assert!(lookup("gettimeofday_ns").unwrap().kernel);
        assert_eq!(
            lookup("strtol").unwrap().params,
            [ParamType::String, ParamType::Long]
        );
    }
}
