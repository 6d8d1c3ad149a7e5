//! The kernel half of an interactive session, kept while host programs
//! replace one another: the shared maps (globals by name, Control,
//! Counters, Scratch), every loaded program with its link, and one ring
//! buffer per generation.
//!
//! Each input that adds kernel probes is one generation. Its programs are
//! loaded against the maps already there (no bpffs pins: the fds are the
//! only references, so nothing outlives the process), and only they are
//! attached. A generation gets a ring buffer of its own because its
//! records carry ids of its own module (format ids, probe indexes, string
//! ids, source files), which a later, larger module numbers differently.

use std::collections::BTreeMap;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use stap_lang::bpf::{AttachKind, MapRole, MapSpec, Object, PerfChain};
use stap_lang::ir;
use stap_lang::ir::GlobalId;

use crate::attach;
use crate::load::{self, LoadError};
use crate::sys;

/// A map shared by every generation.
#[derive(Debug)]
struct Shared {
    spec: MapSpec,
    fd: OwnedFd,
}

/// One loaded kernel probe of the session.
#[derive(Debug)]
pub struct LiveProbe {
    /// Shown by `:probes`, used by `:detach`/`:attach`; starts at 1.
    pub id: usize,
    pub generation: usize,
    /// The resolved probe point (`kernel.trace("skb:kfree_skb")`).
    pub point: String,
    attach: AttachKind,
    program: OwnedFd,
    /// The links or perf events; `None` while detached.
    links: Option<Vec<OwnedFd>>,
}

impl LiveProbe {
    pub fn attached(&self) -> bool {
        self.links.is_some()
    }

    /// Runs of the program since it was loaded (BPF run statistics);
    /// `None` when the kernel does not count them.
    pub fn hits(&self, counting: bool) -> Option<u64> {
        if !counting {
            return None;
        }
        sys::prog_info(self.program.as_fd())
            .ok()
            .map(|info| info.run_cnt)
    }

    fn recursion_misses(&self) -> u64 {
        sys::prog_info(self.program.as_fd()).map_or(0, |info| info.recursion_misses)
    }
}

/// One generation's ring buffer.
#[derive(Debug)]
pub struct LiveRing {
    pub fd: OwnedFd,
    pub size: u32,
    pub generation: usize,
}

/// Why an input's kernel probes were not added; nothing of it stays.
#[derive(Debug)]
pub enum AddError {
    /// A global's map would change (type, key, value size or capacity).
    Layout(String),
    Load(LoadError),
    Attach(attach::AttachError),
}

impl fmt::Display for AddError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddError::Layout(what) => f.write_str(what),
            AddError::Load(e) => write!(f, "{e}"),
            AddError::Attach(e) => write!(f, "{e}"),
        }
    }
}

/// What [`KernelState::add`] did.
#[derive(Debug, Default)]
pub struct Added {
    /// Globals whose map was created now (a value saved on the host goes
    /// in); the others already hold their values.
    pub fresh: Vec<GlobalId>,
    /// Programs were loaded: the generation has a ring buffer and its
    /// module must be kept to decode it.
    pub programs: usize,
}

#[derive(Debug, Default)]
pub struct KernelState {
    control: Option<Shared>,
    counters: Option<Shared>,
    scratch: Option<Shared>,
    globals: BTreeMap<String, Shared>,
    pub rings: Vec<LiveRing>,
    pub probes: Vec<LiveProbe>,
    /// BPF_ENABLE_STATS, held for the whole session: per-probe hit counts.
    stats: Option<OwnedFd>,
    stats_tried: bool,
    /// The Control run flag has been set once: new programs go live at
    /// attach.
    pub running: bool,
}

impl KernelState {
    pub fn new() -> KernelState {
        KernelState::default()
    }

    /// Whether per-probe hit counts are available.
    pub fn counting(&self) -> bool {
        self.stats.is_some()
    }

    pub fn control(&self) -> Option<(BorrowedFd<'_>, u32)> {
        self.control
            .as_ref()
            .map(|m| (m.fd.as_fd(), m.spec.value_size))
    }

    pub fn counters(&self) -> Option<(BorrowedFd<'_>, u32)> {
        self.counters
            .as_ref()
            .map(|m| (m.fd.as_fd(), m.spec.value_size))
    }

    /// The map fd of a kernel-held global.
    pub fn global_fd(&self, name: &str) -> Option<i32> {
        self.globals.get(name).map(|m| m.fd.as_raw_fd())
    }

    /// BPF recursion misses summed over every probe.
    pub fn skipped(&self) -> u64 {
        self.probes.iter().map(LiveProbe::recursion_misses).sum()
    }

    /// Loads and attaches the programs of `object` that `chosen` picks,
    /// sharing the maps already there; all or nothing.
    pub fn add(
        &mut self,
        object: &Object,
        module: &ir::Module,
        generation: usize,
        chosen: &dyn Fn(usize) -> bool,
    ) -> Result<Added, AddError> {
        if !self.stats_tried {
            self.stats_tried = true;
            self.stats = sys::enable_run_stats().ok();
        }
        let global_name = |id: GlobalId| module.global(id).name.clone();
        // Per map: the shared map it is, if any; layout changes refused.
        let mut shared: Vec<Option<&Shared>> = Vec::with_capacity(object.maps.len());
        for spec in &object.maps {
            let existing = match &spec.role {
                MapRole::Global(id) => self.globals.get(&global_name(*id)),
                MapRole::Control => self.control.as_ref(),
                MapRole::Counters => self.counters.as_ref(),
                MapRole::Scratch => self
                    .scratch
                    .as_ref()
                    .filter(|old| same_shape(&old.spec, spec, true)),
                MapRole::Events | MapRole::Formats(_) | MapRole::PerfChain => None,
            };
            if let Some(old) = existing
                && !same_shape(&old.spec, spec, matches!(spec.role, MapRole::Scratch))
            {
                let what = match &spec.role {
                    MapRole::Global(id) => format!("global '{}'", global_name(*id)),
                    other => format!("the {other:?} map"),
                };
                return Err(AddError::Layout(format!(
                    "{what} cannot change in this session: this input needs its map with {}, \
                     and the running probes use one with {} (a statistic keeps only the \
                     aggregates used when it was first added)",
                    shape_change(spec, &old.spec),
                    shape_change(&old.spec, spec),
                )));
            }
            shared.push(existing);
        }
        let wanted: Vec<usize> = (0..object.programs.len()).filter(|i| chosen(*i)).collect();
        let missing_global = object
            .maps
            .iter()
            .zip(&shared)
            .any(|(spec, s)| s.is_none() && matches!(spec.role, MapRole::Global(_)));
        if wanted.is_empty() && !missing_global {
            return Ok(Added::default());
        }
        let loaded = load::load_added(
            object,
            &|index| shared[index].map(|s| s.fd.as_fd()),
            &|index| wanted.contains(&index),
        )
        .map_err(AddError::Load)?;
        let mut links = Vec::new();
        for (index, fd) in &loaded.programs {
            let program = &object.programs[*index];
            let attached = match &program.attach {
                AttachKind::PerfEvent {
                    chain:
                        PerfChain {
                            slot: Some(slot), ..
                        },
                    ..
                } => attach::perf_chained(object, &loaded.maps, *slot, fd.as_fd()),
                other => attach::attach_one(other, fd.as_fd()),
            };
            let attached = attached.map_err(|reason| {
                AddError::Attach(attach::AttachError {
                    program: *index,
                    probe: program.attach.point_text(),
                    reason,
                })
            })?;
            links.push(attached);
        }

        // Everything is in place: keep it.
        let was_shared: Vec<bool> = shared.iter().map(Option::is_some).collect();
        let mut added = Added {
            fresh: Vec::new(),
            programs: loaded.programs.len(),
        };
        for ((spec, fd), was_shared) in object.maps.iter().zip(loaded.maps).zip(was_shared) {
            if was_shared {
                continue;
            }
            let map = Shared {
                spec: spec.clone(),
                fd,
            };
            match &spec.role {
                MapRole::Global(id) => {
                    added.fresh.push(*id);
                    self.globals.insert(global_name(*id), map);
                }
                MapRole::Control => self.control = Some(map),
                MapRole::Counters => self.counters = Some(map),
                // A larger scratch area is the one later generations share.
                MapRole::Scratch => self.scratch = Some(map),
                MapRole::Events if added.programs > 0 => self.rings.push(LiveRing {
                    size: spec.max_entries,
                    fd: map.fd,
                    generation,
                }),
                // Programs hold their own reference to the formats.
                // Programs hold the chain map through their attachment.
                MapRole::Events | MapRole::Formats(_) | MapRole::PerfChain => {}
            }
        }
        for ((index, program), links) in loaded.programs.into_iter().zip(links) {
            let probe = object.programs[index].probe;
            self.probes.push(LiveProbe {
                id: self.probes.len() + 1,
                generation,
                point: module.probes.get(probe).map_or_else(
                    || object.programs[index].attach.point_text(),
                    |p| p.point.clone(),
                ),
                attach: object.programs[index].attach.clone(),
                program,
                links: Some(links),
            });
        }
        Ok(added)
    }

    /// Detaches probe `id` (closing its links); the program stays loaded.
    pub fn detach(&mut self, id: usize) -> Result<(), String> {
        let probe = self.probe_mut(id)?;
        if probe.links.take().is_none() {
            return Err(format!("probe {id} is not attached"));
        }
        Ok(())
    }

    /// Attaches probe `id` again.
    pub fn reattach(&mut self, id: usize) -> Result<(), String> {
        let probe = self.probe_mut(id)?;
        if probe.links.is_some() {
            return Err(format!("probe {id} is already attached"));
        }
        let links = attach::attach_one(&probe.attach, probe.program.as_fd())
            .map_err(|e| format!("cannot attach probe {id} ({}): {e}", probe.point))?;
        probe.links = Some(links);
        Ok(())
    }

    fn probe_mut(&mut self, id: usize) -> Result<&mut LiveProbe, String> {
        self.probes
            .iter_mut()
            .find(|p| p.id == id)
            .ok_or_else(|| format!("no probe {id} (:probes lists them)"))
    }
}

/// Whether a map can stand for `new`: same type and sizes; `at_least`
/// accepts a larger value (scratch space).
fn same_shape(old: &MapSpec, new: &MapSpec, at_least: bool) -> bool {
    old.map_type == new.map_type
        && old.key_size == new.key_size
        && old.max_entries == new.max_entries
        && old.flags == new.flags
        && if at_least {
            old.value_size >= new.value_size
        } else {
            old.value_size == new.value_size
        }
}

/// What `spec` has that `other` does not, in words.
fn shape_change(spec: &MapSpec, other: &MapSpec) -> String {
    let mut parts = Vec::new();
    if spec.map_type != other.map_type {
        parts.push(format!("map type {}", spec.map_type));
    }
    if spec.key_size != other.key_size {
        parts.push(format!("{}-byte keys", spec.key_size));
    }
    if spec.value_size != other.value_size {
        parts.push(format!("{}-byte values", spec.value_size));
    }
    if spec.max_entries != other.max_entries {
        parts.push(format!("{} entries", spec.max_entries));
    }
    if spec.flags != other.flags {
        parts.push(format!("flags {:#x}", spec.flags));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(value_size: u32) -> MapSpec {
        MapSpec {
            name: "stap_s".into(),
            map_type: sys::BPF_MAP_TYPE_PERCPU_ARRAY,
            key_size: 4,
            value_size,
            max_entries: 1,
            flags: 0,
            role: MapRole::Scratch,
        }
    }

    #[test]
    fn a_map_is_shared_only_with_its_shape() {
        assert!(same_shape(&spec(16), &spec(16), false));
        assert!(!same_shape(&spec(16), &spec(1040), false));
        // Scratch space may be larger than a new program needs.
        assert!(same_shape(&spec(64), &spec(16), true));
        assert!(!same_shape(&spec(16), &spec(64), true));
        assert_eq!(shape_change(&spec(1040), &spec(16)), "1040-byte values");
    }
}
