//! Uprobes opened while the script compiles.
//!
//! Opening a uprobe's perf event registers the uprobe, and the kernel's
//! registration waits for an RCU grace period (`register_for_each_vma`
//! takes `dup_mmap_sem`, a per-CPU rwsem whose writer waits for one):
//! 7-30 ms here, of which 0.1 ms is CPU time, for one
//! `process("...").function("main")`. The event needs no program to be
//! opened (it is opened disabled; the program comes later with
//! `PERF_EVENT_IOC_SET_BPF`), so the driver asks for the script's uprobes
//! as soon as pass 2 has resolved them ([`open_uprobes`]) and a thread
//! opens them while passes 3-5 compile and load; [`attach`](super::attach)
//! takes each one it attaches ([`take`]), and opens a uprobe the thread
//! does not have itself, as before. An error here is not reported: the
//! attach opens that uprobe again and reports its own.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Mutex, MutexGuard};

use crate::sys;

/// A uprobe as the driver names it: the binary, the function (a symbol
/// name) and whether it is the return probe.
pub type UprobePoint = (String, String, bool);

/// The thread's answer comes through a channel rather than its join: a
/// thread that has sent its answer may still wait to be scheduled for
/// its exit on a loaded machine, and attach need not wait for that.
enum Early {
    Opening(Receiver<Vec<(UprobePoint, OwnedFd)>>),
    Opened(Vec<(UprobePoint, OwnedFd)>),
}

static EARLY: Mutex<Option<Early>> = Mutex::new(None);

fn early() -> MutexGuard<'static, Option<Early>> {
    EARLY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Starts opening one uprobe perf event for each of `points` (one per
/// entry: two probes on one function each get theirs) on a thread. Does
/// nothing if there are none, if uprobes were already asked for, or if no
/// thread can start.
pub fn open_uprobes(points: Vec<UprobePoint>) {
    let mut early = early();
    if points.is_empty() || early.is_some() {
        return;
    }
    let (send, receive) = channel();
    let thread = std::thread::Builder::new()
        .name("stap-rs-uprobes".into())
        .stack_size(256 << 10)
        .spawn(move || {
            let opened: Vec<_> = points
                .into_iter()
                .filter_map(|point| {
                    let (path, function, is_return) = &point;
                    let offset = crate::uprobe::function_offset(Path::new(path), function).ok()?;
                    let event = super::uprobe_event(Path::new(path), offset, *is_return).ok()?;
                    let fd = sys::perf_event_open(&event, -1, 0).ok()?;
                    Some((point, fd))
                })
                .collect();
            // No receiver (the run ended first): the fds close here.
            let _ = send.send(opened);
        });
    if thread.is_ok() {
        *early = Some(Early::Opening(receive));
    }
}

/// The uprobe opened early for this point, if any (waiting for the thread
/// if it is still opening).
pub(super) fn take(path: &Path, function: &str, is_return: bool) -> Option<OwnedFd> {
    let mut early = early();
    let opened = match early.take()? {
        Early::Opening(receive) => receive.recv().unwrap_or_default(),
        Early::Opened(opened) => opened,
    };
    let mut opened = opened;
    let at = opened
        .iter()
        .position(|((p, f, r), _)| Path::new(p) == path && f == function && *r == is_return);
    let fd = at.map(|at| opened.swap_remove(at).1);
    *early = Some(Early::Opened(opened));
    fd
}

/// What the attach did not take (a probe the compiler dropped): closed on
/// a thread of its own, since closing a uprobe waits for grace periods.
pub(super) fn discard_unused() {
    let Some(left) = early().take() else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("stap-rs-unused".into())
        .stack_size(64 << 10)
        .spawn(move || match left {
            Early::Opening(receive) => drop(receive.recv()),
            Early::Opened(opened) => drop(opened),
        });
}
