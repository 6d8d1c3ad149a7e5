//! Passes 1 to 3: a program that elaborates is lowered to the IR, and the
//! IR it gives must pass our verifier. A panic, or IR the verifier
//! rejects, is a bug (user errors end as diagnostics before this).
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use stap_lang::ir;

fuzz_target!(|data: &[u8]| {
    let kernel = common::kernel();
    let Some(program) = common::elaborate(kernel, data) else {
        return;
    };
    let Ok(module) = ir::lower::lower(&program) else {
        return;
    };
    if let Err(problems) = ir::verify::verify(&module) {
        panic!("lowering gave malformed IR:\n{}", problems.join("\n"));
    }
});
