//! Passes 1 to 4 (kernel half): verified IR is compiled to BPF, and every
//! emitted program must pass the program-shape checks
//! (`stap_lang::bpf::check_shape`). A panic or a malformed program is a
//! bug; a program the emitter refuses ends as a diagnostic.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use stap_lang::{bpf, ir};

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
    let options = bpf::Options {
        kernel: bpf::facts::EmitFacts::for_module(&module, kernel),
        ..bpf::Options::from_limits(&module.limits)
    };
    let Ok(object) = bpf::compile(&module, &options) else {
        return;
    };
    if let Err(problem) = bpf::check_shape(&object) {
        panic!("emitted program is malformed: {problem}");
    }
});
