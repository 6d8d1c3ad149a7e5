//! Passes 1 and 2 on arbitrary text with the real stdlib (tapsets, aliases,
//! their functions), against the fake kernel. Any panic is a bug.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let kernel = common::kernel();
    let _ = common::elaborate(kernel, data);
});
