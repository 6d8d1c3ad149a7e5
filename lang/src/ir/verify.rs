//! The IR verifier: checks the invariants in `ir/mod.rs` so that a backend
//! can trust its input. Register and block ids are in range; each op gets
//! the register types it needs; calls match their callee and stay on their
//! side; kernel-only ops stay in kernel functions; returns match `ret`.
//!
//! Each error names the function and the block (`devname@kernel bb2 inst
//! 3: ...`). Instruction-level rules live in `verify/ops.rs`.

mod ops;

use super::GlobalId;
use super::{Block, Failure, Function, IterId, Module, Reg, Storage, Term, ValType};
use std::collections::HashMap;

/// Checks the invariants in `ir/mod.rs`; each error names the function and block.
pub fn verify(module: &Module) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    for (i, probe) in module.probes.iter().enumerate() {
        let name = format!("probe{i} {}", probe.point);
        match module.functions.get(probe.function.0 as usize) {
            None => errors.push(format!(
                "{name}: handler fn{} is out of range ({} functions)",
                probe.function.0,
                module.functions.len()
            )),
            Some(f) => {
                if f.ret.is_some() || f.param_count != 0 {
                    errors.push(format!(
                        "{name}: handler `{}` must take no parameters and return nothing",
                        f.name
                    ));
                }
                if f.side != probe.placement {
                    errors.push(format!(
                        "{name}: handler `{}` is not compiled for the probe's side",
                        f.name
                    ));
                }
            }
        }
    }
    for f in &module.functions {
        FunctionCheck::new(module, f, &mut errors).run();
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Where an error is: the whole function, or an instruction or terminator.
#[derive(Clone, Copy)]
enum At {
    Function,
    Inst(usize, usize),
    Term(usize),
}

pub(super) struct FunctionCheck<'m, 'e> {
    module: &'m Module,
    f: &'m Function,
    errors: &'e mut Vec<String>,
    at: At,
    /// The global each iterator walks (from its `IterStart`).
    iter_globals: HashMap<IterId, GlobalId>,
}

impl<'m, 'e> FunctionCheck<'m, 'e> {
    fn new(
        module: &'m Module,
        f: &'m Function,
        errors: &'e mut Vec<String>,
    ) -> FunctionCheck<'m, 'e> {
        FunctionCheck {
            module,
            f,
            errors,
            at: At::Function,
            iter_globals: HashMap::new(),
        }
    }

    fn run(&mut self) {
        let f = self.f;
        if f.blocks.is_empty() {
            self.error("has no blocks (it needs an entry block)".into());
        }
        if f.param_count > f.regs.len() {
            self.error(format!(
                "declares {} parameters but only {} registers",
                f.param_count,
                f.regs.len()
            ));
        }
        self.collect_iterators();
        for (b, block) in f.blocks.iter().enumerate() {
            self.block(b, block);
        }
    }

    /// First pass: which global each iterator slot walks, so `IterNext` can
    /// be checked against that global's keys wherever it appears.
    fn collect_iterators(&mut self) {
        for (b, block) in self.f.blocks.iter().enumerate() {
            for (i, inst) in block.insts.iter().enumerate() {
                if let super::Op::IterStart { iter, global, .. } = &inst.op {
                    match self.iter_globals.insert(*iter, *global) {
                        Some(other) if other != *global => {
                            self.at = At::Inst(b, i);
                            self.error(format!(
                                "iterator it{} walks both g{} and g{}",
                                iter.0, other.0, global.0
                            ));
                        }
                        _ => {}
                    }
                }
            }
        }
        self.at = At::Function;
    }

    fn block(&mut self, b: usize, block: &Block) {
        for (i, inst) in block.insts.iter().enumerate() {
            self.at = At::Inst(b, i);
            self.op(&inst.op);
        }
        self.at = At::Term(b);
        self.term(&block.term);
        if let Some(catch) = block.catch {
            self.target(catch.handler);
            if let Some(message) = catch.message {
                self.reg(message, ValType::Str, "catch message");
            }
        }
    }

    fn term(&mut self, term: &Term) {
        match term {
            Term::Jump(target) => self.target(*target),
            Term::Branch {
                cond,
                then,
                otherwise,
            } => {
                self.reg(*cond, ValType::Long, "branch condition");
                self.target(*then);
                self.target(*otherwise);
            }
            Term::Return(value) => match (self.f.ret, value) {
                (None, None) => {}
                (Some(ty), Some(r)) => self.reg(*r, ty, "return value"),
                (None, Some(_)) => self.error("returns a value but the function has none".into()),
                (Some(ty), None) => self.error(format!(
                    "returns nothing but the function returns {}",
                    type_name(ty)
                )),
            },
            Term::Fail(Failure::DivisionByZero) => {}
            Term::Fail(Failure::Explicit(message)) => {
                self.reg(*message, ValType::Str, "error message");
            }
        }
    }

    fn target(&mut self, target: super::BlockId) {
        if target.0 as usize >= self.f.blocks.len() {
            self.error(format!(
                "jumps to bb{}, out of range ({} blocks)",
                target.0,
                self.f.blocks.len()
            ));
        }
    }

    pub(super) fn error(&mut self, message: String) {
        let name = &self.f.name;
        self.errors.push(match self.at {
            At::Function => format!("{name}: {message}"),
            At::Inst(b, i) => format!("{name} bb{b} inst {i}: {message}"),
            At::Term(b) => format!("{name} bb{b} terminator: {message}"),
        });
    }

    /// The type of a register, or `None` (reported) when out of range.
    pub(super) fn reg_type(&mut self, r: Reg, what: &str) -> Option<ValType> {
        match self.f.regs.get(r.0 as usize) {
            Some(ty) => Some(*ty),
            None => {
                self.error(format!(
                    "{what} r{} is out of range ({} registers)",
                    r.0,
                    self.f.regs.len()
                ));
                None
            }
        }
    }

    /// Checks that `r` exists and holds `want`.
    pub(super) fn reg(&mut self, r: Reg, want: ValType, what: &str) {
        if let Some(ty) = self.reg_type(r, what)
            && ty != want
        {
            self.error(format!(
                "{what} r{} is {}, expected {}",
                r.0,
                type_name(ty),
                type_name(want)
            ));
        }
    }

    pub(super) fn storage(&mut self, global: GlobalId) -> Option<&'m Storage> {
        match self.module.globals.get(global.0 as usize) {
            Some(g) => Some(&g.storage),
            None => {
                self.error(format!(
                    "global g{} is out of range ({} globals)",
                    global.0,
                    self.module.globals.len()
                ));
                None
            }
        }
    }

    pub(super) fn global_name(&self, global: GlobalId) -> &'m str {
        self.module
            .globals
            .get(global.0 as usize)
            .map_or("?", |g| g.name.as_str())
    }

    /// Checks key registers against a global's key types.
    pub(super) fn keys(&mut self, global: GlobalId, want: &[ValType], keys: &[Reg]) {
        if want.len() != keys.len() {
            self.error(format!(
                "`{}` takes {} keys, given {}",
                self.global_name(global),
                want.len(),
                keys.len()
            ));
            return;
        }
        for (i, (k, ty)) in keys.iter().zip(want).enumerate() {
            self.reg(*k, *ty, &format!("key {i}"));
        }
    }

    pub(super) fn function(&self) -> &'m Function {
        self.f
    }

    pub(super) fn module(&self) -> &'m Module {
        self.module
    }

    pub(super) fn iter_global(&self, iter: IterId) -> Option<GlobalId> {
        self.iter_globals.get(&iter).copied()
    }
}

pub(super) fn type_name(ty: ValType) -> &'static str {
    match ty {
        ValType::Long => "long",
        ValType::Str => "str",
    }
}

#[cfg(test)]
mod tests;
