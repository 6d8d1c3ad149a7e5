//! String keys sized by what can reach them.
//!
//! A string map key is MAXSTRINGLEN (512) bytes by default, and the kernel
//! hashes and compares all of it on every lookup. Most string keys are far
//! shorter by construction: `execname()` is at most 15 bytes, a literal is
//! its own length. This pass finds, for every global with string key
//! parts, the longest text any access can use as a key (stores, lookups,
//! membership tests and deletes alike, on both sides), and when that bound
//! is below MAXSTRINGLEN the global's string key parts shrink to it
//! (rounded up to 8 bytes, with room for the NUL).
//!
//! Because every access is counted, no key is ever cut short: a text that
//! could be longer than the slot widens the slot back to MAXSTRINGLEN. The
//! bound of a register is the largest over all of its definitions (one
//! forward fixpoint per function; registers are not SSA), and unknown
//! sources (parameters, map values, kernel strings, `sprintf`...) are
//! unbounded. Keys read back by `foreach` carry their global's bound, so the
//! pass iterates over the module until no global's bound grows.

use hashbrown::HashMap;

use crate::ir::{Function, GlobalId, IterId, Module, Op, Reg, Storage, ValType};

use super::regalloc::{op_defs, op_uses, term_uses};

/// The longest text `execname()` returns (TASK_COMM_LEN - 1).
const EXECNAME_MAX: u32 = 15;

/// A string's longest possible text, in bytes; `None` is unbounded.
type Bound = Option<u32>;

fn join(a: Bound, b: Bound) -> Bound {
    Some(a?.max(b?))
}

/// Sets [`crate::ir::Global::key_text_bytes`] for every global whose string
/// key parts can be narrower than MAXSTRINGLEN.
pub fn narrow_string_keys(module: &mut Module) {
    let max_text = u32::try_from(module.limits.max_string_len)
        .unwrap_or(u32::MAX)
        .saturating_sub(1);
    let bounds = key_bounds(module, max_text);
    for (global, bound) in module.globals.iter_mut().zip(bounds) {
        global.key_text_bytes = None;
        if !has_string_key(&global.storage) {
            continue;
        }
        // The text, its NUL, rounded up to 8 (long key parts stay aligned).
        if let Some(text) = bound {
            let bytes = (text + 1).next_multiple_of(8);
            if u64::from(bytes) < module.limits.max_string_len {
                global.key_text_bytes = Some(bytes);
            }
        }
    }
}

fn has_string_key(storage: &Storage) -> bool {
    match storage {
        Storage::Array { keys, .. } | Storage::Stats { keys, .. } => keys.contains(&ValType::Str),
        Storage::Scalar(_) => false,
    }
}

/// The longest key text of each global (`Some(0)` when nothing uses it).
fn key_bounds(module: &Module, max_text: u32) -> Vec<Bound> {
    let mut globals: Vec<Bound> = vec![Some(0); module.globals.len()];
    // Each round can only grow a bound. Keys that feed each other through
    // `foreach` settle in as many rounds as the chain is long; a cycle
    // that keeps growing runs out of rounds and is unbounded.
    for _ in 0..=module.globals.len() + 1 {
        let mut next = vec![Some(0); module.globals.len()];
        for function in &module.functions {
            let regs = register_bounds(module, function, &globals, max_text);
            for block in &function.blocks {
                for inst in &block.insts {
                    if let Some((global, keys)) = key_access(&inst.op) {
                        let slot = &mut next[global.0 as usize];
                        for key in keys {
                            if function.reg_type(*key) == ValType::Str {
                                *slot = join(*slot, regs[key.0 as usize]);
                            }
                        }
                    }
                }
            }
        }
        if next == globals {
            return globals;
        }
        globals = next;
    }
    vec![None; module.globals.len()]
}

/// How many bytes of each string register its uses can read (0 for
/// longs and unused registers).
///
/// A key part reads its global's key text bytes and no more (`write_key`
/// copies just those); every other use (a copy, a compare, output, a call
/// argument) may read the whole MAXSTRINGLEN slot. So a definition whose
/// register only ever becomes a narrow key need only write and NUL-pad
/// that many bytes: `execname()` as a 16-byte key zeroes nothing past the
/// helper's 16.
pub fn string_read_widths(module: &Module, function: &Function, max_string_len: u32) -> Vec<u32> {
    let mut widths = vec![0; function.regs.len()];
    let mut read = |reg: Reg, bytes: u32| {
        if function.reg_type(reg) == ValType::Str {
            let width = &mut widths[reg.0 as usize];
            *width = (*width).max(bytes);
        }
    };
    for block in &function.blocks {
        for inst in &block.insts {
            let mut whole = op_uses(&inst.op);
            if let Some((global, keys)) = key_access(&inst.op) {
                let text = module.global(global).key_text_bytes(max_string_len);
                for key in keys {
                    read(*key, text.min(max_string_len));
                    // The same register as the stored value is read whole.
                    if let Some(at) = whole.iter().position(|r| r == key) {
                        whole.swap_remove(at);
                    }
                }
            }
            for reg in whole {
                read(reg, max_string_len);
            }
        }
        for reg in term_uses(&block.term) {
            read(reg, max_string_len);
        }
    }
    widths
}

/// The global and key registers of an op that looks an element up by key.
/// `IterNext` only reads keys back, so it is not one.
fn key_access(op: &Op) -> Option<(GlobalId, &[Reg])> {
    match op {
        Op::MapGet { global, keys, .. }
        | Op::MapSet { global, keys, .. }
        | Op::MapAdd { global, keys, .. }
        | Op::MapDelete { global, keys }
        | Op::MapContains { global, keys, .. }
        | Op::MapInsert { global, keys, .. }
        | Op::StatAdd { global, keys, .. }
        | Op::StatGet { global, keys, .. }
        | Op::PrintHist { global, keys, .. } => Some((*global, keys)),
        _ => None,
    }
}

/// The bound of each register of `function` (longs get `Some(0)`).
fn register_bounds(
    module: &Module,
    function: &Function,
    globals: &[Bound],
    max_text: u32,
) -> Vec<Bound> {
    let count = function.regs.len();
    // Registers with no definition in the body (parameters, and what the
    // runtime fills in, such as a `catch` message) are unbounded; the
    // others start at the bottom and grow to the join of their definitions.
    let mut defined = vec![false; count];
    let mut walked = HashMap::new();
    for block in &function.blocks {
        for inst in &block.insts {
            for reg in op_defs(&inst.op) {
                defined[reg.0 as usize] = true;
            }
            if let Op::IterStart { iter, global, .. } = &inst.op {
                walked.insert(*iter, *global);
            }
        }
    }
    for param in defined.iter_mut().take(function.param_count) {
        *param = false;
    }
    for block in &function.blocks {
        if let Some(message) = block.catch.and_then(|c| c.message) {
            defined[message.0 as usize] = false;
        }
    }
    let mut bounds: Vec<Bound> = (0..count)
        .map(|i| (function.regs[i] == ValType::Long || defined[i]).then_some(0))
        .collect();
    let sources = Sources {
        module,
        globals,
        walked: &walked,
        max_text,
    };
    loop {
        let mut changed = false;
        for block in &function.blocks {
            for inst in &block.insts {
                for (reg, bound) in sources.definitions(&inst.op, &bounds) {
                    let i = reg.0 as usize;
                    if function.regs[i] != ValType::Str {
                        continue;
                    }
                    let joined = join(bounds[i], bound);
                    if joined != bounds[i] {
                        bounds[i] = joined;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            return bounds;
        }
    }
}

/// What one function's definitions can draw on.
struct Sources<'a> {
    module: &'a Module,
    /// The key bound of each global, as far as known.
    globals: &'a [Bound],
    /// The global each `foreach` iterator walks.
    walked: &'a HashMap<IterId, GlobalId>,
    max_text: u32,
}

impl Sources<'_> {
    /// What `op` writes to each register it defines.
    fn definitions(&self, op: &Op, bounds: &[Bound]) -> Vec<(Reg, Bound)> {
        let of = |reg: &Reg| bounds[reg.0 as usize];
        match op {
            Op::ConstStr { dst, id } => {
                let len = u32::try_from(self.module.string(*id).len()).unwrap_or(u32::MAX);
                vec![(*dst, Some(len.min(self.max_text)))]
            }
            Op::Move { dst, src } => vec![(*dst, of(src))],
            // `lhs . rhs` is cut to MAXSTRINGLEN - 1 bytes.
            Op::Concat { dst, lhs, rhs } => {
                let sum = of(lhs)
                    .zip(of(rhs))
                    .map(|(a, b)| a.saturating_add(b).min(self.max_text));
                vec![(*dst, sum)]
            }
            Op::Builtin {
                dst: Some(dst),
                name,
                ..
            } if name == "execname" => vec![(*dst, Some(EXECNAME_MAX))],
            // Keys read back from a map are as long as the map's keys.
            Op::IterNext { iter, keys, .. } => {
                let walked = self.walked.get(iter).map(|g| self.globals[g.0 as usize]);
                op_defs(op)
                    .into_iter()
                    .map(|reg| {
                        let bound = if keys.contains(&reg) {
                            walked.flatten()
                        } else {
                            None
                        };
                        (reg, bound)
                    })
                    .collect()
            }
            _ => op_defs(op).into_iter().map(|reg| (reg, None)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{FakeKernel, lower_script};

    /// The key slot of each named global after the pass.
    fn key_slots(script: &str) -> Vec<(String, Option<u32>)> {
        let (mut module, _) = lower_script(script, &FakeKernel::new());
        narrow_string_keys(&mut module);
        module
            .globals
            .iter()
            .filter(|g| !g.name.starts_with('@'))
            .map(|g| (g.name.clone(), g.key_text_bytes))
            .collect()
    }

    fn slot(script: &str, name: &str) -> Option<u32> {
        key_slots(script)
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no global {name}"))
            .1
    }

    /// What the uses of each `execname()` result read, in program order.
    fn execname_widths(script: &str) -> Vec<u32> {
        let (mut module, _) = lower_script(script, &FakeKernel::new());
        narrow_string_keys(&mut module);
        let mut widths = Vec::new();
        for function in &module.functions {
            let read = string_read_widths(&module, function, 512);
            for block in &function.blocks {
                for inst in &block.insts {
                    if let Op::Builtin {
                        dst: Some(dst),
                        name,
                        ..
                    } = &inst.op
                        && name == "execname"
                    {
                        widths.push(read[dst.0 as usize]);
                    }
                }
            }
        }
        widths
    }

    #[test]
    fn a_narrow_key_reads_only_its_key_text() {
        let script = r#"global c
            probe kernel.trace("kfree_skb") { c[execname()]++ }"#;
        assert_eq!(execname_widths(script), [16]);
        // Stored as a value, printed or compared, a text is read whole.
        let script = r#"global c, d
            probe kernel.trace("kfree_skb") {
                c[execname()] = execname()
                println(execname())
                if (execname() == "init") d[execname()] <<< 1
            }"#;
        assert_eq!(execname_widths(script), [16, 512, 512, 512, 16]);
    }

    #[test]
    fn a_full_size_key_reads_the_whole_slot() {
        let script = r#"global c
            probe kernel.trace("kfree_skb") {
                c[execname()]++
                c[kernel_string($skb)]++
            }"#;
        assert_eq!(execname_widths(script), [512]);
    }

    #[test]
    fn execname_keys_take_sixteen_bytes() {
        let script = r#"global c
            probe kernel.trace("kfree_skb") { c[execname()]++ }
            probe end { foreach (k in c) printf("%s %d\n", k, c[k]) }"#;
        assert_eq!(slot(script, "c"), Some(16));
    }

    #[test]
    fn literals_and_their_concatenations_are_bounded() {
        let script = r#"global a, b
            probe kernel.trace("kfree_skb") {
                a["x"] = 1
                name = "tcp"
                if (pid() > 1) name = "udp"
                b[name . "_v4", pid()] <<< 1
            }"#;
        assert_eq!(slot(script, "a"), Some(8));
        // "tcp_v4" and its NUL round up to 8.
        assert_eq!(slot(script, "b"), Some(8));
    }

    #[test]
    fn a_text_grown_from_itself_is_unbounded() {
        // The pass does not follow control flow: `name = name . "_v4"`
        // could run any number of times as far as it knows.
        let script = r#"global b
            probe kernel.trace("kfree_skb") {
                name = "tcp"
                if (pid() > 1) name = name . "_v4"
                b[name] <<< 1
            }"#;
        assert_eq!(slot(script, "b"), None);
    }

    #[test]
    fn an_unbounded_text_anywhere_keeps_the_full_size() {
        // The store is bounded, but a lookup with a kernel string could
        // be longer: cutting it to 16 bytes could make it match wrongly.
        let script = r#"global c
            probe kernel.trace("kfree_skb") {
                c[execname()]++
                if (kernel_string($skb) in c) println("seen")
            }"#;
        assert_eq!(slot(script, "c"), None);
        let params = r#"global c
            function count(name) { c[name]++ }
            probe kernel.trace("kfree_skb") { count(execname()) }"#;
        assert_eq!(slot(params, "c"), None);
    }

    #[test]
    fn keys_read_back_by_foreach_carry_their_maps_bound() {
        let script = r#"global a, b, c
            probe kernel.trace("kfree_skb") { a[execname()]++ }
            probe end {
                foreach (k in a) b[k . "!"] = 1
                foreach (j in b) c[j] = 1
            }"#;
        assert_eq!(slot(script, "a"), Some(16));
        // 15 + 1 bytes of text and the NUL round up to 24.
        assert_eq!(slot(script, "b"), Some(24));
        assert_eq!(slot(script, "c"), Some(24));
    }

    #[test]
    fn a_loop_that_grows_a_key_widens_it_to_the_full_size() {
        let script = r#"global a
            probe kernel.trace("kfree_skb") {
                s = ""
                for (i = 0; i < 1000; i++) s = s . "x"
                a[s] = 1
            }"#;
        assert_eq!(slot(script, "a"), None);
    }
}
