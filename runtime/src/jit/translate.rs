//! One IR function to one Cranelift function.
//!
//! Every IR register is a Cranelift `Variable` (the frontend builds SSA);
//! every IR block a Cranelift block. Long arithmetic is inline; strings,
//! globals, output and built-ins are calls into `host::rtlib`. After each
//! call that can fail, the code tests `HostRuntime::failed` and returns
//! at once (with 0) when it is set; callers test it again after a call.

use std::mem::offset_of;

use cranelift_codegen::Context;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    AbiParam, Block, FuncRef, Function, InstBuilder, MemFlagsData, Signature, StackSlotData,
    StackSlotKind, UserFuncName, Value, types,
};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId as ClifFuncId, Linkage, Module as _};
use stap_lang::ir::{self, BinOp, CmpOp, Failure, Op, PrintArg, Reg, SymbolText, Term, UnOp};
use stap_lang::source::Span;

use super::JitError;
use crate::host::{HostRuntime, builtins, rtlib};

const I64: types::Type = types::I64;

/// The rtlib entry points: name, parameters after `rt`, returns a value.
const IMPORTS: &[(&str, usize, bool)] = &[
    ("stap_concat", 2, true),
    ("stap_str_cmp", 2, true),
    ("stap_load_global", 1, true),
    ("stap_store_global", 2, false),
    ("stap_add_global", 2, false),
    ("stap_map_get", 2, true),
    ("stap_map_set", 3, false),
    ("stap_map_add", 3, false),
    ("stap_map_delete", 2, false),
    ("stap_map_contains", 2, true),
    ("stap_clear", 1, false),
    ("stap_stat_add", 3, false),
    ("stap_stat_get", 4, true),
    ("stap_print_hist", 3, false),
    ("stap_iter_start", 5, true),
    ("stap_iter_next", 2, true),
    ("stap_printf", 3, false),
    ("stap_sprintf", 3, true),
    ("stap_symbol", 2, true),
    ("stap_builtin", 4, true),
    ("stap_read_kernel", 3, true),
    ("stap_exit", 0, false),
    ("stap_tick", 0, false),
    ("stap_enter", 0, false),
    ("stap_leave", 0, false),
    ("stap_fail_div0", 0, false),
    ("stap_fail_msg", 1, false),
    ("stap_fail_at", 3, false),
    ("stap_catch", 0, true),
];

/// `(rt, params...) -> ret`.
pub fn signature(jit: &JITModule, f: &ir::Function) -> Signature {
    let mut sig = jit.make_signature();
    sig.params.push(AbiParam::new(I64));
    for _ in 0..f.param_count {
        sig.params.push(AbiParam::new(I64));
    }
    if f.ret.is_some() {
        sig.returns.push(AbiParam::new(I64));
    }
    sig
}

pub struct Translator<'a> {
    jit: &'a mut JITModule,
    module: &'a ir::Module,
    ids: &'a [Option<ClifFuncId>],
    imports: Vec<ClifFuncId>,
    builder_ctx: FunctionBuilderContext,
    ctx: Context,
}

impl<'a> Translator<'a> {
    pub fn new(
        jit: &'a mut JITModule,
        module: &'a ir::Module,
        ids: &'a [Option<ClifFuncId>],
    ) -> Result<Translator<'a>, JitError> {
        let mut imports = Vec::new();
        for (name, params, ret) in IMPORTS {
            let mut sig = jit.make_signature();
            for _ in 0..=*params {
                sig.params.push(AbiParam::new(I64));
            }
            if *ret {
                sig.returns.push(AbiParam::new(I64));
            }
            imports.push(
                jit.declare_function(name, Linkage::Import, &sig)
                    .map_err(JitError::new)?,
            );
        }
        let ctx = jit.make_context();
        Ok(Translator {
            jit,
            module,
            ids,
            imports,
            builder_ctx: FunctionBuilderContext::new(),
            ctx,
        })
    }

    pub fn define(&mut self, id: ClifFuncId, func: Function) -> Result<(), JitError> {
        self.ctx.func = func;
        let result = self.jit.define_function(id, &mut self.ctx);
        self.jit.clear_context(&mut self.ctx);
        result.map_err(|e| JitError(format!("{e:?}")))
    }

    pub fn translate(&mut self, f: &ir::Function, id: ClifFuncId) -> Result<Function, JitError> {
        let mut func = Function::with_name_signature(
            UserFuncName::user(0, id.as_u32()),
            signature(self.jit, f),
        );
        let config = self.jit.target_config();
        let mut b = FunctionBuilder::new(&mut func, &mut self.builder_ctx);
        let mut fx = FnTranslator {
            jit: self.jit,
            import_ids: &self.imports,
            callee_ids: self.ids,
            module: self.module,
            f,
            vars: Vec::new(),
            blocks: Vec::new(),
            iters: Vec::new(),
            imports: vec![None; IMPORTS.len()],
            callees: vec![None; self.ids.len()],
            rt: Variable::from_u32(0),
            bail: None,
            span: Span::default(),
            on_failure: None,
        };
        fx.translate(&mut b)?;
        b.seal_all_blocks();
        b.finalize(config);
        Ok(func)
    }
}

struct FnTranslator<'m> {
    jit: &'m mut JITModule,
    import_ids: &'m [ClifFuncId],
    callee_ids: &'m [Option<ClifFuncId>],
    module: &'m ir::Module,
    f: &'m ir::Function,
    vars: Vec<Variable>,
    blocks: Vec<Block>,
    /// The iterator handle of each foreach slot.
    iters: Vec<Variable>,
    /// Imported into this function on first use, so listings stay short.
    imports: Vec<Option<FuncRef>>,
    callees: Vec<Option<FuncRef>>,
    rt: Variable,
    /// Returns 0 at once: where failed calls go.
    bail: Option<Block>,
    /// The span of the operation being translated.
    span: Span,
    /// Where a failure in the block being translated goes: `bail`, or
    /// inside `try` the landing that enters its `catch`.
    on_failure: Option<Block>,
}

impl FnTranslator<'_> {
    fn callee(&mut self, b: &mut FunctionBuilder, func: ir::FuncId) -> Option<FuncRef> {
        let index = func.0 as usize;
        let id = self.callee_ids.get(index).copied().flatten()?;
        if self.callees[index].is_none() {
            self.callees[index] = Some(self.jit.declare_func_in_func(id, b.func));
        }
        self.callees[index]
    }

    fn translate(&mut self, b: &mut FunctionBuilder) -> Result<(), JitError> {
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        self.rt = b.declare_var(I64);
        let rt = b.block_params(entry)[0];
        b.def_var(self.rt, rt);
        let zero = b.ins().iconst(I64, 0);
        for i in 0..self.f.regs.len() {
            let var = b.declare_var(I64);
            let value = if i < self.f.param_count {
                b.block_params(entry)[i + 1]
            } else {
                zero
            };
            b.def_var(var, value);
            self.vars.push(var);
        }
        for _ in 0..self.f.iters {
            let var = b.declare_var(I64);
            b.def_var(var, zero);
            self.iters.push(var);
        }
        self.blocks = self.f.blocks.iter().map(|_| b.create_block()).collect();
        let bail = b.create_block();
        self.bail = Some(bail);
        let Some(&first) = self.blocks.first() else {
            return Err(JitError::new(format!("{} has no blocks", self.f.name)));
        };
        b.ins().jump(first, &[]);

        for (i, block) in self.f.blocks.iter().enumerate() {
            // A block inside `try` fails to a landing that takes the error
            // and jumps to the handler.
            let landing = block.catch.map(|_| b.create_block());
            self.on_failure = landing.or(self.bail);
            b.switch_to_block(self.blocks[i]);
            for inst in &block.insts {
                self.span = inst.span;
                self.op(b, &inst.op)?;
            }
            self.span = block.term_span;
            self.term(b, &block.term)?;
            if let (Some(landing), Some(catch)) = (landing, block.catch) {
                b.switch_to_block(landing);
                let text = self.call(b, "stap_catch", &[]);
                if let (Some(reg), Some(text)) = (catch.message, text) {
                    self.set(b, reg, text);
                }
                let handler = self
                    .blocks
                    .get(catch.handler.0 as usize)
                    .copied()
                    .ok_or_else(|| {
                        JitError::new(format!("{}: catch to a missing block", self.f.name))
                    })?;
                b.ins().jump(handler, &[]);
            }
        }

        b.switch_to_block(bail);
        self.return_default(b);
        Ok(())
    }

    fn return_default(&self, b: &mut FunctionBuilder) {
        if self.f.ret.is_some() {
            let zero = b.ins().iconst(I64, 0);
            b.ins().return_(&[zero]);
        } else {
            b.ins().return_(&[]);
        }
    }

    fn get(&self, b: &mut FunctionBuilder, reg: Reg) -> Value {
        b.use_var(self.vars[reg.0 as usize])
    }

    fn set(&self, b: &mut FunctionBuilder, reg: Reg, value: Value) {
        b.def_var(self.vars[reg.0 as usize], value);
    }

    fn import(&mut self, b: &mut FunctionBuilder, name: &str) -> FuncRef {
        let index = IMPORTS
            .iter()
            .position(|(n, _, _)| *n == name)
            .unwrap_or_else(|| unreachable!("rtlib import {name} is in IMPORTS"));
        *self.imports[index].get_or_insert_with(|| {
            self.jit
                .declare_func_in_func(self.import_ids[index], b.func)
        })
    }

    /// Calls rtlib `name` with `rt` first; returns its result, if any.
    fn call(&mut self, b: &mut FunctionBuilder, name: &str, args: &[Value]) -> Option<Value> {
        let rt = b.use_var(self.rt);
        let mut all = vec![rt];
        all.extend_from_slice(args);
        let callee = self.import(b, name);
        let inst = b.ins().call(callee, &all);
        b.inst_results(inst).first().copied()
    }

    /// Leaves the function when the last call failed, recording the
    /// failing operation's span on the way out (off the hot path).
    fn check(&mut self, b: &mut FunctionBuilder) {
        let rt = b.use_var(self.rt);
        let failed = b.ins().load(
            types::I8,
            MemFlagsData::trusted(),
            rt,
            offset_of!(HostRuntime, failed) as i32,
        );
        let cont = b.create_block();
        let failing = b.create_block();
        b.ins().brif(failed, failing, &[], cont, &[]);
        b.switch_to_block(failing);
        self.record_span(b);
        // Inside `try`, on to the landing that enters the `catch`.
        match self.on_failure.or(self.bail) {
            Some(target) => {
                b.ins().jump(target, &[]);
            }
            None => self.return_default(b),
        }
        b.switch_to_block(cont);
    }

    /// `stap_fail_at` with the current operation's span.
    fn record_span(&mut self, b: &mut FunctionBuilder) {
        let span = self.span;
        let words = [span.file.0, span.start, span.end].map(|w| b.ins().iconst(I64, i64::from(w)));
        self.call(b, "stap_fail_at", &words);
    }

    /// Spills `values` to a fresh stack slot; returns its address.
    fn spill(&self, b: &mut FunctionBuilder, values: &[Value]) -> Value {
        if values.is_empty() {
            return b.ins().iconst(I64, 0);
        }
        let slot = b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            (values.len() * 8) as u32,
            3,
        ));
        for (i, v) in values.iter().enumerate() {
            b.ins().stack_store(I64, *v, slot, (i * 8) as i32);
        }
        b.ins().stack_addr(I64, slot, 0)
    }

    fn spill_regs(&self, b: &mut FunctionBuilder, regs: &[Reg]) -> Value {
        let values: Vec<Value> = regs.iter().map(|r| self.get(b, *r)).collect();
        self.spill(b, &values)
    }

    fn op(&mut self, b: &mut FunctionBuilder, op: &Op) -> Result<(), JitError> {
        let iconst = |b: &mut FunctionBuilder, n: i64| b.ins().iconst(I64, n);
        match op {
            Op::Const { dst, value } => {
                let v = iconst(b, *value);
                self.set(b, *dst, v);
            }
            Op::ConstStr { dst, id } => {
                // Handles 1..=N are the module's string constants.
                let v = iconst(b, id.0 as i64 + 1);
                self.set(b, *dst, v);
            }
            Op::Move { dst, src } => {
                let v = self.get(b, *src);
                self.set(b, *dst, v);
            }
            Op::Unary { dst, op, src } => {
                let x = self.get(b, *src);
                let v = match op {
                    UnOp::Neg => b.ins().ineg(x),
                    UnOp::BitNot => b.ins().bnot(x),
                    UnOp::Not => {
                        let c = b.ins().icmp_imm_s(IntCC::Equal, x, 0);
                        b.ins().uextend(I64, c)
                    }
                };
                self.set(b, *dst, v);
            }
            Op::Binary { dst, op, lhs, rhs } => {
                let (x, y) = (self.get(b, *lhs), self.get(b, *rhs));
                let v = binary(b, *op, x, y);
                self.set(b, *dst, v);
            }
            Op::Compare { dst, op, lhs, rhs } => {
                let (x, y) = (self.get(b, *lhs), self.get(b, *rhs));
                let c = b.ins().icmp(int_cc(*op), x, y);
                let v = b.ins().uextend(I64, c);
                self.set(b, *dst, v);
            }
            Op::StrCompare { dst, op, lhs, rhs } => {
                let (x, y) = (self.get(b, *lhs), self.get(b, *rhs));
                let order = self.call(b, "stap_str_cmp", &[x, y]).unwrap_or(x);
                let c = b.ins().icmp_imm_s(int_cc(*op), order, 0);
                let v = b.ins().uextend(I64, c);
                self.set(b, *dst, v);
            }
            Op::Concat { dst, lhs, rhs } => {
                let (x, y) = (self.get(b, *lhs), self.get(b, *rhs));
                let v = self.call(b, "stap_concat", &[x, y]).unwrap_or(x);
                self.set(b, *dst, v);
            }
            Op::LoadGlobal { dst, global } => {
                let g = iconst(b, global.0 as i64);
                let v = self.call(b, "stap_load_global", &[g]).unwrap_or(g);
                self.check(b);
                self.set(b, *dst, v);
            }
            Op::StoreGlobal { global, src } => {
                let g = iconst(b, global.0 as i64);
                let v = self.get(b, *src);
                self.call(b, "stap_store_global", &[g, v]);
                self.check(b);
            }
            Op::AddGlobal { global, delta } => {
                let g = iconst(b, global.0 as i64);
                let v = self.get(b, *delta);
                self.call(b, "stap_add_global", &[g, v]);
                self.check(b);
            }
            Op::MapGet { dst, global, keys } => {
                let g = iconst(b, global.0 as i64);
                let k = self.spill_regs(b, keys);
                let v = self.call(b, "stap_map_get", &[g, k]).unwrap_or(g);
                self.check(b);
                self.set(b, *dst, v);
            }
            Op::MapSet { global, keys, src } => {
                let g = iconst(b, global.0 as i64);
                let k = self.spill_regs(b, keys);
                let v = self.get(b, *src);
                self.call(b, "stap_map_set", &[g, k, v]);
                self.check(b);
            }
            Op::MapAdd {
                global,
                keys,
                delta,
            } => {
                let g = iconst(b, global.0 as i64);
                let k = self.spill_regs(b, keys);
                let v = self.get(b, *delta);
                self.call(b, "stap_map_add", &[g, k, v]);
                self.check(b);
            }
            Op::MapDelete { global, keys } => {
                let g = iconst(b, global.0 as i64);
                let k = self.spill_regs(b, keys);
                self.call(b, "stap_map_delete", &[g, k]);
                self.check(b);
            }
            Op::MapContains { dst, global, keys } => {
                let g = iconst(b, global.0 as i64);
                let k = self.spill_regs(b, keys);
                let v = self.call(b, "stap_map_contains", &[g, k]).unwrap_or(g);
                self.check(b);
                self.set(b, *dst, v);
            }
            Op::Clear { global } => {
                let g = iconst(b, global.0 as i64);
                self.call(b, "stap_clear", &[g]);
                self.check(b);
            }
            Op::StatAdd {
                global,
                keys,
                value,
            } => {
                let g = iconst(b, global.0 as i64);
                let k = self.spill_regs(b, keys);
                let v = self.get(b, *value);
                self.call(b, "stap_stat_add", &[g, k, v]);
                self.check(b);
            }
            Op::StatGet {
                dst,
                global,
                keys,
                what,
            } => {
                let g = iconst(b, global.0 as i64);
                let k = self.spill_regs(b, keys);
                let (code, shift) = rtlib::stat_value_code(*what);
                let (code, shift) = (iconst(b, code), iconst(b, shift));
                let v = self
                    .call(b, "stap_stat_get", &[g, k, code, shift])
                    .unwrap_or(g);
                self.check(b);
                self.set(b, *dst, v);
            }
            Op::PrintHist { global, keys, kind } => {
                let g = iconst(b, global.0 as i64);
                let k = self.spill_regs(b, keys);
                let linear = iconst(b, rtlib::hist_code(*kind));
                self.call(b, "stap_print_hist", &[g, k, linear]);
                self.check(b);
            }
            Op::IterStart {
                iter,
                global,
                sort,
                limit,
            } => {
                let g = iconst(b, global.0 as i64);
                let (by, arg) = rtlib::sort_code(sort.map(|s| s.by));
                let (by, arg) = (iconst(b, by), iconst(b, arg));
                let desc = iconst(b, sort.is_some_and(|s| s.descending) as i64);
                let limit = match limit {
                    Some(r) => self.get(b, *r),
                    // No `limit`: every element.
                    None => iconst(b, i64::MAX),
                };
                let handle = self
                    .call(b, "stap_iter_start", &[g, by, arg, desc, limit])
                    .unwrap_or(g);
                self.check(b);
                let var = self.iter_var(*iter)?;
                b.def_var(var, handle);
            }
            Op::IterNext {
                iter,
                has,
                keys,
                value,
            } => {
                let handle = b.use_var(self.iter_var(*iter)?);
                let slot = b.create_sized_stack_slot(StackSlotData::new(
                    StackSlotKind::ExplicitSlot,
                    ((keys.len() + 1) * 8) as u32,
                    3,
                ));
                let out = b.ins().stack_addr(I64, slot, 0);
                let more = self
                    .call(b, "stap_iter_next", &[handle, out])
                    .unwrap_or(handle);
                self.check(b);
                self.set(b, *has, more);
                for (i, k) in keys.iter().enumerate() {
                    let v = b.ins().stack_load(I64, I64, slot, (i * 8) as i32);
                    self.set(b, *k, v);
                }
                if let Some(v) = value {
                    let loaded = b.ins().stack_load(I64, I64, slot, (keys.len() * 8) as i32);
                    self.set(b, *v, loaded);
                }
            }
            Op::Call { dst, func, args } => {
                let Some(callee) = self.callee(b, *func) else {
                    return Err(JitError::new(format!(
                        "{} calls function {} which is not on the host",
                        self.f.name, func.0
                    )));
                };
                self.call(b, "stap_enter", &[]);
                self.check(b);
                let rt = b.use_var(self.rt);
                let mut all = vec![rt];
                all.extend(args.iter().map(|a| self.get(b, *a)));
                let inst = b.ins().call(callee, &all);
                let result = b.inst_results(inst).first().copied();
                self.call(b, "stap_leave", &[]);
                self.check(b);
                if let (Some(dst), Some(v)) = (dst, result) {
                    self.set(b, *dst, v);
                }
            }
            Op::Builtin { dst, name, args } => {
                let id = builtins::lookup(name)
                    .ok_or_else(|| JitError::new(format!("unsupported: {name}() in host code")))?;
                let mask = args.iter().enumerate().fold(0i64, |m, (i, r)| {
                    if i < 64 && self.f.reg_type(*r) == ir::ValType::Str {
                        m | (1 << i)
                    } else {
                        m
                    }
                });
                let argv = self.spill_regs(b, args);
                let (id, argc, mask) = (
                    iconst(b, id as i64),
                    iconst(b, args.len() as i64),
                    iconst(b, mask),
                );
                let v = self
                    .call(b, "stap_builtin", &[id, argv, argc, mask])
                    .unwrap_or(id);
                self.check(b);
                if let Some(dst) = dst {
                    self.set(b, *dst, v);
                }
            }
            Op::Printf { format, args } => {
                let mut values = Vec::new();
                for arg in args {
                    values.push(match arg {
                        PrintArg::Value(r) => self.get(b, *r),
                        PrintArg::Symbol { addr, how } => {
                            let a = self.get(b, *addr);
                            let how = iconst(b, symbol_code(*how));
                            self.call(b, "stap_symbol", &[a, how]).unwrap_or(a)
                        }
                    });
                }
                let argv = self.spill(b, &values);
                let (id, argc) = (iconst(b, format.0 as i64), iconst(b, values.len() as i64));
                self.call(b, "stap_printf", &[id, argv, argc]);
                self.check(b);
            }
            Op::Sprintf { dst, format, args } => {
                let argv = self.spill_regs(b, args);
                let (id, argc) = (iconst(b, format.0 as i64), iconst(b, args.len() as i64));
                let v = self
                    .call(b, "stap_sprintf", &[id, argv, argc])
                    .unwrap_or(id);
                self.check(b);
                self.set(b, *dst, v);
            }
            Op::Exit => {
                self.call(b, "stap_exit", &[]);
            }
            Op::Tick => {
                self.call(b, "stap_tick", &[]);
                self.check(b);
            }
            // Through /proc/kcore (`@cast(...)->member` in a host probe).
            Op::ReadKernel {
                dst,
                addr,
                size,
                signed,
            } => {
                let addr = self.get(b, *addr);
                let (size, signed) = (iconst(b, i64::from(*size)), iconst(b, i64::from(*signed)));
                let v = self
                    .call(b, "stap_read_kernel", &[addr, size, signed])
                    .unwrap_or(size);
                self.check(b);
                self.set(b, *dst, v);
            }
            Op::ContextArg { .. }
            | Op::ContextField { .. }
            | Op::ContextReturn { .. }
            | Op::BulkArgs { .. }
            | Op::ReadUser { .. } => {
                return Err(JitError::new(format!(
                    "{}: kernel context read in host code",
                    self.f.name
                )));
            }
            // Host probes run one at a time: lowering keeps the plain test.
            Op::MapInsert { .. } => {
                return Err(JitError::new(format!(
                    "{}: a kernel test-and-set in host code",
                    self.f.name
                )));
            }
        }
        let _ = self.module;
        Ok(())
    }

    fn iter_var(&self, iter: ir::IterId) -> Result<Variable, JitError> {
        self.iters.get(iter.0 as usize).copied().ok_or_else(|| {
            JitError::new(format!(
                "{}: foreach slot {} out of range",
                self.f.name, iter.0
            ))
        })
    }

    fn term(&mut self, b: &mut FunctionBuilder, term: &Term) -> Result<(), JitError> {
        let blocks = self.blocks.clone();
        let name = self.f.name.clone();
        let block = |id: ir::BlockId| {
            blocks
                .get(id.0 as usize)
                .copied()
                .ok_or_else(|| JitError::new(format!("{name}: no block {}", id.0)))
        };
        match term {
            Term::Jump(to) => {
                b.ins().jump(block(*to)?, &[]);
            }
            Term::Branch {
                cond,
                then,
                otherwise,
            } => {
                let c = self.get(b, *cond);
                b.ins().brif(c, block(*then)?, &[], block(*otherwise)?, &[]);
            }
            Term::Return(value) => match (value, self.f.ret) {
                (Some(r), Some(_)) => {
                    let v = self.get(b, *r);
                    b.ins().return_(&[v]);
                }
                _ => self.return_default(b),
            },
            Term::Fail(failure) => {
                match failure {
                    Failure::DivisionByZero => {
                        self.call(b, "stap_fail_div0", &[]);
                    }
                    Failure::Explicit(msg) => {
                        let m = self.get(b, *msg);
                        self.call(b, "stap_fail_msg", &[m]);
                    }
                }
                self.record_span(b);
                match self.on_failure.filter(|f| Some(*f) != self.bail) {
                    Some(landing) => {
                        b.ins().jump(landing, &[]);
                    }
                    None => self.return_default(b),
                }
            }
        }
        Ok(())
    }
}

/// Signed 64-bit arithmetic that never traps: `x / -1` is `-x` (wrapping,
/// so `i64::MIN / -1` stays `i64::MIN`) and a zero divisor, which lowering
/// already sends to a failure block, cannot reach `sdiv`.
fn binary(b: &mut FunctionBuilder, op: BinOp, x: Value, y: Value) -> Value {
    match op {
        BinOp::Add => b.ins().iadd(x, y),
        BinOp::Sub => b.ins().isub(x, y),
        BinOp::Mul => b.ins().imul(x, y),
        BinOp::Shl => b.ins().ishl(x, y),
        BinOp::Shr => b.ins().sshr(x, y),
        BinOp::And => b.ins().band(x, y),
        BinOp::Or => b.ins().bor(x, y),
        BinOp::Xor => b.ins().bxor(x, y),
        BinOp::Div | BinOp::Mod => {
            let one = b.ins().iconst(I64, 1);
            let minus_one = b.ins().icmp_imm_s(IntCC::Equal, y, -1);
            let zero = b.ins().icmp_imm_s(IntCC::Equal, y, 0);
            let unsafe_divisor = b.ins().bor(minus_one, zero);
            let divisor = b.ins().select(unsafe_divisor, one, y);
            if op == BinOp::Div {
                let q = b.ins().sdiv(x, divisor);
                let neg = b.ins().ineg(x);
                b.ins().select(minus_one, neg, q)
            } else {
                let r = b.ins().srem(x, divisor);
                let zero_value = b.ins().iconst(I64, 0);
                b.ins().select(minus_one, zero_value, r)
            }
        }
    }
}

fn int_cc(op: CmpOp) -> IntCC {
    match op {
        CmpOp::Eq => IntCC::Equal,
        CmpOp::Ne => IntCC::NotEqual,
        CmpOp::Lt => IntCC::SignedLessThan,
        CmpOp::Le => IntCC::SignedLessThanOrEqual,
        CmpOp::Gt => IntCC::SignedGreaterThan,
        CmpOp::Ge => IntCC::SignedGreaterThanOrEqual,
    }
}

fn symbol_code(how: SymbolText) -> i64 {
    match how {
        SymbolText::Name => 0,
        SymbolText::Data => 1,
        SymbolText::Module => 2,
        SymbolText::Enum(name) => 3 + i64::from(name.0),
        // Only kernel code captures stacks; a host probe has none to print.
        SymbolText::Stack { .. } | SymbolText::Time { .. } => -1,
    }
}
