//! Hand-built broken modules: each must be caught, with the function and
//! block named.

use super::verify;
use crate::ir::{
    BinOp, Block, BlockId, CmpOp, Failure, Format, FormatId, FuncId, Function, Global, IterId,
    Module, Op, PrintArg, ProbeHandler, Reg, StatNeeds, StatValue, Storage, StrId, SymbolText,
    Term, ValType,
};
use crate::sema::hir::{GlobalId, Limits, Placement, ProbeKind};
use crate::source::Span;

use Placement::{Host, Kernel};
use ValType::{Long, Str};

fn block(ops: Vec<Op>, term: Term) -> Block {
    Block {
        insts: ops
            .into_iter()
            .map(|op| crate::ir::Inst {
                op,
                span: Span::default(),
            })
            .collect(),
        term,
        term_span: Span::default(),
        catch: None,
    }
}

fn function(
    name: &str,
    side: Placement,
    params: usize,
    ret: Option<ValType>,
    regs: &[ValType],
    blocks: Vec<Block>,
) -> Function {
    Function {
        name: name.into(),
        side,
        param_count: params,
        ret,
        regs: regs.to_vec(),
        blocks,
        iters: 0,
        span: Span::default(),
    }
}

fn global(name: &str, storage: Storage) -> Global {
    Global {
        name: name.into(),
        storage,
        init: None,
        kernel: true,
        host: true,
        span: Span::default(),
        key_text_bytes: None,
    }
}

/// A module whose probe 0 runs `functions[0]` on its side.
fn module(functions: Vec<Function>, globals: Vec<Global>) -> Module {
    let placement = functions[0].side;
    Module {
        globals,
        probes: vec![ProbeHandler {
            point: "begin".into(),
            written: "begin".into(),
            kind: ProbeKind::Begin { order: 0 },
            placement,
            function: FuncId(0),
            span: Span::default(),
        }],
        functions,
        strings: vec!["".into(), "text".into()],
        formats: vec![Format {
            text: "%d %s\n".into(),
        }],
        limits: Limits::default(),
    }
}

fn handler(side: Placement, regs: &[ValType], ops: Vec<Op>) -> Function {
    function(
        "probe0 begin",
        side,
        0,
        None,
        regs,
        vec![block(ops, Term::Return(None))],
    )
}

/// Verifies, expecting exactly one error containing each of `wanted`.
fn expect_error(m: &Module, wanted: &[&str]) {
    let errors = verify(m).expect_err("the verifier accepted a broken module");
    assert_eq!(errors.len(), 1, "{errors:#?}");
    for w in wanted {
        assert!(errors[0].contains(w), "`{}` lacks `{w}`", errors[0]);
    }
}

#[test]
fn a_well_formed_module_passes() {
    let callee = function(
        "twice@host",
        Host,
        1,
        Some(Long),
        &[Long, Long],
        vec![block(
            vec![Op::Binary {
                dst: Reg(1),
                op: BinOp::Add,
                lhs: Reg(0),
                rhs: Reg(0),
            }],
            Term::Return(Some(Reg(1))),
        )],
    );
    let main = handler(
        Host,
        &[Long, Long, Str, Long],
        vec![
            Op::Const {
                dst: Reg(0),
                value: 2,
            },
            Op::Call {
                dst: Some(Reg(1)),
                func: FuncId(1),
                args: vec![Reg(0)],
            },
            Op::ConstStr {
                dst: Reg(2),
                id: StrId(1),
            },
            Op::Printf {
                format: FormatId(0),
                args: vec![PrintArg::Value(Reg(1)), PrintArg::Value(Reg(2))],
            },
            Op::Builtin {
                dst: Some(Reg(3)),
                name: "strlen".into(),
                args: vec![Reg(2)],
            },
        ],
    );
    assert_eq!(verify(&module(vec![main, callee], vec![])), Ok(()));
}

#[test]
fn long_op_on_a_string_register() {
    let f = handler(
        Host,
        &[Long, Str],
        vec![Op::Binary {
            dst: Reg(0),
            op: BinOp::Add,
            lhs: Reg(0),
            rhs: Reg(1),
        }],
    );
    expect_error(
        &module(vec![f], vec![]),
        &[
            "probe0 begin bb0 inst 0",
            "right operand r1 is str, expected long",
        ],
    );
}

#[test]
fn string_op_on_a_long_register() {
    let f = handler(
        Host,
        &[Str, Long],
        vec![Op::StrCompare {
            dst: Reg(1),
            op: CmpOp::Eq,
            lhs: Reg(0),
            rhs: Reg(1),
        }],
    );
    expect_error(
        &module(vec![f], vec![]),
        &["bb0 inst 0", "r1 is long, expected str"],
    );
}

#[test]
fn register_out_of_range() {
    let f = handler(
        Host,
        &[Long],
        vec![Op::Move {
            dst: Reg(0),
            src: Reg(7),
        }],
    );
    expect_error(
        &module(vec![f], vec![]),
        &["r7 is out of range (1 registers)"],
    );
}

#[test]
fn jump_out_of_range() {
    let f = function(
        "probe0 begin",
        Host,
        0,
        None,
        &[],
        vec![block(vec![], Term::Jump(BlockId(3)))],
    );
    expect_error(
        &module(vec![f], vec![]),
        &["probe0 begin bb0 terminator", "jumps to bb3, out of range"],
    );
}

#[test]
fn call_argument_count_and_type() {
    let callee = function(
        "f@host",
        Host,
        1,
        Some(Long),
        &[Long],
        vec![block(vec![], Term::Return(Some(Reg(0))))],
    );
    let wrong_count = handler(
        Host,
        &[Long],
        vec![Op::Call {
            dst: Some(Reg(0)),
            func: FuncId(1),
            args: vec![],
        }],
    );
    expect_error(
        &module(vec![wrong_count, callee.clone()], vec![]),
        &["calls `f@host` with 0 arguments, it takes 1"],
    );
    let wrong_type = handler(
        Host,
        &[Long, Str],
        vec![Op::Call {
            dst: Some(Reg(0)),
            func: FuncId(1),
            args: vec![Reg(1)],
        }],
    );
    expect_error(
        &module(vec![wrong_type, callee], vec![]),
        &["argument 0 r1 is str, expected long"],
    );
}

#[test]
fn kernel_code_calls_a_host_function() {
    let callee = function(
        "f@host",
        Host,
        0,
        Some(Long),
        &[Long],
        vec![block(
            vec![Op::Const {
                dst: Reg(0),
                value: 1,
            }],
            Term::Return(Some(Reg(0))),
        )],
    );
    let f = handler(
        Kernel,
        &[],
        vec![Op::Call {
            dst: None,
            func: FuncId(1),
            args: vec![],
        }],
    );
    expect_error(
        &module(vec![f, callee], vec![]),
        &["a kernel function calls `f@host`"],
    );
}

#[test]
fn context_access_in_a_host_function() {
    let f = handler(
        Host,
        &[Long],
        vec![Op::ContextArg {
            dst: Reg(0),
            index: 0,
        }],
    );
    expect_error(
        &module(vec![f], vec![]),
        &["context access in a host function"],
    );
}

#[test]
fn iterator_out_of_range_or_never_started() {
    let arr = global(
        "a",
        Storage::Array {
            keys: vec![Long],
            value: Long,
            max_entries: 10,
            wrap: false,
        },
    );
    let mut f = handler(
        Host,
        &[Long, Long],
        vec![Op::IterStart {
            iter: IterId(0),
            global: GlobalId(0),
            sort: None,
            limit: None,
        }],
    );
    expect_error(
        &module(vec![f.clone()], vec![arr.clone()]),
        &["iterator it0 is out of range (0 slots)"],
    );
    f.iters = 1;
    f.blocks[0].insts[0].op = Op::IterNext {
        iter: IterId(0),
        has: Reg(0),
        keys: vec![Reg(1)],
        value: None,
    };
    expect_error(
        &module(vec![f], vec![arr]),
        &["iterator it0 is never started"],
    );
}

#[test]
fn return_must_match_the_function() {
    let f = function(
        "probe0 begin",
        Host,
        0,
        None,
        &[Long],
        vec![block(vec![], Term::Return(Some(Reg(0))))],
    );
    expect_error(
        &module(vec![f], vec![]),
        &["returns a value but the function has none"],
    );
    let callee = function(
        "f@host",
        Host,
        0,
        Some(Str),
        &[],
        vec![block(vec![], Term::Return(None))],
    );
    let main = handler(Host, &[], vec![]);
    expect_error(
        &module(vec![main, callee], vec![]),
        &[
            "f@host bb0 terminator",
            "returns nothing but the function returns str",
        ],
    );
}

#[test]
fn builtins_are_checked_by_side_and_name() {
    let f = handler(
        Kernel,
        &[Str, Str, Str],
        vec![Op::Builtin {
            dst: Some(Reg(0)),
            name: "tokenize".into(),
            args: vec![Reg(1), Reg(2)],
        }],
    );
    expect_error(
        &module(vec![f], vec![]),
        &["`tokenize` cannot run in a kernel function"],
    );
    let f = handler(
        Host,
        &[],
        vec![Op::Builtin {
            dst: None,
            name: "printf".into(),
            args: vec![],
        }],
    );
    expect_error(&module(vec![f], vec![]), &["must be lowered to its own op"]);
}

#[test]
fn printf_arguments_follow_the_format() {
    let f = handler(
        Kernel,
        &[Long, Long],
        vec![Op::Printf {
            format: FormatId(0),
            args: vec![PrintArg::Value(Reg(0)), PrintArg::Value(Reg(1))],
        }],
    );
    expect_error(
        &module(vec![f], vec![]),
        &["printf argument 1 r1 is long, expected str"],
    );
    let f = handler(
        Kernel,
        &[Long],
        vec![Op::Printf {
            format: FormatId(0),
            args: vec![PrintArg::Symbol {
                addr: Reg(0),
                how: SymbolText::Name,
            }],
        }],
    );
    expect_error(&module(vec![f], vec![]), &["takes 2 arguments, given 1"]);
}

#[test]
fn extractors_need_the_values_kept() {
    let stats = global(
        "s",
        Storage::Stats {
            keys: vec![],
            max_entries: 1,
            needs: StatNeeds::default(),
        },
    );
    let f = handler(
        Host,
        &[Long],
        vec![Op::StatGet {
            dst: Reg(0),
            global: GlobalId(0),
            keys: vec![],
            what: StatValue::Min,
        }],
    );
    expect_error(
        &module(vec![f], vec![stats]),
        &["`s` does not keep what Min needs"],
    );
}

#[test]
fn maps_need_arrays_and_matching_keys() {
    let scalar = global("n", Storage::Scalar(Long));
    let f = handler(
        Host,
        &[Long],
        vec![Op::MapGet {
            dst: Reg(0),
            global: GlobalId(0),
            keys: vec![Reg(0)],
        }],
    );
    expect_error(
        &module(vec![f], vec![scalar]),
        &["`n` is not an associative array"],
    );
    let arr = global(
        "a",
        Storage::Array {
            keys: vec![Long, Str],
            value: Long,
            max_entries: 10,
            wrap: false,
        },
    );
    let f = handler(
        Host,
        &[Long],
        vec![Op::MapContains {
            dst: Reg(0),
            global: GlobalId(0),
            keys: vec![Reg(0)],
        }],
    );
    expect_error(&module(vec![f], vec![arr]), &["`a` takes 2 keys, given 1"]);
}

#[test]
fn handlers_take_nothing_and_return_nothing() {
    let f = function(
        "probe0 begin",
        Host,
        0,
        Some(Long),
        &[Long],
        vec![block(
            vec![Op::Const {
                dst: Reg(0),
                value: 0,
            }],
            Term::Return(Some(Reg(0))),
        )],
    );
    expect_error(
        &module(vec![f], vec![]),
        &["probe0 begin: handler `probe0 begin` must take no parameters and return nothing"],
    );
}

#[test]
fn error_message_must_be_a_string() {
    let f = function(
        "probe0 begin",
        Host,
        0,
        None,
        &[Long],
        vec![block(vec![], Term::Fail(Failure::Explicit(Reg(0))))],
    );
    expect_error(
        &module(vec![f], vec![]),
        &["error message r0 is long, expected str"],
    );
}
