//! `pipeline::compile`, the one path from an elaborated program to a BPF
//! object that script runs and the REPL share.

mod common;

use common::elaborate_text;
use stap_lang::bpf::{AttachKind, TracepointMechanism};
use stap_lang::pipeline::{self, Next, Options};
use stap_lang::sema::ElabOptions;
use stap_lang::testing::FakeKernel;

const SCRIPT: &str = "probe kernel.trace(\"kfree_skb\") {\n  printf(\"%p\\n\", $skb)\n}\n";

fn compile(options: &Options, next: Next) -> (Option<pipeline::Compiled>, usize) {
    let facts = FakeKernel::new();
    let elaborated = elaborate_text(SCRIPT, &[], &facts, &ElabOptions::default());
    let program = elaborated.program.as_ref().expect("elaborates");
    let mut probes_seen = 0;
    let compiled = pipeline::compile(program, &elaborated.map, &facts, options, &mut |m| {
        probes_seen = m.probes.len();
        next
    })
    .unwrap_or_else(|e| panic!("compiles: {e:?}"));
    (compiled, probes_seen)
}

#[test]
fn programs_carry_line_info_for_the_verifier_log() {
    let (compiled, probes_seen) = compile(&Options::default(), Next::Emit);
    assert_eq!(probes_seen, 1, "the callback sees the lowered IR");
    let object = compiled.expect("not stopped").object;
    let program = &object.programs[0];
    assert!(!program.line_info.is_empty(), "no line_info: {program:?}");
    assert!(!program.func_info.is_empty());
}

#[test]
fn the_callback_can_stop_after_lowering() {
    let (compiled, probes_seen) = compile(&Options::default(), Next::Stop);
    assert!(compiled.is_none());
    assert_eq!(probes_seen, 1);
}

#[test]
fn the_tracepoint_mechanism_option_reaches_the_attach_kind() {
    let attach = |mechanism| {
        let options = Options {
            tracepoint_mechanism: mechanism,
            ..Options::default()
        };
        let (compiled, _) = compile(&options, Next::Emit);
        compiled.expect("not stopped").object.programs[0]
            .attach
            .clone()
    };
    assert!(matches!(
        attach(TracepointMechanism::RawTp),
        AttachKind::RawTracepoint { .. }
    ));
    assert!(matches!(
        attach(TracepointMechanism::TpBtf),
        AttachKind::TpBtf { .. }
    ));
}
