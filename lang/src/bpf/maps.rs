//! The maps every BPF object has besides the script's globals, and their
//! value layouts, shared by the emitter and the runtime.
//!
//! - **Control** (`ARRAY`, one entry, key `0u32`): `u64` slots
//!   [`CONTROL_RUN`] (handlers run only while it is 1) and
//!   [`CONTROL_TIME_OFFSET`] (nanoseconds to add to `bpf_ktime_get_ns` to get
//!   the wall clock, for `gettimeofday_*`) and [`CONTROL_TARGET`] (the pid
//!   `target()` returns: `-x PID` or the `-c` command's), [`CONTROL_STP_PID`]
//!   and [`CONTROL_SPECULATION`] (`speculation()`'s counter). The emitter reads it with a
//!   direct map-value load (`BPF_PSEUDO_MAP_VALUE`), so no helper call.
//! - **Counters** (`PERCPU_ARRAY`, one entry, key `0u32`): [`COUNTER_SLOTS`]
//!   `u64` slots per CPU, indexed by the `COUNTER_*` constants. The host sums
//!   them over CPUs at exit.
//! - **Scratch** (`PERCPU_ARRAY`, [`NESTING_LEVELS`] entries): one region
//!   per nesting level on each CPU (a perf NMI can interrupt a tracepoint
//!   handler on the same CPU; each gets its own region). A handler takes the
//!   level from `COUNTER_DEPTH` at entry and gives it back at exit; deeper
//!   nesting skips the handler and counts `COUNTER_SKIPPED`.
//! - **Events** (`RINGBUF`): the records of `records.rs`.

use super::{MapRole, MapSpec};

/// `BPF_MAP_TYPE_*` values used here.
pub const MAP_HASH: u32 = 1;
pub const MAP_ARRAY: u32 = 2;
pub const MAP_PERCPU_HASH: u32 = 5;
pub const MAP_PERCPU_ARRAY: u32 = 6;
pub const MAP_LRU_HASH: u32 = 9;
pub const MAP_RINGBUF: u32 = 27;

/// Control value slots (each a `u64`).
pub const CONTROL_RUN: u32 = 0;
pub const CONTROL_TIME_OFFSET: u32 = 1;
pub const CONTROL_TARGET: u32 = 2;
/// The pid of the stap-rs process, for `stp_pid()`.
pub const CONTROL_STP_PID: u32 = 3;
/// The last id `speculation()` gave out in a kernel probe (an atomic
/// fetch-add; the host leaves it alone when it writes the other slots).
pub const CONTROL_SPECULATION: u32 = 4;
pub const CONTROL_SLOTS: u32 = 5;

/// Counter slots (each a `u64`, per CPU).
/// The current nesting depth on this CPU (not a count: a level index).
pub const COUNTER_DEPTH: u32 = 0;
/// Ring-buffer records that did not fit (stap's lost events).
pub const COUNTER_LOST_EVENTS: u32 = 1;
/// Inserts into a full array (stap's "array overflow").
pub const COUNTER_MAP_OVERFLOW: u32 = 2;
/// Handlers skipped because they nested deeper than [`NESTING_LEVELS`].
pub const COUNTER_SKIPPED: u32 = 3;
pub const COUNTER_SLOTS: u32 = 4;

/// Scratch regions per CPU.
pub const NESTING_LEVELS: u32 = 4;

/// A per-CPU map value may not exceed 32 KiB (`PCPU_MIN_UNIT_SIZE`).
pub const MAX_SCRATCH_BYTES: u32 = 32 * 1024;

/// The ring buffer's size for `cpus` CPUs. Handlers that print (printf,
/// print, `print_hist`) get 4 MiB per CPU, at least 8 MiB and at most
/// 32 MiB (a power-of-two number of pages): every CPU's handlers write
/// into it at once while one host thread reads it, so the room for a
/// burst grows with the producers; at 1 MiB, a printf per getppid on one
/// CPU outran the host and lost about 10 % of its events
/// (bench/analysis.md). Handlers that only count send a record only on
/// `exit()`, a warning or an error, and keep 1 MiB: every MiB here is a
/// MiB of kernel memory (the host maps only a window of it, the runtime's
/// `ringbuf.rs`), and creating the 8 MiB ring takes about 2 ms of
/// start-up (bench/analysis.md).
pub fn events_bytes(cpus: u32, kernel_prints: bool) -> u32 {
    const PER_CPU: u64 = 4 << 20;
    if !kernel_prints {
        return 1 << 20;
    }
    let wanted = (u64::from(cpus.max(1)) * PER_CPU).next_power_of_two();
    wanted.clamp(8 << 20, 32 << 20) as u32
}

/// The events ring buffer's map as the compiler declares it, so that the
/// host can create it ahead of the compiler (`stap_runtime::load::early`).
pub fn events_map(cpus: u32, kernel_prints: bool) -> MapSpec {
    MapSpec {
        name: "stap_events".to_string(),
        map_type: MAP_RINGBUF,
        key_size: 0,
        value_size: 0,
        max_entries: events_bytes(cpus, kernel_prints),
        flags: 0,
        role: MapRole::Events,
    }
}

#[cfg(test)]
mod tests {
    use super::events_bytes;

    #[test]
    fn only_printing_handlers_get_the_large_ring() {
        assert_eq!(events_bytes(2, false), 1 << 20);
        assert_eq!(events_bytes(64, false), 1 << 20);
        assert_eq!(events_bytes(1, true), 8 << 20);
        assert_eq!(events_bytes(2, true), 8 << 20);
        assert_eq!(events_bytes(3, true), 16 << 20);
        assert_eq!(events_bytes(64, true), 32 << 20);
    }
}
