//! Every global's storage. Host-only globals live in hash tables here;
//! kernel-touched ones live in BPF maps (the session creates them and hands
//! over the fds) and are read and written through [`BpfMapOps`], in the
//! byte layout of `stap_lang::bpf::layout`.

use std::rc::Rc;

use hashbrown::HashMap;
use stap_lang::bpf::layout::StatLayout;
use stap_lang::ir::GlobalId;
use stap_lang::ir::{self, Constant, Module, Op, StatValue, Storage};

use super::error::RuntimeError;
use super::kmap::{BpfMapOps, KernelMap};
use super::stats::{Aggregate, StatShape};
use super::value::{Element, ElementValue, Key, Value};

/// A host-held statistic's samples, moved whole between programs.
pub struct HostStats {
    shape: StatShape,
    table: HashMap<Key, Vec<i64>>,
}

enum Store {
    Scalar(Value),
    Array(HashMap<Key, Value>),
    /// One slot vector per key (host statistics are a single "CPU").
    Stats(HashMap<Key, Vec<i64>>),
    Kernel(KernelMap),
}

struct Slot {
    name: String,
    storage: Storage,
    /// Statistics only.
    shape: Option<StatShape>,
    /// [`stap_lang::ir::Global::key_text_bytes`]: a kernel map's string
    /// key parts, when narrower than MAXSTRINGLEN.
    key_text: Option<u32>,
    store: Store,
    /// `%` arrays in a host table: the insertion order, so that a full
    /// array evicts its oldest element, as stap does.
    fifo: Option<Fifo>,
}

/// Keys in insertion order. An update keeps a key's place; a delete and a
/// later insert moves it to the end.
#[derive(Default)]
struct Fifo {
    next: u64,
    by_age: std::collections::BTreeMap<u64, Key>,
    age: HashMap<Key, u64>,
}

impl Fifo {
    fn inserted(&mut self, key: &Key) {
        if self.age.contains_key(key) {
            return;
        }
        self.next += 1;
        self.by_age.insert(self.next, key.clone());
        self.age.insert(key.clone(), self.next);
    }

    fn removed(&mut self, key: &[Value]) {
        if let Some(age) = self.age.remove(key) {
            self.by_age.remove(&age);
        }
    }

    fn pop_oldest(&mut self) -> Option<Key> {
        let (_, key) = self.by_age.pop_first()?;
        self.age.remove(&key);
        Some(key)
    }

    fn clear(&mut self) {
        self.by_age.clear();
        self.age.clear();
    }
}

pub struct Globals {
    slots: Vec<Slot>,
    max_string_len: usize,
    /// Bumped by every mutation: a foreach snapshot taken at the current
    /// generation still matches the host tables.
    generation: u64,
    /// The element a foreach just visited, until the next mutation:
    /// `a[k]` in the loop body then needs no table lookup.
    hint: Option<Hint>,
}

struct Hint {
    global: GlobalId,
    key: Key,
    value: ElementValue,
}

impl Globals {
    /// Every global in a host table, initialised from its `init` value.
    /// Kernel-touched globals move to their BPF maps with
    /// [`Globals::attach_kernel_map`].
    pub fn new(module: &Module) -> Globals {
        let shifts = variance_shifts(module);
        let slots = module
            .globals
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let shape = match &g.storage {
                    Storage::Stats { needs, .. } => Some(StatShape {
                        layout: StatLayout::new(needs),
                        shift: shifts.get(&(i as u32)).copied().unwrap_or(0),
                    }),
                    _ => None,
                };
                let store = match (&g.storage, &g.init) {
                    (Storage::Scalar(_), Some(Constant::Long(n))) => Store::Scalar(Value::Long(*n)),
                    (Storage::Scalar(_), Some(Constant::String(s))) => {
                        Store::Scalar(Value::Str(s.as_bytes().into()))
                    }
                    (Storage::Scalar(ty), None) => Store::Scalar(Value::zero(*ty)),
                    (Storage::Array { .. }, _) => Store::Array(HashMap::new()),
                    (Storage::Stats { .. }, _) => Store::Stats(HashMap::new()),
                };
                let wrap = matches!(g.storage, Storage::Array { wrap: true, .. });
                Slot {
                    name: g.name.clone(),
                    storage: g.storage.clone(),
                    shape,
                    key_text: g.key_text_bytes,
                    store,
                    fifo: wrap.then(Fifo::default),
                }
            })
            .collect();
        Globals {
            slots,
            max_string_len: module.limits.max_string_len.clamp(1, 1 << 20) as usize,
            generation: 0,
            hint: None,
        }
    }

    /// Moves global `id` to the BPF map `fd` (created by the session with
    /// `layout::map_sizes`). A scalar's current value (its init or `-G`
    /// value) is written to the map first.
    pub fn attach_kernel_map(
        &mut self,
        id: GlobalId,
        fd: i32,
        ops: Rc<dyn BpfMapOps>,
    ) -> Result<(), RuntimeError> {
        let max_string_len = self.max_string_len;
        let slot = self.slot_mut(id)?;
        let map = KernelMap::new(
            fd,
            ops,
            slot.storage.clone(),
            slot.shape,
            max_string_len as u32,
            slot.key_text.unwrap_or(max_string_len as u32),
            slot.name.clone(),
        );
        if let Store::Scalar(value) = &slot.store {
            map.store_scalar(value)?;
        }
        slot.store = Store::Kernel(map);
        // The BPF map (an LRU hash for `%` arrays) decides what to evict.
        slot.fifo = None;
        Ok(())
    }

    /// [`Globals::attach_kernel_map`] for a map that already holds the
    /// global's values (the interactive session's shared maps): nothing is
    /// written to it.
    pub fn attach_shared_kernel_map(
        &mut self,
        id: GlobalId,
        fd: i32,
        ops: Rc<dyn BpfMapOps>,
    ) -> Result<(), RuntimeError> {
        let max_string_len = self.max_string_len;
        let slot = self.slot_mut(id)?;
        slot.store = Store::Kernel(KernelMap::new(
            fd,
            ops,
            slot.storage.clone(),
            slot.shape,
            max_string_len as u32,
            slot.key_text.unwrap_or(max_string_len as u32),
            slot.name.clone(),
        ));
        slot.fifo = None;
        Ok(())
    }

    /// Takes a host-held statistic's samples (leaving it empty), to carry
    /// them to the next program of the interactive session; `None` for
    /// other globals.
    pub fn take_host_stats(&mut self, id: GlobalId) -> Option<HostStats> {
        let slot = self.slot_mut(id).ok()?;
        let shape = slot.shape?;
        match &mut slot.store {
            Store::Stats(table) => Some(HostStats {
                shape,
                table: std::mem::take(table),
            }),
            _ => None,
        }
    }

    /// Puts samples taken with [`Globals::take_host_stats`] into host-held
    /// statistic `id`; `false` (nothing changes) when it is not one or its
    /// layout differs (the new program asks for other aggregates).
    pub fn put_host_stats(&mut self, id: GlobalId, stats: HostStats) -> bool {
        let Ok(slot) = self.slot_mut(id) else {
            return false;
        };
        match &mut slot.store {
            Store::Stats(table) if slot.shape == Some(stats.shape) => {
                *table = stats.table;
                true
            }
            _ => false,
        }
    }

    pub fn name(&self, id: GlobalId) -> &str {
        self.slots
            .get(id.0 as usize)
            .map_or("?", |s| s.name.as_str())
    }

    pub fn storage(&self, id: GlobalId) -> Option<&Storage> {
        self.slots.get(id.0 as usize).map(|s| &s.storage)
    }

    fn slot(&self, id: GlobalId) -> Result<&Slot, RuntimeError> {
        self.slots
            .get(id.0 as usize)
            .ok_or_else(|| RuntimeError::Internal(format!("no global {}", id.0)))
    }

    /// Every mutation goes through here, which outdates snapshots.
    fn slot_mut(&mut self, id: GlobalId) -> Result<&mut Slot, RuntimeError> {
        self.generation += 1;
        self.hint = None;
        self.slots
            .get_mut(id.0 as usize)
            .ok_or_else(|| RuntimeError::Internal(format!("no global {}", id.0)))
    }

    pub fn load(&self, id: GlobalId) -> Result<Value, RuntimeError> {
        match &self.slot(id)?.store {
            Store::Scalar(v) => Ok(v.clone()),
            Store::Kernel(map) => map.load_scalar(),
            _ => Err(wrong_kind(id)),
        }
    }

    pub fn store(&mut self, id: GlobalId, value: Value) -> Result<(), RuntimeError> {
        match &mut self.slot_mut(id)?.store {
            Store::Scalar(v) => {
                *v = value;
                Ok(())
            }
            Store::Kernel(map) => map.store_scalar(&value),
            _ => Err(wrong_kind(id)),
        }
    }

    pub fn map_get(&self, id: GlobalId, key: &[Value]) -> Result<Option<Value>, RuntimeError> {
        if let Some(Hint {
            value: ElementValue::Plain(value),
            ..
        }) = self.hint_for(id, key)
        {
            return Ok(Some(value.clone()));
        }
        match &self.slot(id)?.store {
            Store::Array(table) => Ok(table.get(key).cloned()),
            Store::Kernel(map) => map.get(key),
            _ => Err(wrong_kind(id)),
        }
    }

    pub fn map_set(&mut self, id: GlobalId, key: Key, value: Value) -> Result<(), RuntimeError> {
        let slot = self.slot_mut(id)?;
        let (max_entries, wrap) = match slot.storage {
            Storage::Array {
                max_entries, wrap, ..
            } => (max_entries, wrap),
            _ => (u64::MAX, false),
        };
        match &mut slot.store {
            Store::Array(table) => {
                if table.len() as u64 >= max_entries && !table.contains_key(&key) {
                    if !wrap {
                        return Err(RuntimeError::ArrayFull {
                            global: slot.name.clone(),
                            max_entries,
                        });
                    }
                    // `%` arrays make room: the oldest element goes.
                    let victim = match &mut slot.fifo {
                        Some(fifo) => fifo.pop_oldest(),
                        None => table.keys().next().cloned(),
                    };
                    if let Some(victim) = victim {
                        table.remove(&victim);
                    }
                }
                if let Some(fifo) = &mut slot.fifo {
                    fifo.inserted(&key);
                }
                table.insert(key, value);
                Ok(())
            }
            Store::Kernel(map) => map.set(&key, &value),
            _ => Err(wrong_kind(id)),
        }
    }

    pub fn map_delete(&mut self, id: GlobalId, key: &[Value]) -> Result<(), RuntimeError> {
        let slot = self.slot_mut(id)?;
        if let Some(fifo) = &mut slot.fifo {
            fifo.removed(key);
        }
        match &mut slot.store {
            Store::Array(table) => {
                table.remove(key);
                Ok(())
            }
            Store::Stats(table) => {
                table.remove(key);
                Ok(())
            }
            Store::Kernel(map) => map.delete(key),
            _ => Err(wrong_kind(id)),
        }
    }

    pub fn map_contains(&self, id: GlobalId, key: &[Value]) -> Result<bool, RuntimeError> {
        match &self.slot(id)?.store {
            Store::Array(table) => Ok(table.contains_key(key)),
            Store::Stats(table) => Ok(table.contains_key(key)),
            Store::Kernel(map) => map.contains(key),
            _ => Err(wrong_kind(id)),
        }
    }

    /// `delete g`: empties an array or statistic, resets a scalar.
    pub fn clear(&mut self, id: GlobalId) -> Result<(), RuntimeError> {
        let slot = self.slot_mut(id)?;
        if let Some(fifo) = &mut slot.fifo {
            fifo.clear();
        }
        match &mut slot.store {
            Store::Scalar(v) => {
                *v = match v {
                    Value::Long(_) => Value::Long(0),
                    Value::Str(_) => Value::Str(Box::default()),
                };
                Ok(())
            }
            Store::Array(table) => {
                table.clear();
                Ok(())
            }
            Store::Stats(table) => {
                table.clear();
                Ok(())
            }
            Store::Kernel(map) => map.clear(),
        }
    }

    pub fn stat_add(&mut self, id: GlobalId, key: Key, value: i64) -> Result<(), RuntimeError> {
        let slot = self.slot_mut(id)?;
        let shape = slot.shape.ok_or_else(|| wrong_kind(id))?;
        let max_entries = match slot.storage {
            Storage::Stats { max_entries, .. } => max_entries,
            _ => u64::MAX,
        };
        match &mut slot.store {
            Store::Stats(table) => {
                let full = table.len() as u64 >= max_entries && !key.is_empty();
                let slots = match table.get_mut(&key) {
                    Some(slots) => slots,
                    None if full => {
                        return Err(RuntimeError::ArrayFull {
                            global: slot.name.clone(),
                            max_entries,
                        });
                    }
                    None => table.entry(key).or_insert_with(|| shape.empty()),
                };
                shape.add(slots, value);
                Ok(())
            }
            Store::Kernel(map) => map.stat_add(&key, value),
            _ => Err(wrong_kind(id)),
        }
    }

    /// The statistic at `key` combined over CPUs (empty if absent).
    pub fn stat(&self, id: GlobalId, key: &[Value]) -> Result<Aggregate, RuntimeError> {
        if let Some(Hint {
            value: ElementValue::Stat(agg),
            ..
        }) = self.hint_for(id, key)
        {
            return Ok((**agg).clone());
        }
        let slot = self.slot(id)?;
        let shape = slot.shape.ok_or_else(|| wrong_kind(id))?;
        match &slot.store {
            Store::Stats(table) => Ok(match table.get(key) {
                Some(slots) => shape.aggregate([slots.as_slice()]),
                None => shape.aggregate([shape.empty().as_slice()]),
            }),
            Store::Kernel(map) => map.stat(key),
            _ => Err(wrong_kind(id)),
        }
    }

    pub fn stat_get(
        &self,
        id: GlobalId,
        key: &[Value],
        what: StatValue,
    ) -> Result<i64, RuntimeError> {
        self.stat(id, key)?.get(what)
    }

    /// The generation a snapshot taken now belongs to.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Remembers the element (value or aggregate) a foreach over `id`
    /// visits, if its snapshot (taken at `generation`) is still current: no
    /// host code changed any global since. For a BPF map, kernel probes may
    /// have written the element after the snapshot; stap holds the array's
    /// lock for the whole loop, so there `a[k]` (or `@count(s[k])`) sees
    /// the value the loop started with, which is the snapshot's.
    pub fn set_hint(&mut self, generation: u64, id: GlobalId, key: Key, value: ElementValue) {
        let array = matches!(
            self.slots.get(id.0 as usize).map(|s| &s.store),
            Some(Store::Array(_) | Store::Stats(_) | Store::Kernel(_))
        );
        self.hint = (array && generation == self.generation).then_some(Hint {
            global: id,
            key,
            value,
        });
    }

    /// The foreach hint, if it is for element `key` of `id`.
    fn hint_for(&self, id: GlobalId, key: &[Value]) -> Option<&Hint> {
        self.hint
            .as_ref()
            .filter(|hint| hint.global == id && hint.key.as_slice() == key)
    }

    /// Every element, for a foreach snapshot (unsorted).
    pub fn elements(&self, id: GlobalId) -> Result<Vec<Element>, RuntimeError> {
        let slot = self.slot(id)?;
        match &slot.store {
            Store::Array(table) => Ok(table
                .iter()
                .map(|(k, v)| Element {
                    key: k.clone(),
                    value: ElementValue::Plain(v.clone()),
                })
                .collect()),
            Store::Stats(table) => {
                let shape = slot.shape.ok_or_else(|| wrong_kind(id))?;
                Ok(table
                    .iter()
                    .map(|(k, slots)| Element {
                        key: k.clone(),
                        value: ElementValue::Stat(Box::new(shape.aggregate([slots.as_slice()]))),
                    })
                    .collect())
            }
            Store::Kernel(map) => map.elements(),
            Store::Scalar(_) => Err(wrong_kind(id)),
        }
    }

    pub fn max_string_len(&self) -> usize {
        self.max_string_len
    }
}

fn wrong_kind(id: GlobalId) -> RuntimeError {
    RuntimeError::Internal(format!(
        "global {} used with the wrong kind of operation",
        id.0
    ))
}

/// stap keeps one variance shift per statistic: the one its `@variance`
/// calls name (the largest, if they differ).
fn variance_shifts(module: &Module) -> HashMap<u32, u32> {
    let mut shifts = HashMap::new();
    let ops = module
        .functions
        .iter()
        .flat_map(|f| &f.blocks)
        .flat_map(|b| &b.insts)
        .map(|i| &i.op);
    for op in ops {
        if let Op::StatGet {
            global,
            what: StatValue::Variance { shift },
            ..
        }
        | Op::IterStart {
            global,
            sort:
                Some(ir::Sort {
                    by: ir::SortBy::Aggregate(StatValue::Variance { shift }),
                    ..
                }),
            ..
        } = op
        {
            let entry = shifts.entry(global.0).or_insert(0);
            *entry = (*entry).max(*shift);
        }
    }
    shifts
}

/// Truncates `bytes` to what a string of MAXSTRINGLEN can hold.
pub fn truncate_string(bytes: &mut Vec<u8>, max_string_len: usize) {
    bytes.truncate(max_string_len.saturating_sub(1));
}
