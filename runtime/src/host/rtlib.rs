//! The run-time library JIT-compiled host code calls. Every function is
//! `extern "C"`, takes the runtime first and only `i64`s after it (longs,
//! string handles, ids, pointers to `i64` arrays on the JIT frame). A
//! failing call records the error in the runtime and returns 0; the JIT
//! code checks `HostRuntime::failed` and returns.

use std::cmp::Ordering;

use stap_lang::ir::GlobalId;
use stap_lang::ir::{HistKind, SortBy, StatValue, ValType};
use stap_lang::printf::{self, ArgKind, Conversion, Piece};

use super::value::{Element, ElementValue, Key, Value, key_types, value_type};
use super::{HostRuntime, MAX_NESTING, RuntimeError, StrHandle, builtins, hist};

/// A foreach snapshot, in loop order, and its position.
pub struct Iter {
    elements: Vec<Element>,
    next: usize,
    global: GlobalId,
    /// `Globals::generation` when the snapshot was taken.
    generation: u64,
}

fn take_element(e: &mut Element) -> Element {
    std::mem::replace(
        e,
        Element {
            key: Key::default(),
            value: ElementValue::Plain(Value::Long(0)),
        },
    )
}

/// Every entry point, by the name JIT code imports it under.
pub fn symbols() -> Vec<(&'static str, *const u8)> {
    vec![
        ("stap_concat", stap_concat as *const u8),
        ("stap_str_cmp", stap_str_cmp as *const u8),
        ("stap_load_global", stap_load_global as *const u8),
        ("stap_store_global", stap_store_global as *const u8),
        ("stap_add_global", stap_add_global as *const u8),
        ("stap_map_get", stap_map_get as *const u8),
        ("stap_map_set", stap_map_set as *const u8),
        ("stap_map_add", stap_map_add as *const u8),
        ("stap_map_delete", stap_map_delete as *const u8),
        ("stap_map_contains", stap_map_contains as *const u8),
        ("stap_clear", stap_clear as *const u8),
        ("stap_stat_add", stap_stat_add as *const u8),
        ("stap_stat_get", stap_stat_get as *const u8),
        ("stap_print_hist", stap_print_hist as *const u8),
        ("stap_iter_start", stap_iter_start as *const u8),
        ("stap_iter_next", stap_iter_next as *const u8),
        ("stap_printf", stap_printf as *const u8),
        ("stap_sprintf", stap_sprintf as *const u8),
        ("stap_symbol", stap_symbol as *const u8),
        ("stap_builtin", stap_builtin as *const u8),
        ("stap_read_kernel", stap_read_kernel as *const u8),
        ("stap_exit", stap_exit as *const u8),
        ("stap_tick", stap_tick as *const u8),
        ("stap_enter", stap_enter as *const u8),
        ("stap_catch", stap_catch as *const u8),
        ("stap_leave", stap_leave as *const u8),
        ("stap_fail_div0", stap_fail_div0 as *const u8),
        ("stap_fail_msg", stap_fail_msg as *const u8),
        ("stap_fail_at", stap_fail_at as *const u8),
    ]
}

/// Encodes `StatValue` for `stap_stat_get`: (code, shift).
pub fn stat_value_code(what: StatValue) -> (i64, i64) {
    match what {
        StatValue::Count => (0, 0),
        StatValue::Sum => (1, 0),
        StatValue::Min => (2, 0),
        StatValue::Max => (3, 0),
        StatValue::Avg => (4, 0),
        StatValue::Variance { shift } => (5, shift as i64),
    }
}

fn stat_value_from_code(code: i64, shift: i64) -> StatValue {
    match code {
        0 => StatValue::Count,
        1 => StatValue::Sum,
        2 => StatValue::Min,
        3 => StatValue::Max,
        4 => StatValue::Avg,
        _ => StatValue::Variance {
            shift: shift.clamp(0, 63) as u32,
        },
    }
}

/// Encodes a sort for `stap_iter_start`: (by, argument); `by` is -1 for
/// none, 0 for key N, 1 for value, 2 for an aggregate (argument = stat
/// code * 64 + shift).
pub fn sort_code(by: Option<SortBy>) -> (i64, i64) {
    match by {
        None => (-1, 0),
        Some(SortBy::Key(n)) => (0, n as i64),
        Some(SortBy::Value) => (1, 0),
        Some(SortBy::Aggregate(what)) => {
            let (code, shift) = stat_value_code(what);
            (2, code * 64 + shift)
        }
    }
}

/// Reborrows the runtime pointer JIT code passes.
///
/// # Safety
/// `rt` is the `&mut HostRuntime` that `HostProgram::run_probe` passed to
/// the JIT code, still exclusively borrowed for the duration of the call.
unsafe fn runtime<'a>(rt: *mut HostRuntime) -> &'a mut HostRuntime {
    // SAFETY: see the function's contract.
    unsafe { &mut *rt }
}

/// Reads `n` values from the JIT frame.
///
/// # Safety
/// `ptr` points to at least `n` initialised `i64`s (a JIT stack slot).
unsafe fn args<'a>(ptr: *const i64, n: usize) -> &'a [i64] {
    if n == 0 || ptr.is_null() {
        return &[];
    }
    // SAFETY: see the function's contract.
    unsafe { std::slice::from_raw_parts(ptr, n) }
}

fn to_value(rt: &HostRuntime, ty: ValType, raw: i64) -> Value {
    match ty {
        ValType::Long => Value::Long(raw),
        ValType::Str => Value::Str(rt.str(raw).into()),
    }
}

fn from_value(rt: &mut HostRuntime, value: &Value) -> i64 {
    match value {
        Value::Long(n) => *n,
        Value::Str(s) => rt.new_str(s.to_vec()),
    }
}

/// The key tuple of `global` from the JIT frame.
///
/// # Safety
/// `keys` points to one `i64` per key of the global.
unsafe fn key_of(rt: &HostRuntime, global: i64, keys: *const i64) -> Key {
    let Some(storage) = rt.globals.storage(GlobalId(global as u32)) else {
        return Key::default();
    };
    let types = key_types(storage);
    // SAFETY: the caller passes one slot per key type.
    let raw = unsafe { args(keys, types.len()) };
    types
        .iter()
        .zip(raw)
        .map(|(ty, r)| to_value(rt, *ty, *r))
        .collect()
}

fn global_value_type(rt: &HostRuntime, global: i64) -> ValType {
    rt.globals
        .storage(GlobalId(global as u32))
        .map_or(ValType::Long, value_type)
}

/// Unwraps a result, recording the error.
fn check<T: Default>(rt: &mut HostRuntime, result: Result<T, RuntimeError>) -> T {
    result.unwrap_or_else(|e| {
        rt.fail(e);
        T::default()
    })
}

/// `a . b`.
///
/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_concat(
    rt: *mut HostRuntime,
    a: StrHandle,
    b: StrHandle,
) -> StrHandle {
    // SAFETY: JIT code passes its runtime pointer.
    let rt = unsafe { runtime(rt) };
    let mut s = rt.str(a).to_vec();
    s.extend_from_slice(rt.str(b));
    rt.new_str(s)
}

/// strcmp-like: -1, 0 or 1.
///
/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_str_cmp(rt: *mut HostRuntime, a: StrHandle, b: StrHandle) -> i64 {
    // SAFETY: JIT code passes its runtime pointer.
    let rt = unsafe { runtime(rt) };
    match rt.str(a).cmp(rt.str(b)) {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }
}

/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_load_global(rt: *mut HostRuntime, global: i64) -> i64 {
    // SAFETY: JIT code passes its runtime pointer.
    let rt = unsafe { runtime(rt) };
    let value = rt.globals.load(GlobalId(global as u32));
    match check(rt, value.map(Some)) {
        Some(v) => from_value(rt, &v),
        None => 0,
    }
}

/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_store_global(rt: *mut HostRuntime, global: i64, raw: i64) {
    // SAFETY: JIT code passes its runtime pointer.
    let rt = unsafe { runtime(rt) };
    let value = to_value(rt, global_value_type(rt, global), raw);
    let result = rt.globals.store(GlobalId(global as u32), value);
    check(rt, result);
}

/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_add_global(rt: *mut HostRuntime, global: i64, delta: i64) {
    // SAFETY: JIT code passes its runtime pointer.
    let rt = unsafe { runtime(rt) };
    let id = GlobalId(global as u32);
    let result = rt.globals.load(id).and_then(|v| {
        rt.globals
            .store(id, Value::Long(v.long().wrapping_add(delta)))
    });
    check(rt, result);
}

/// # Safety
/// `rt` as in [`runtime`]; `keys` holds one `i64` per key of the global.
pub unsafe extern "C" fn stap_map_get(rt: *mut HostRuntime, global: i64, keys: *const i64) -> i64 {
    // SAFETY: JIT code passes its runtime pointer and key slots.
    let rt = unsafe { runtime(rt) };
    // SAFETY: as above.
    let key = unsafe { key_of(rt, global, keys) };
    let value = rt.globals.map_get(GlobalId(global as u32), &key);
    match check(rt, value) {
        Some(v) => from_value(rt, &v),
        None => 0,
    }
}

/// # Safety
/// As [`stap_map_get`].
pub unsafe extern "C" fn stap_map_set(
    rt: *mut HostRuntime,
    global: i64,
    keys: *const i64,
    raw: i64,
) {
    // SAFETY: JIT code passes its runtime pointer and key slots.
    let rt = unsafe { runtime(rt) };
    // SAFETY: as above.
    let key = unsafe { key_of(rt, global, keys) };
    let value = to_value(rt, global_value_type(rt, global), raw);
    let result = rt.globals.map_set(GlobalId(global as u32), key, value);
    check(rt, result);
}

/// # Safety
/// As [`stap_map_get`].
pub unsafe extern "C" fn stap_map_add(
    rt: *mut HostRuntime,
    global: i64,
    keys: *const i64,
    delta: i64,
) {
    // SAFETY: JIT code passes its runtime pointer and key slots.
    let rt = unsafe { runtime(rt) };
    // SAFETY: as above.
    let key = unsafe { key_of(rt, global, keys) };
    let id = GlobalId(global as u32);
    let result = rt.globals.map_get(id, &key).and_then(|old| {
        let sum = old.map_or(0, |v| v.long()).wrapping_add(delta);
        rt.globals.map_set(id, key, Value::Long(sum))
    });
    check(rt, result);
}

/// # Safety
/// As [`stap_map_get`].
pub unsafe extern "C" fn stap_map_delete(rt: *mut HostRuntime, global: i64, keys: *const i64) {
    // SAFETY: JIT code passes its runtime pointer and key slots.
    let rt = unsafe { runtime(rt) };
    // SAFETY: as above.
    let key = unsafe { key_of(rt, global, keys) };
    let result = rt.globals.map_delete(GlobalId(global as u32), &key);
    check(rt, result);
}

/// # Safety
/// As [`stap_map_get`].
pub unsafe extern "C" fn stap_map_contains(
    rt: *mut HostRuntime,
    global: i64,
    keys: *const i64,
) -> i64 {
    // SAFETY: JIT code passes its runtime pointer and key slots.
    let rt = unsafe { runtime(rt) };
    // SAFETY: as above.
    let key = unsafe { key_of(rt, global, keys) };
    let result = rt.globals.map_contains(GlobalId(global as u32), &key);
    check(rt, result) as i64
}

/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_clear(rt: *mut HostRuntime, global: i64) {
    // SAFETY: JIT code passes its runtime pointer.
    let rt = unsafe { runtime(rt) };
    let result = rt.globals.clear(GlobalId(global as u32));
    check(rt, result);
}

/// # Safety
/// As [`stap_map_get`].
pub unsafe extern "C" fn stap_stat_add(
    rt: *mut HostRuntime,
    global: i64,
    keys: *const i64,
    value: i64,
) {
    // SAFETY: JIT code passes its runtime pointer and key slots.
    let rt = unsafe { runtime(rt) };
    // SAFETY: as above.
    let key = unsafe { key_of(rt, global, keys) };
    let result = rt.globals.stat_add(GlobalId(global as u32), key, value);
    check(rt, result);
}

/// # Safety
/// As [`stap_map_get`].
pub unsafe extern "C" fn stap_stat_get(
    rt: *mut HostRuntime,
    global: i64,
    keys: *const i64,
    code: i64,
    shift: i64,
) -> i64 {
    // SAFETY: JIT code passes its runtime pointer and key slots.
    let rt = unsafe { runtime(rt) };
    // SAFETY: as above.
    let key = unsafe { key_of(rt, global, keys) };
    let result = rt.globals.stat_get(
        GlobalId(global as u32),
        &key,
        stat_value_from_code(code, shift),
    );
    check(rt, result)
}

/// `print(@hist_log(s))` (`linear` 0) or `print(@hist_linear(...))` (1).
///
/// # Safety
/// As [`stap_map_get`].
pub unsafe extern "C" fn stap_print_hist(
    rt: *mut HostRuntime,
    global: i64,
    keys: *const i64,
    linear: i64,
) {
    // SAFETY: JIT code passes its runtime pointer and key slots.
    let rt = unsafe { runtime(rt) };
    // SAFETY: as above.
    let key = unsafe { key_of(rt, global, keys) };
    let agg = match rt.globals.stat(GlobalId(global as u32), &key) {
        Ok(agg) => agg,
        Err(e) => return rt.fail(e),
    };
    let text = match (linear, &agg.hist_log, &agg.hist_linear) {
        (0, Some(buckets), _) => hist::print_log(buckets),
        (_, _, Some((h, slots))) if linear != 0 => hist::print_linear(h, slots),
        _ => {
            return rt.fail(RuntimeError::Internal(
                "histogram printed without its buckets".into(),
            ));
        }
    };
    let written = rt
        .output
        .histogram(|| text, || super::json::histogram(&agg, linear != 0));
    if let Err(e) = written {
        rt.fail(RuntimeError::Internal(format!("cannot write output: {e}")));
    }
}

/// Snapshots `global` for a foreach; returns the iterator handle.
///
/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_iter_start(
    rt: *mut HostRuntime,
    global: i64,
    sort_by: i64,
    sort_arg: i64,
    descending: i64,
    limit: i64,
) -> i64 {
    // SAFETY: JIT code passes its runtime pointer.
    let rt = unsafe { runtime(rt) };
    let id = GlobalId(global as u32);
    let generation = rt.globals.generation();
    let mut elements = match rt.globals.elements(id) {
        Ok(e) => e,
        Err(e) => {
            rt.fail(e);
            return 0;
        }
    };
    let mut order = sorted(&elements, sort_by, sort_arg, descending != 0);
    // stap: `limit N` with N <= 0 runs no iterations.
    order.truncate(usize::try_from(limit.max(0)).unwrap_or(usize::MAX));
    // Sorting indices moves a few bytes per swap rather than whole
    // elements; the elements then move into loop order in one pass, a
    // tight loop whose scattered reads overlap (spread over the loop
    // body's work, each would wait for memory on its own).
    let elements = order
        .iter()
        .map(|&i| take_element(&mut elements[i as usize]))
        .collect();
    rt.iters.push(Iter {
        elements,
        next: 0,
        global: id,
        generation,
    });
    rt.iters.len() as i64 - 1
}

/// The loop order of a foreach snapshot, as indices into `elements`: by
/// the requested key part, value or aggregate (reversed when descending),
/// ties and unsorted loops by key.
fn sorted(elements: &[Element], sort_by: i64, sort_arg: i64, descending: bool) -> Vec<u32> {
    let what = stat_value_from_code(sort_arg / 64, sort_arg % 64);
    // The number an element sorts by, where it has one (a string key part
    // or value has none, nor does an unsorted loop).
    let number = |e: &Element| -> Option<i64> {
        match (sort_by, &e.value) {
            (0, _) => match e.key.get(sort_arg as usize) {
                Some(Value::Long(n)) => Some(*n),
                _ => None,
            },
            // A statistics array sorted by value: by its count, as stap.
            (1, ElementValue::Plain(Value::Long(n))) => Some(*n),
            (1, ElementValue::Stat(agg)) => Some(agg.count),
            (2, ElementValue::Stat(agg)) => Some(agg.get(what).unwrap_or(0)),
            (2, ElementValue::Plain(v)) => Some(v.long()),
            _ => None,
        }
    };
    let direct = |ordering: Ordering| {
        if descending {
            ordering.reverse()
        } else {
            ordering
        }
    };
    // An unsorted loop goes by key; one long key part orders as its number.
    let key_number = |e: &Element| match e.key.as_slice() {
        [Value::Long(n)] => Some(*n),
        _ => None,
    };
    // Numbers are computed once, not in each of the n·log n comparisons.
    // Descending order sorts `!n`, which orders as `-n` without overflow.
    let flip = descending && sort_by >= 0;
    let numbers: Option<Vec<(i64, u32)>> = elements
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let n = if sort_by < 0 {
                key_number(e)
            } else {
                number(e)
            };
            n.map(|n| (if flip { !n } else { n }, i as u32))
        })
        .collect();
    if let Some(mut keyed) = numbers {
        // Plain tuples sort fastest; then each run of equal numbers (ties)
        // is put in key order.
        keyed.sort_unstable();
        for run in keyed.chunk_by_mut(|a, b| a.0 == b.0) {
            if run.len() > 1 {
                run.sort_unstable_by(|&(_, i), &(_, j)| {
                    elements[i as usize].key.cmp(&elements[j as usize].key)
                });
            }
        }
        return keyed.into_iter().map(|(_, i)| i).collect();
    }
    let mut order: Vec<u32> = (0..elements.len() as u32).collect();
    order.sort_unstable_by(|&i, &j| {
        let (a, b) = (&elements[i as usize], &elements[j as usize]);
        let primary = match (sort_by, &a.value, &b.value) {
            (0, _, _) => direct(
                a.key
                    .get(sort_arg as usize)
                    .cmp(&b.key.get(sort_arg as usize)),
            ),
            (1, ElementValue::Plain(x), ElementValue::Plain(y)) => direct(x.cmp(y)),
            _ => Ordering::Equal,
        };
        primary.then_with(|| a.key.cmp(&b.key))
    });
    order
}

/// Writes the next element's keys, then its value, to `out`; returns 0 at
/// the end. A statistics array's "value" is its count.
///
/// # Safety
/// `rt` as in [`runtime`]; `out` has room for one `i64` per key plus one.
pub unsafe extern "C" fn stap_iter_next(rt: *mut HostRuntime, iter: i64, out: *mut i64) -> i64 {
    // SAFETY: JIT code passes its runtime pointer.
    let rt = unsafe { runtime(rt) };
    let Some(it) = rt.iters.get_mut(iter as usize) else {
        rt.fail(RuntimeError::Internal("bad foreach iterator".into()));
        return 0;
    };
    // Each element is visited once: move it out rather than clone it.
    let Some(element) = it.elements.get_mut(it.next).map(take_element) else {
        return 0;
    };
    it.next += 1;
    let (global, generation) = (it.global, it.generation);
    for (i, k) in element.key.iter().enumerate() {
        let raw = from_value(rt, k);
        // SAFETY: the JIT sized `out` for the keys and the value.
        unsafe { out.add(i).write(raw) };
    }
    let raw = match &element.value {
        ElementValue::Plain(v) => from_value(rt, v),
        ElementValue::Stat(agg) => agg.count,
    };
    // SAFETY: as above.
    unsafe { out.add(element.key.len()).write(raw) };
    rt.globals
        .set_hint(generation, global, element.key, element.value);
    1
}

/// Formats the common case, plain `%d` and `%s` between literals, without
/// the general formatter's allocations; false (with `out` untouched) for
/// anything else.
fn format_plain(rt: &HostRuntime, pieces: &[Piece], raw: &[i64], out: &mut Vec<u8>) -> bool {
    let start = out.len();
    let mut args = raw.iter();
    for piece in pieces {
        let spec = match piece {
            Piece::Literal(text) => {
                out.extend_from_slice(text.as_bytes());
                continue;
            }
            Piece::Spec(spec) => spec,
        };
        let plain = spec.flags == printf::Flags::default()
            && spec.width.is_none()
            && spec.precision.is_none();
        match (plain, spec.conversion, args.next()) {
            (true, Conversion::Decimal, Some(&n)) => push_decimal(out, n),
            (true, Conversion::String, Some(&s)) => out.extend_from_slice(rt.str(s)),
            _ => {
                out.truncate(start);
                return false;
            }
        }
    }
    true
}

/// `n` in decimal, as `%d`.
fn push_decimal(out: &mut Vec<u8>, n: i64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut m = n.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    if n < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[at..]);
}

/// Formats under format `id`, appending to `out`; arguments follow its
/// directives' kinds. False (the error recorded) on failure.
fn format(rt: &mut HostRuntime, id: i64, raw: &[i64], out: &mut Vec<u8>) -> bool {
    let formats = rt.formats.clone();
    let Some((pieces, kinds)) = formats.get(id as usize) else {
        rt.fail(RuntimeError::Internal(format!("no format {id}")));
        return false;
    };
    if format_plain(rt, pieces, raw, out) {
        return true;
    }
    let memory = match read_memory_args(rt, pieces, raw) {
        Ok(memory) => memory,
        Err(e) => {
            rt.fail(e);
            return false;
        }
    };
    let values: Vec<printf::Value> = kinds
        .iter()
        .zip(raw)
        .zip(&memory)
        .map(|((k, r), m)| match (k, m) {
            (_, Some(bytes)) => printf::Value::Str(bytes),
            (ArgKind::String, None) => printf::Value::Str(rt.str(*r)),
            (ArgKind::Long, None) => printf::Value::Long(*r),
        })
        .collect();
    match printf::format(pieces, &values, out) {
        Ok(()) => true,
        Err(e) => {
            rt.fail(RuntimeError::Format(e.to_string()));
            false
        }
    }
}

/// The bytes each `%m`/`%M` argument addresses (`None` for the other
/// arguments): as many as the precision says (default 1), read from kernel
/// memory, as stap reads it. `%#m` means user memory, and a host probe has
/// no user task of its own to read.
fn read_memory_args(
    rt: &mut HostRuntime,
    pieces: &[Piece],
    raw: &[i64],
) -> Result<Vec<Option<Vec<u8>>>, RuntimeError> {
    let mut memory = vec![None; raw.len()];
    for (at, arg) in printf::memory_args(pieces).into_iter().enumerate() {
        let (Some(arg), Some(&addr)) = (arg, raw.get(at)) else {
            continue;
        };
        if arg.user {
            return Err(RuntimeError::Unsupported(
                "%#m/%#M (user memory) in a host probe".into(),
            ));
        }
        let len = match arg.len {
            printf::MemoryLen::Fixed(n) => n as usize,
            // A negative `*` precision is no precision: one byte, as in
            // kernel probes.
            printf::MemoryLen::Star(i) => match raw.get(i).copied() {
                Some(n) if n >= 0 => n as usize,
                _ => 1,
            },
        };
        // The largest precision the formatter honours.
        let bytes = rt
            .kmem
            .read(addr as u64, len.min(4096))
            .ok_or(RuntimeError::KernelRead(addr as u64))?;
        memory[at] = Some(bytes);
    }
    Ok(memory)
}

/// # Safety
/// `rt` as in [`runtime`]; `argv` holds `argc` `i64`s.
pub unsafe extern "C" fn stap_printf(rt: *mut HostRuntime, id: i64, argv: *const i64, argc: i64) {
    // SAFETY: JIT code passes its runtime pointer and argument slots.
    let rt = unsafe { runtime(rt) };
    // SAFETY: as above.
    let raw = unsafe { args(argv, argc as usize) };
    // One buffer serves every call: a million-line foreach allocates none.
    let mut bytes = std::mem::take(&mut rt.printf_buf);
    bytes.clear();
    if format(rt, id, raw, &mut bytes) {
        rt.write_output(&bytes);
    }
    rt.printf_buf = bytes;
}

/// # Safety
/// As [`stap_printf`].
pub unsafe extern "C" fn stap_sprintf(
    rt: *mut HostRuntime,
    id: i64,
    argv: *const i64,
    argc: i64,
) -> StrHandle {
    // SAFETY: JIT code passes its runtime pointer and argument slots.
    let rt = unsafe { runtime(rt) };
    // SAFETY: as above.
    let raw = unsafe { args(argv, argc as usize) };
    let mut bytes = Vec::new();
    if format(rt, id, raw, &mut bytes) {
        rt.new_str(bytes)
    } else {
        0
    }
}

/// `symname` (0), `symdata` (1) or `modname` (2) of an address, or
/// `enum_name` (3 + the enum type's string constant) of a value.
///
/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_symbol(rt: *mut HostRuntime, addr: i64, how: i64) -> StrHandle {
    // SAFETY: JIT code passes its runtime pointer.
    let rt = unsafe { runtime(rt) };
    let text = match how {
        0 => rt.symbols.name(addr as u64),
        1 => rt.symbols.data(addr as u64),
        2 => rt.symbols.module(addr as u64),
        n if n < 0 => String::new(),
        n => {
            let enum_type = usize::try_from(n - 3)
                .ok()
                .and_then(|i| rt.consts.get(i))
                .map(|name| String::from_utf8_lossy(name).into_owned())
                .unwrap_or_default();
            rt.enums.name(&enum_type, addr)
        }
    };
    rt.new_str(text.into_bytes())
}

/// Built-in `id` (an index into `builtins::TABLE`); bit `i` of
/// `str_mask` says argument `i` is a string.
///
/// # Safety
/// `rt` as in [`runtime`]; `argv` holds `argc` `i64`s.
pub unsafe extern "C" fn stap_builtin(
    rt: *mut HostRuntime,
    id: i64,
    argv: *const i64,
    argc: i64,
    str_mask: i64,
) -> i64 {
    // SAFETY: JIT code passes its runtime pointer and argument slots.
    let rt = unsafe { runtime(rt) };
    // SAFETY: as above.
    let raw = unsafe { args(argv, argc as usize) }.to_vec();
    let values: Vec<Value> = raw
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let ty = if i < 64 && str_mask & (1 << i) != 0 {
                ValType::Str
            } else {
                ValType::Long
            };
            to_value(rt, ty, *r)
        })
        .collect();
    match builtins::call(rt, id as usize, &values) {
        Ok(v) => from_value(rt, &v),
        Err(e) => {
            rt.fail(e);
            0
        }
    }
}

/// `size` bytes of kernel memory at `addr` (`Op::ReadKernel` in a host
/// probe), read through /proc/kcore; a fault is stap's error.
///
/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_read_kernel(
    rt: *mut HostRuntime,
    addr: i64,
    size: i64,
    signed: i64,
) -> i64 {
    // SAFETY: JIT code passes its runtime pointer.
    let rt = unsafe { runtime(rt) };
    let value = builtins::read_kernel(rt, addr as u64, size as usize, signed != 0);
    check(rt, value)
}

/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_exit(rt: *mut HostRuntime) {
    // SAFETY: JIT code passes its runtime pointer.
    unsafe { runtime(rt) }.exit_requested = true;
}

/// Counts a loop iteration against MAXACTION.
///
/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_tick(rt: *mut HostRuntime) {
    // SAFETY: JIT code passes its runtime pointer.
    let rt = unsafe { runtime(rt) };
    rt.actions += 1;
    if rt.actions > rt.max_action {
        rt.fail(RuntimeError::MaxAction);
    } else if crate::stop::cut_requested() {
        // A signal or `-T` while this handler loops: stop here, as stap's
        // handlers end at their MAXACTION check.
        rt.fail(RuntimeError::Stopped);
    }
}

/// Before a call: fails past MAXNESTING.
///
/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_enter(rt: *mut HostRuntime) {
    // SAFETY: JIT code passes its runtime pointer.
    let rt = unsafe { runtime(rt) };
    rt.depth += 1;
    if rt.depth > MAX_NESTING {
        // The call does not happen (nor its `stap_leave`): a `catch` goes
        // on at this depth.
        rt.depth -= 1;
        rt.fail(RuntimeError::MaxNesting);
    }
}

/// After a call.
///
/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_leave(rt: *mut HostRuntime) {
    // SAFETY: JIT code passes its runtime pointer.
    unsafe { runtime(rt) }.depth -= 1;
}

/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_fail_div0(rt: *mut HostRuntime) {
    // SAFETY: JIT code passes its runtime pointer.
    unsafe { runtime(rt) }.fail(RuntimeError::DivisionByZero);
}

/// Entering a `catch`: the error is handled, so it is neither reported
/// nor counted; returns its text (for `catch (msg)`).
///
/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_catch(rt: *mut HostRuntime) -> StrHandle {
    // SAFETY: JIT code passes its runtime pointer.
    let rt = unsafe { runtime(rt) };
    rt.failed = 0;
    rt.error_span = None;
    let text = rt.error.take().map(|e| e.to_string()).unwrap_or_default();
    rt.new_str(text.into_bytes())
}

/// `error(msg)`.
///
/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_fail_msg(rt: *mut HostRuntime, msg: StrHandle) {
    // SAFETY: JIT code passes its runtime pointer.
    let rt = unsafe { runtime(rt) };
    let text = String::from_utf8_lossy(rt.str(msg)).into_owned();
    rt.fail(RuntimeError::Explicit(text));
}

/// Records where the hit failed: the span of the operation whose failure
/// JIT code is returning from (the innermost one; callers keep it).
///
/// # Safety
/// `rt` as in [`runtime`].
pub unsafe extern "C" fn stap_fail_at(rt: *mut HostRuntime, file: i64, start: i64, end: i64) {
    // SAFETY: JIT code passes its runtime pointer.
    let rt = unsafe { runtime(rt) };
    if rt.error_span.is_none() {
        rt.error_span = Some(stap_lang::source::Span {
            file: stap_lang::source::FileId(file as u32),
            start: start as u32,
            end: end as u32,
        });
    }
}

/// `HistKind` → the `linear` flag of [`stap_print_hist`].
pub fn hist_code(kind: HistKind) -> i64 {
    match kind {
        HistKind::Log => 0,
        HistKind::Linear(_) => 1,
    }
}

#[cfg(test)]
mod tests {

    use crate::host::{HostRuntime, Output};
    use crate::jit::HostProgram;

    /// The output of the first begin probe of `script`.
    fn run(script: &str) -> String {
        let facts = stap_lang::testing::FakeKernel::new();
        let (module, _) = stap_lang::testing::lower_script(script, &facts);
        let program = HostProgram::compile(&module).expect("compiles");
        let mut rt = HostRuntime::new(&module, Output::buffer());
        program.run_probe(0, &mut rt).expect("runs");
        String::from_utf8(rt.output.take_buffer()).unwrap()
    }

    #[test]
    fn foreach_reads_live_values_not_the_snapshot() {
        // The loop body changes elements the snapshot has not reached yet,
        // deletes one, and nests a loop over the same array: `a[k]` must
        // see the live table each time.
        let out = run(r#"
global a
probe begin {
  a[1] = 10; a[2] = 20; a[3] = 30
  foreach (k in a+) {
    printf("%d %d|", k, a[k])
    if (k == 1) { a[2] = 99; delete a[3] }
  }
  println("")
  foreach (k in a-) {
    foreach (j in a) printf("%d=%d ", j, a[j])
    printf("/ %d %d|", k, a[k])
  }
  println("")
}
"#);
        assert_eq!(out, "1 10|2 99|3 0|\n1=10 2=99 / 2 99|1=10 2=99 / 1 10|\n");
    }

    #[test]
    fn plain_printf_directives_match_the_formatter() {
        let out = run(r#"
probe begin {
  printf("%d %d %d %s|%i\n", 0, -42, -9223372036854775807 - 1, "str", 9223372036854775807)
  printf("%5d|%-3d|%05d|%+d|%.3s|%x\n", 1, 2, 3, 4, "abcdef", 255)
  s = sprintf("%d:%s", -7, "x"); println(s)
}
"#);
        assert_eq!(
            out,
            "0 -42 -9223372036854775808 str|9223372036854775807\n    1|2  |00003|+4|abc|ff\n-7:x\n"
        );
    }
}
