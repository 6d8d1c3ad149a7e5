//! Reading a `BPF_MAP_TYPE_RINGBUF` from user space: the kernel's mmap
//! protocol, done by hand (two mappings and two positions) so no loader
//! library is needed for the one map every session reads.
//!
//! Layout (kernel/bpf/ringbuf.c): at offset 0 of the map fd, one writable
//! page holding the consumer position; at offset `page`, one read-only page
//! holding the producer position followed by the data area. The kernel
//! offers the data area twice in a row, so that a record wrapping around
//! the end reads as one piece; we map it once and copy the rare wrapping
//! record, because every mapped page of a ring is resident from the start
//! (the kernel maps them all at mmap time): the second copy doubled the
//! ring's share of the process's RSS (bench/analysis.md, "RSS"). Each
//! record starts with an 8-byte header `{u32 len, u32 page_offset}`, where
//! `len` carries the BUSY (not yet committed) and DISCARD bits; records are
//! padded to 8 bytes.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const BUSY_BIT: u32 = 1 << 31;
const DISCARD_BIT: u32 = 1 << 30;
const HEADER_BYTES: u64 = 8;

/// A consumer of one ring buffer map. It borrows nothing: the mappings keep
/// the map alive even if its fd is closed, and are unmapped on drop.
pub struct RingBuf {
    consumer: NonNull<u8>,
    producer: NonNull<u8>,
    page: usize,
    /// Bytes of data area (a power of two, the map's `max_entries`).
    size: u64,
    /// A record that wraps around the end of the data area, made whole.
    wrapped: Vec<u8>,
}

impl RingBuf {
    /// Maps the ring buffer whose fd is `fd` and whose data area is
    /// `max_entries` bytes (as in its `MapSpec`).
    pub fn new(fd: BorrowedFd<'_>, max_entries: u32) -> io::Result<RingBuf> {
        let size = u64::from(max_entries);
        if !size.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ring buffer size {size} is not a power of two"),
            ));
        }
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = usize::try_from(page).unwrap_or(4096);
        let consumer = map(fd, page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let producer_len = page + size as usize;
        let producer = match map(fd, producer_len, libc::PROT_READ, page) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: `consumer` was mapped above with length `page`.
                unsafe { libc::munmap(consumer.as_ptr().cast(), page) };
                return Err(e);
            }
        };
        Ok(RingBuf {
            consumer,
            producer,
            page,
            size,
            wrapped: Vec::new(),
        })
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: the consumer page is mapped read-write for our lifetime
        // and starts with the kernel's `unsigned long consumer_pos`, which
        // is 8-byte aligned (page aligned).
        unsafe { &*self.consumer.as_ptr().cast::<AtomicU64>() }
    }

    fn producer_pos(&self) -> &AtomicU64 {
        // SAFETY: as above, for the producer page (read-only: we only load).
        unsafe { &*self.producer.as_ptr().cast::<AtomicU64>() }
    }

    /// Calls `each` with the payload of every committed record, in order,
    /// and returns how many there were. Stops at the first record still
    /// being written (BUSY); a later call picks it up.
    pub fn consume(&mut self, mut each: impl FnMut(&[u8])) -> usize {
        let mask = self.size - 1;
        let mut consumed = 0;
        let mut cons = self.consumer_pos().load(Ordering::Acquire);
        let mut given_back = cons;
        loop {
            let prod = self.producer_pos().load(Ordering::Acquire);
            if cons >= prod {
                break;
            }
            let offset = (cons & mask) as usize;
            // SAFETY: `offset < size`, and the data area (2 × size bytes)
            // starts one page into the producer mapping; the header is
            // 8-byte aligned because every record is padded to 8 bytes.
            let header = unsafe { self.producer.as_ptr().add(self.page + offset) };
            // SAFETY: see above; the kernel publishes `len` with a release
            // store once the record is committed.
            let len_word = unsafe { &*header.cast::<AtomicU32>() }.load(Ordering::Acquire);
            if len_word & BUSY_BIT != 0 {
                break;
            }
            let len = u64::from(len_word & !(BUSY_BIT | DISCARD_BIT));
            if len_word & DISCARD_BIT == 0 && len <= self.size - HEADER_BYTES {
                // The header never wraps (records are 8-byte aligned); the
                // payload may: its first `head` bytes run to the end of the
                // data area, the rest starts at its beginning.
                let start = offset + HEADER_BYTES as usize;
                let len = len as usize;
                let head = len.min(self.size as usize - start);
                // SAFETY: the data area starts one page into the producer
                // mapping and is `size` bytes long.
                let data = unsafe { self.producer.as_ptr().add(self.page) };
                // SAFETY: `start + head ≤ size`: within the data area.
                let first = unsafe { std::slice::from_raw_parts(data.add(start), head) };
                if head == len {
                    each(first);
                } else {
                    // SAFETY: `len - head < size`: within the data area.
                    let rest = unsafe { std::slice::from_raw_parts(data, len - head) };
                    self.wrapped.clear();
                    self.wrapped.extend_from_slice(first);
                    self.wrapped.extend_from_slice(rest);
                    each(&self.wrapped);
                }
                consumed += 1;
            }
            cons += (len + HEADER_BYTES).next_multiple_of(8);
            // Space goes back in quarters of the ring and at the end, not
            // per record: the producer reads this line on every reserve, so
            // a store per record made both sides miss on it per event.
            if cons - given_back >= self.size / 4 {
                self.consumer_pos().store(cons, Ordering::Release);
                given_back = cons;
            }
        }
        if cons != given_back {
            self.consumer_pos().store(cons, Ordering::Release);
        }
        consumed
    }
}

impl Drop for RingBuf {
    fn drop(&mut self) {
        // SAFETY: both regions were mapped in `new` with these lengths and
        // nothing borrows them past `self`.
        unsafe {
            libc::munmap(self.consumer.as_ptr().cast(), self.page);
            libc::munmap(
                self.producer.as_ptr().cast(),
                self.page + self.size as usize,
            );
        }
    }
}

fn map(fd: BorrowedFd<'_>, len: usize, prot: i32, offset: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh shared mapping of the map fd at a kernel-chosen
    // address; the kernel checks the length and protection against the map.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_SHARED,
            fd.as_fd().as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // Not for children: the kernel maps every page of the ring, so a fork
    // (the exit's detaching helpers, attach/handoff.rs) would copy all its
    // page table entries. A failure only costs that copy.
    // SAFETY: advice on the mapping just made.
    unsafe { libc::madvise(ptr, len, libc::MADV_DONTFORK) };
    NonNull::new(ptr.cast()).ok_or_else(|| io::Error::other("mmap returned null"))
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
        assert_eq!(ring.consume(|_| panic!("empty ring gave a record")), 0);

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
        let count = ring.consume(|bytes| {
            seen.push(i64::from_le_bytes(bytes.try_into().expect("8-byte record")))
        });
        assert_eq!(count, 3);
        assert_eq!(seen, vec![7, -3, 1 << 30]);
        assert_eq!(ring.consume(|_| panic!("records were consumed twice")), 0);
    }

    #[test]
    fn records_that_wrap_around_the_end_of_the_data_area_read_whole() {
        // A one-page ring: an 8-byte record first, then 24-byte ones, so
        // records are 16 + 32k bytes in: the one at 4080 has its header
        // at the end of the area and its payload split 8 + 16 across it.
        let page = 4096;
        let spec = ring_spec(page);
        let map = sys::map_create(&spec).expect("creating a ring buffer (needs root)");
        let mut ring = RingBuf::new(map.as_fd(), spec.max_entries).expect("mapping it");
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
        assert_eq!(ring.consume(|_| {}), 1);
        // 40 records of 32 bytes a run: 1,280 bytes, so the fourth run
        // goes past the end of the 4,096-byte area.
        for run in 0..10 {
            run_once(batch.as_fd());
            let mut seen = Vec::new();
            ring.consume(|bytes| {
                let words: Vec<i64> = bytes
                    .chunks(8)
                    .map(|w| i64::from_le_bytes(w.try_into().expect("8-byte words")))
                    .collect();
                seen.push(words);
            });
            let wanted: Vec<Vec<i64>> = records
                .iter()
                .map(|r| r.iter().map(|v| i64::from(*v)).collect())
                .collect();
            assert_eq!(seen, wanted, "run {run}");
        }
    }
}
