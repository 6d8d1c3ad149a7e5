//! Reading a `BPF_MAP_TYPE_RINGBUF` from user space: the kernel's mmap
//! protocol, done by hand (a few mappings and two positions) so no loader
//! library is needed for the one map every session reads.
//!
//! Layout (kernel/bpf/ringbuf.c): at offset 0 of the map fd, one writable
//! page holding the consumer position; at offset `page`, one read-only page
//! holding the producer position, followed by the data area, which the
//! kernel offers twice in a row so that a record wrapping around the end
//! reads as one piece. Each record starts with an 8-byte header
//! `{u32 len, u32 page_offset}`, where `len` carries the BUSY (not yet
//! committed) and DISCARD bits; records are padded to 8 bytes.
//!
//! The data area is mapped in a sliding window, not whole: the kernel
//! makes every page of a mapping resident at mmap time, so mapping the
//! whole 8 MiB ring of a printing script put 8 MiB in the host's RSS,
//! though the reader only ever looks at the part just written
//! (bench/analysis.md, "RSS"). The window is two steps long and starts at
//! a multiple of the step; since the data area appears twice, a record
//! that starts in the window's first step and is at most a step long lies
//! inside it, wrapping or not. A longer record gets a window of its own.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const BUSY_BIT: u32 = 1 << 31;
const DISCARD_BIT: u32 = 1 << 30;
const HEADER_BYTES: u64 = 8;

/// How far the window moves at a time (at most the ring's size): 256 KiB
/// is thousands of printf records per remapping.
const WINDOW_STEP: u64 = 256 << 10;

/// One read-only mapping of part of the map fd.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped in `map` with this length; nothing borrows it past
        // the mapping's owner.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A consumer of one ring buffer map.
pub struct RingBuf {
    /// Its own duplicate of the map fd, to move the window.
    fd: OwnedFd,
    /// The consumer position's page (writable).
    consumer: Mapping,
    /// The producer position's page.
    producer: Mapping,
    page: u64,
    /// Bytes of data area (a power of two, the map's `max_entries`).
    size: u64,
    step: u64,
    /// The mapped part of the (doubled) data area: `window.len` bytes from
    /// data offset `window_at`.
    window: Mapping,
    window_at: u64,
}

impl RingBuf {
    /// Maps the ring buffer whose fd is `fd` and whose data area is
    /// `max_entries` bytes (as in its `MapSpec`).
    pub fn new(fd: BorrowedFd<'_>, max_entries: u32) -> io::Result<RingBuf> {
        RingBuf::with_step(fd, max_entries, WINDOW_STEP)
    }

    /// As [`new`](Self::new), with the window moving `step` bytes at a
    /// time (tests move it often).
    fn with_step(fd: BorrowedFd<'_>, max_entries: u32, step: u64) -> io::Result<RingBuf> {
        let size = u64::from(max_entries);
        if !size.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ring buffer size {size} is not a power of two"),
            ));
        }
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = u64::try_from(page).unwrap_or(4096);
        let fd = fd.try_clone_to_owned()?;
        let consumer = map(fd.as_fd(), page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let producer = map(fd.as_fd(), page, libc::PROT_READ, page)?;
        // A power of two between a page and the ring's size, so that it
        // divides the data area.
        let step = step.min(size).max(page).next_power_of_two();
        let window = map(fd.as_fd(), 2 * step, libc::PROT_READ, 2 * page)?;
        Ok(RingBuf {
            fd,
            consumer,
            producer,
            page,
            size,
            step,
            window,
            window_at: 0,
        })
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: the consumer page is mapped read-write for our lifetime
        // and starts with the kernel's `unsigned long consumer_pos`, which
        // is 8-byte aligned (page aligned).
        unsafe { &*self.consumer.ptr.as_ptr().cast::<AtomicU64>() }
    }

    fn producer_pos(&self) -> &AtomicU64 {
        // SAFETY: as above, for the producer page (read-only: we only load).
        unsafe { &*self.producer.ptr.as_ptr().cast::<AtomicU64>() }
    }

    /// The address of data offset `offset` (below `size`), with `len`
    /// bytes after it mapped (at most `size`), moving the window if needed.
    fn bytes_at(&mut self, offset: u64, len: u64) -> io::Result<*const u8> {
        let mapped = self.window.len as u64;
        if offset < self.window_at || offset + len > self.window_at + mapped {
            let at = offset & !(self.step - 1);
            // Within the doubled area: `at <= size - step`, and
            // `offset + len < 2 * size`.
            let want = (offset + len - at).next_multiple_of(self.page);
            let window_len = want.max(2 * self.step);
            self.window = map(
                self.fd.as_fd(),
                window_len,
                libc::PROT_READ,
                2 * self.page + at,
            )?;
            self.window_at = at;
        }
        // SAFETY: `offset - window_at + len` is within the window mapping.
        Ok(unsafe {
            self.window
                .ptr
                .as_ptr()
                .add((offset - self.window_at) as usize)
        })
    }

    /// Calls `each` with the payload of every committed record, in order,
    /// and returns how many there were. Stops at the first record still
    /// being written (BUSY), or once the payloads passed reach `max_bytes`;
    /// a later call picks up the rest. Fails only if the window cannot be
    /// moved (mmap), with the records not yet read left in the ring.
    pub fn consume(&mut self, max_bytes: u64, mut each: impl FnMut(&[u8])) -> io::Result<usize> {
        let mask = self.size - 1;
        let mut consumed = 0;
        let mut passed = 0;
        let mut cons = self.consumer_pos().load(Ordering::Acquire);
        let mut given_back = cons;
        let result = loop {
            let prod = self.producer_pos().load(Ordering::Acquire);
            if cons >= prod || passed >= max_bytes {
                break Ok(consumed);
            }
            let offset = cons & mask;
            // The header is 8-byte aligned (every record is padded to 8
            // bytes), so it never wraps.
            let header = match self.bytes_at(offset, HEADER_BYTES) {
                Ok(header) => header,
                Err(e) => break Err(e),
            };
            // SAFETY: `header` points at 8 mapped, 8-byte aligned bytes; the
            // kernel publishes `len` with a release store once the record
            // is committed.
            let len_word = unsafe { &*header.cast::<AtomicU32>() }.load(Ordering::Acquire);
            if len_word & BUSY_BIT != 0 {
                break Ok(consumed);
            }
            let len = u64::from(len_word & !(BUSY_BIT | DISCARD_BIT));
            if len_word & DISCARD_BIT == 0 && len <= self.size - HEADER_BYTES {
                let record = match self.bytes_at(offset, HEADER_BYTES + len) {
                    Ok(record) => record,
                    Err(e) => break Err(e),
                };
                // SAFETY: `bytes_at` mapped `HEADER_BYTES + len` bytes from
                // `record`; the doubled data area makes them contiguous.
                let payload = unsafe {
                    std::slice::from_raw_parts(record.add(HEADER_BYTES as usize), len as usize)
                };
                each(payload);
                consumed += 1;
                passed += len;
            }
            cons += (len + HEADER_BYTES).next_multiple_of(8);
            // Space goes back in quarters of the ring and at the end, not
            // per record: the producer reads this line on every reserve, so
            // a store per record made both sides miss on it per event.
            if cons - given_back >= self.size / 4 {
                self.consumer_pos().store(cons, Ordering::Release);
                given_back = cons;
            }
        };
        if cons != given_back {
            self.consumer_pos().store(cons, Ordering::Release);
        }
        result
    }
}

/// Maps `len` bytes of the map fd from byte `offset`, read-only unless
/// `prot` says otherwise.
fn map(fd: BorrowedFd<'_>, len: u64, prot: i32, offset: u64) -> io::Result<Mapping> {
    let (Ok(len), Ok(offset)) = (usize::try_from(len), libc::off_t::try_from(offset)) else {
        return Err(io::Error::other("ring buffer mapping out of range"));
    };
    // SAFETY: a fresh shared mapping of the map fd at a kernel-chosen
    // address; the kernel checks the length and protection against the map.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            offset,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // Not for children: the kernel maps every page of the mapping, so a
    // fork (the exit's detaching helpers, attach/handoff.rs) would copy all
    // its page table entries. A failure only costs that copy.
    // SAFETY: advice on the mapping just made.
    unsafe { libc::madvise(ptr, len, libc::MADV_DONTFORK) };
    let ptr = NonNull::new(ptr.cast()).ok_or_else(|| io::Error::other("mmap returned null"))?;
    Ok(Mapping { ptr, len })
}

#[cfg(test)]
mod tests {
    //! Live (root): a tiny socket-filter program, run with
    //! BPF_PROG_TEST_RUN, writes records the reader must see in order.
    use super::*;
    use crate::sys::{self, ProgLoad};
    use stap_lang::bpf::{MapRole, MapSpec};
    use std::os::fd::AsRawFd;

    const MAP_RINGBUF: u32 = 27;
    const PROG_SOCKET_FILTER: u32 = 1;
    const HELPER_RINGBUF_OUTPUT: i32 = 130;

    fn insn(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
        u64::from(op)
            | u64::from(dst | (src << 4)) << 8
            | u64::from(off as u16) << 16
            | u64::from(imm as u32) << 32
    }

    /// `bpf_ringbuf_output(map, &value, 8, 0)` for each value, then return 0.
    fn program(map_fd: i32, values: &[i32]) -> Vec<u64> {
        let records: Vec<Vec<i32>> = values.iter().map(|v| vec![*v]).collect();
        program_of_records(map_fd, &records)
    }

    /// One `bpf_ringbuf_output` per record, each of its values a u64.
    fn program_of_records(map_fd: i32, records: &[Vec<i32>]) -> Vec<u64> {
        let mut code = Vec::new();
        for values in records {
            let bytes = 8 * values.len() as i32;
            code.push(insn(0x18, 1, 1, 0, map_fd)); // r1 = map (ld_imm64)
            code.push(0);
            for (i, value) in values.iter().enumerate() {
                // *(u64 *)(r10 - bytes + 8i) = value
                code.push(insn(0x7a, 10, 0, (8 * i as i32 - bytes) as i16, *value));
            }
            code.push(insn(0xbf, 2, 10, 0, 0)); // r2 = r10
            code.push(insn(0x07, 2, 0, 0, -bytes)); // r2 -= bytes
            code.push(insn(0xb7, 3, 0, 0, bytes)); // r3 = bytes
            code.push(insn(0xb7, 4, 0, 0, 0)); // r4 = 0
            code.push(insn(0x85, 0, 0, 0, HELPER_RINGBUF_OUTPUT));
        }
        code.push(insn(0xb7, 0, 0, 0, 0)); // r0 = 0
        code.push(insn(0x95, 0, 0, 0, 0)); // exit
        code
    }

    fn ring_spec(bytes: u32) -> MapSpec {
        MapSpec {
            name: "test_events".into(),
            map_type: MAP_RINGBUF,
            key_size: 0,
            value_size: 0,
            max_entries: bytes,
            flags: 0,
            role: MapRole::Events,
        }
    }

    fn run_once(prog: BorrowedFd<'_>) {
        let packet = [0u8; 64];
        let run = sys::TestRun {
            data: &packet,
            ..sys::TestRun::default()
        };
        sys::prog_test_run(prog, &run).expect("test run");
    }

    #[test]
    fn records_written_by_a_program_are_read_in_order() {
        let spec = ring_spec(1 << 16);
        let map = sys::map_create(&spec).expect("creating a ring buffer (needs root)");
        let mut ring = RingBuf::new(map.as_fd(), spec.max_entries).expect("mapping it");
        assert_eq!(
            ring.consume(u64::MAX, |_| panic!("empty ring gave a record"))
                .unwrap(),
            0
        );

        let insns = program(map.as_raw_fd(), &[7, -3, 1 << 30]);
        let request = ProgLoad {
            prog_type: PROG_SOCKET_FILTER,
            expected_attach_type: 0,
            name: "test_ringbuf",
            insns: &insns,
            attach_btf_id: 0,
            attach_btf_obj: None,
        };
        let prog = sys::prog_load(&request, None).expect("loading the test program");
        let packet = [0u8; 64];
        let run = sys::TestRun {
            data: &packet,
            ..sys::TestRun::default()
        };
        sys::prog_test_run(prog.as_fd(), &run).expect("test run");

        let mut seen = Vec::new();
        let count = ring
            .consume(u64::MAX, |bytes| {
                seen.push(i64::from_le_bytes(bytes.try_into().expect("8-byte record")))
            })
            .unwrap();
        assert_eq!(count, 3);
        assert_eq!(seen, vec![7, -3, 1 << 30]);
        assert_eq!(
            ring.consume(u64::MAX, |_| panic!("records were consumed twice"))
                .unwrap(),
            0
        );
    }

    #[test]
    fn records_that_wrap_around_the_end_of_the_data_area_read_whole() {
        // A one-page ring: an 8-byte record first, then 24-byte ones, so
        // records are 16 + 32k bytes in: the one at 4080 has its header
        // at the end of the area and its payload split 8 + 16 across it.
        reads_every_record_whole(4096, WINDOW_STEP);
    }

    #[test]
    fn the_window_moves_through_a_ring_larger_than_it() {
        // A four-page ring read through a one-page step: the window moves
        // at every 4 KiB boundary, and records cross those boundaries.
        reads_every_record_whole(4 * 4096, 4096);
    }

    fn reads_every_record_whole(size: u32, step: u64) {
        let spec = ring_spec(size);
        let map = sys::map_create(&spec).expect("creating a ring buffer (needs root)");
        let mut ring = RingBuf::with_step(map.as_fd(), spec.max_entries, step).expect("mapping it");
        let first = program(map.as_raw_fd(), &[-1]);
        let records: Vec<Vec<i32>> = (0..40).map(|i| vec![i, i + 1000, i + 2000]).collect();
        let batch = program_of_records(map.as_raw_fd(), &records);
        let load = |insns: &[u64]| {
            let request = ProgLoad {
                prog_type: PROG_SOCKET_FILTER,
                expected_attach_type: 0,
                name: "test_ringbuf",
                insns,
                attach_btf_id: 0,
                attach_btf_obj: None,
            };
            sys::prog_load(&request, None).expect("loading the test program")
        };
        let (first, batch) = (load(&first), load(&batch));
        run_once(first.as_fd());
        assert_eq!(ring.consume(u64::MAX, |_| {}).unwrap(), 1);
        // 40 records of 32 bytes a run: 1,280 bytes; enough runs to go
        // around the data area more than twice.
        let runs = 3 * size as usize / 1280 + 1;
        for run in 0..runs {
            run_once(batch.as_fd());
            let mut seen = Vec::new();
            ring.consume(u64::MAX, |bytes| {
                let words: Vec<i64> = bytes
                    .chunks(8)
                    .map(|w| i64::from_le_bytes(w.try_into().expect("8-byte words")))
                    .collect();
                seen.push(words);
            })
            .unwrap();
            let wanted: Vec<Vec<i64>> = records
                .iter()
                .map(|r| r.iter().map(|v| i64::from(*v)).collect())
                .collect();
            assert_eq!(seen, wanted, "run {run}");
        }
    }
}
