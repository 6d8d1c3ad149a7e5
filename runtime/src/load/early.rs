//! The events ring buffer, created while the passes run.
//!
//! Creating a printing script's ring (8 MiB here) takes about 2 ms, most
//! of it the kernel allocating and charging its pages one by one
//! (`ringbuf_map_alloc`, `page_counter_charge` in a profile), all on the
//! way to the first probe going live. Its size depends only on the CPU
//! count and on whether kernel handlers print, so the driver asks for the
//! printing size before pass 1 ([`create_events_ring`]) and a thread
//! makes it while the script compiles; [`load`](super::load) takes it if
//! the compiled object declares that very map, and otherwise it is closed
//! unused.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Mutex;
use std::thread::JoinHandle;

use stap_lang::bpf::MapSpec;

use crate::sys;

type Made = (MapSpec, io::Result<OwnedFd>);

static EARLY: Mutex<Option<JoinHandle<Made>>> = Mutex::new(None);

/// Starts creating the map `spec` on a thread. Does nothing if that cannot
/// start: `load` then creates it as usual.
pub fn create_events_ring(spec: MapSpec) {
    let thread = std::thread::Builder::new()
        .name("stap-rs-ring".into())
        .stack_size(64 << 10)
        .spawn(move || {
            let fd = sys::map_create(&spec);
            (spec, fd)
        });
    if let (Ok(thread), Ok(mut early)) = (thread, EARLY.lock()) {
        *early = Some(thread);
    }
}

/// The map made early, if it is `spec`. Either way the early map is spent.
pub(super) fn take(spec: &MapSpec) -> Option<OwnedFd> {
    let thread = EARLY.lock().ok()?.take()?;
    let (made, fd) = thread.join().ok()?;
    if made == *spec { fd.ok() } else { None }
}
