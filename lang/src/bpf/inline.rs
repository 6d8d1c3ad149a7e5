//! Inlining of script-function calls into a kernel handler, before
//! register allocation: BPF-to-BPF calls would need BTF func info and
//! their own frames, and a handler's functions are small. Each call site
//! gets a renamed copy of the callee's registers and blocks; parameters
//! are moved in, `Return` becomes a move to the call's result and a jump
//! to the rest of the caller's block. Recursion past [`MAX_DEPTH`] is
//! diagnosed (the verifier cannot bound it anyway).

use crate::diag::Diagnostic;
use crate::ir::{Block, BlockId, Catch, Failure, Function, Inst, Module, Op, PrintArg, Reg, Term};

/// Nested inlining depth (stap's MAXNESTING is 10).
pub const MAX_DEPTH: u32 = 10;

/// `function` with every `Call` replaced by the callee's body.
pub fn inline_calls(module: &Module, function: &Function) -> Result<Function, Diagnostic> {
    inline_at(module, function, 0)
}

fn inline_at(module: &Module, function: &Function, depth: u32) -> Result<Function, Diagnostic> {
    let mut out = function.clone();
    let mut b = 0;
    while b < out.blocks.len() {
        let Some(i) = out.blocks[b]
            .insts
            .iter()
            .position(|inst| matches!(inst.op, Op::Call { .. }))
        else {
            b += 1;
            continue;
        };
        let call = out.blocks[b].insts[i].clone();
        let Op::Call { dst, func, args } = &call.op else {
            unreachable!("position() matched a call")
        };
        let Some(callee) = module.functions.get(func.0 as usize) else {
            return Err(
                Diagnostic::error("internal: call to an unknown function").at(call.span, "here")
            );
        };
        if depth >= MAX_DEPTH {
            return Err(Diagnostic::unsupported(
                format!(
                    "calls nested more than {MAX_DEPTH} deep in a kernel probe (recursion in {})",
                    callee.name
                ),
                call.span,
            ));
        }
        let callee = inline_at(module, callee, depth + 1)?;
        splice(&mut out, b, i, &call, *dst, args, &callee);
        // The caller's block `b` now ends in a jump; keep scanning from it
        // (the spliced blocks come after and are scanned in turn).
        b += 1;
    }
    Ok(out)
}

fn splice(
    out: &mut Function,
    b: usize,
    i: usize,
    call: &Inst,
    dst: Option<Reg>,
    args: &[Reg],
    callee: &Function,
) {
    let reg_base = out.regs.len() as u32;
    out.regs.extend(&callee.regs);
    let block_base = out.blocks.len() as u32;
    let continuation = BlockId(block_base + callee.blocks.len() as u32);
    let reg = |r: Reg| Reg(r.0 + reg_base);
    let block = |id: BlockId| BlockId(id.0 + block_base);

    // Split the caller's block: [..i] + parameter moves → callee entry.
    let caller = &mut out.blocks[b];
    let tail: Vec<Inst> = caller.insts.split_off(i + 1);
    caller.insts.pop();
    for (index, arg) in args.iter().enumerate() {
        caller.insts.push(Inst {
            op: Op::Move {
                dst: reg(Reg(index as u32)),
                src: *arg,
            },
            span: call.span,
        });
    }
    let rest_term = std::mem::replace(&mut caller.term, Term::Jump(block(BlockId(0))));
    let rest_span = caller.term_span;
    caller.term_span = call.span;
    // Inside the caller's `try`, the callee's errors go to its handler too
    // (a callee's own `try` stays innermost).
    let call_catch = caller.catch;

    for callee_block in &callee.blocks {
        let mut insts: Vec<Inst> = callee_block
            .insts
            .iter()
            .map(|inst| Inst {
                op: remap_op(&inst.op, &reg),
                span: inst.span,
            })
            .collect();
        let term = match &callee_block.term {
            Term::Jump(to) => Term::Jump(block(*to)),
            Term::Branch {
                cond,
                then,
                otherwise,
            } => Term::Branch {
                cond: reg(*cond),
                then: block(*then),
                otherwise: block(*otherwise),
            },
            Term::Return(value) => {
                if let (Some(dst), Some(value)) = (dst, value) {
                    insts.push(Inst {
                        op: Op::Move {
                            dst,
                            src: reg(*value),
                        },
                        span: callee_block.term_span,
                    });
                }
                Term::Jump(continuation)
            }
            Term::Fail(Failure::DivisionByZero) => Term::Fail(Failure::DivisionByZero),
            Term::Fail(Failure::Explicit(message)) => Term::Fail(Failure::Explicit(reg(*message))),
        };
        out.blocks.push(Block {
            insts,
            term,
            term_span: callee_block.term_span,
            catch: callee_block
                .catch
                .map(|c| Catch {
                    handler: block(c.handler),
                    message: c.message.map(reg),
                })
                .or(call_catch),
        });
    }
    out.blocks.push(Block {
        insts: tail,
        term: rest_term,
        term_span: rest_span,
        catch: call_catch,
    });
}

/// `op` with every register renamed through `f`.
pub fn remap_op(op: &Op, f: &impl Fn(Reg) -> Reg) -> Op {
    let keys = |keys: &[Reg]| keys.iter().map(|k| f(*k)).collect::<Vec<_>>();
    let mut op = op.clone();
    match &mut op {
        Op::Const { dst, .. }
        | Op::ConstStr { dst, .. }
        | Op::LoadGlobal { dst, .. }
        | Op::ContextArg { dst, .. }
        | Op::ContextField { dst, .. }
        | Op::ContextReturn { dst }
        | Op::BulkArgs { dst, .. } => *dst = f(*dst),
        Op::Move { dst, src } | Op::Unary { dst, src, .. } => {
            *dst = f(*dst);
            *src = f(*src);
        }
        Op::Binary { dst, lhs, rhs, .. }
        | Op::Compare { dst, lhs, rhs, .. }
        | Op::StrCompare { dst, lhs, rhs, .. }
        | Op::Concat { dst, lhs, rhs } => {
            *dst = f(*dst);
            *lhs = f(*lhs);
            *rhs = f(*rhs);
        }
        Op::StoreGlobal { src, .. } => *src = f(*src),
        Op::AddGlobal { delta, .. } => *delta = f(*delta),
        Op::MapGet { dst, keys: k, .. }
        | Op::MapContains { dst, keys: k, .. }
        | Op::StatGet { dst, keys: k, .. } => {
            *dst = f(*dst);
            *k = keys(k);
        }
        Op::MapInsert {
            dst, keys: k, src, ..
        } => {
            *dst = f(*dst);
            *k = keys(k);
            *src = f(*src);
        }
        Op::MapSet { keys: k, src, .. } => {
            *k = keys(k);
            *src = f(*src);
        }
        Op::MapAdd { keys: k, delta, .. } => {
            *k = keys(k);
            *delta = f(*delta);
        }
        Op::StatAdd { keys: k, value, .. } => {
            *k = keys(k);
            *value = f(*value);
        }
        Op::MapDelete { keys: k, .. } | Op::PrintHist { keys: k, .. } => *k = keys(k),
        Op::Clear { .. } | Op::Exit | Op::Tick => {}
        Op::IterStart { limit, .. } => *limit = limit.map(f),
        Op::IterNext {
            has,
            keys: k,
            value,
            ..
        } => {
            *has = f(*has);
            *k = keys(k);
            *value = value.map(f);
        }
        Op::Call { dst, args, .. } | Op::Builtin { dst, args, .. } => {
            *dst = dst.map(f);
            *args = keys(args);
        }
        Op::Sprintf { dst, args, .. } => {
            *dst = f(*dst);
            *args = keys(args);
        }
        Op::ReadKernel { dst, addr, .. } | Op::ReadUser { dst, addr, .. } => {
            *dst = f(*dst);
            *addr = f(*addr);
        }
        Op::Printf { args, .. } => {
            for arg in args.iter_mut() {
                *arg = match *arg {
                    PrintArg::Value(r) => PrintArg::Value(f(r)),
                    PrintArg::Symbol { addr, how } => PrintArg::Symbol { addr: f(addr), how },
                };
            }
        }
    }
    op
}
