//! Per-instruction rules: operand types, ids in range, storage kinds, and
//! which side may run the op.

use super::{FunctionCheck, type_name};
use crate::ir::{
    FormatId, HistKind, Op, PrintArg, Reg, Sort, SortBy, StatNeeds, StatValue, Storage, ValType,
};
use crate::printf::{self, ArgKind};
use crate::sema::builtins::{self, ParamType, ReturnType};
use crate::sema::hir::{GlobalId, Placement};

/// Built-ins that have their own op and must not appear as `Op::Builtin`.
const DEDICATED: &[&str] = &[
    "printf", "sprintf", "print", "println", "printd", "printdln", "sprintd", "exit", "error",
];

impl FunctionCheck<'_, '_> {
    pub(super) fn op(&mut self, op: &Op) {
        use ValType::{Long, Str};
        match op {
            Op::Const { dst, .. } => self.reg(*dst, Long, "const destination"),
            Op::ConstStr { dst, id } => {
                self.reg(*dst, Str, "const destination");
                if id.0 as usize >= self.module().strings.len() {
                    self.error(format!("string s{} is out of range", id.0));
                }
            }
            Op::Move { dst, src } => {
                let d = self.reg_type(*dst, "move destination");
                let s = self.reg_type(*src, "move source");
                if let (Some(d), Some(s)) = (d, s)
                    && d != s
                {
                    self.error(format!(
                        "move from r{} ({}) to r{} ({})",
                        src.0,
                        type_name(s),
                        dst.0,
                        type_name(d)
                    ));
                }
            }
            Op::Unary { dst, src, .. } => {
                self.reg(*dst, Long, "destination");
                self.reg(*src, Long, "operand");
            }
            Op::Binary { dst, lhs, rhs, .. } | Op::Compare { dst, lhs, rhs, .. } => {
                self.reg(*dst, Long, "destination");
                self.reg(*lhs, Long, "left operand");
                self.reg(*rhs, Long, "right operand");
            }
            Op::StrCompare { dst, lhs, rhs, .. } => {
                self.reg(*dst, Long, "destination");
                self.reg(*lhs, Str, "left operand");
                self.reg(*rhs, Str, "right operand");
            }
            Op::Concat { dst, lhs, rhs } => {
                self.reg(*dst, Str, "destination");
                self.reg(*lhs, Str, "left operand");
                self.reg(*rhs, Str, "right operand");
            }
            Op::LoadGlobal { dst, global } => {
                if let Some(ty) = self.scalar(*global) {
                    self.reg(*dst, ty, "load destination");
                }
            }
            Op::StoreGlobal { global, src } => {
                if let Some(ty) = self.scalar(*global) {
                    self.reg(*src, ty, "stored value");
                }
            }
            Op::AddGlobal { global, delta } => {
                if let Some(ty) = self.scalar(*global)
                    && ty != Long
                {
                    self.error(format!(
                        "atomic add on `{}`, which is not a long",
                        self.global_name(*global)
                    ));
                }
                self.reg(*delta, Long, "delta");
            }
            Op::MapGet { dst, global, keys } => {
                if let Some(value) = self.array(*global, keys) {
                    self.reg(*dst, value, "map_get destination");
                }
            }
            Op::MapSet { global, keys, src } => {
                if let Some(value) = self.array(*global, keys) {
                    self.reg(*src, value, "stored value");
                }
            }
            Op::MapInsert {
                dst,
                global,
                keys,
                src,
            } => {
                self.reg(*dst, Long, "destination");
                if let Some(value) = self.array(*global, keys) {
                    self.reg(*src, value, "stored value");
                }
            }
            Op::MapAdd {
                global,
                keys,
                delta,
            } => {
                if let Some(value) = self.array(*global, keys)
                    && value != Long
                {
                    self.error(format!(
                        "atomic add on `{}`, whose values are not longs",
                        self.global_name(*global)
                    ));
                }
                self.reg(*delta, Long, "delta");
            }
            Op::MapDelete { global, keys } => self.keyed(*global, keys),
            Op::MapContains { dst, global, keys } => {
                self.reg(*dst, Long, "destination");
                self.keyed(*global, keys);
            }
            Op::Clear { global } => {
                self.storage(*global);
            }
            Op::StatAdd {
                global,
                keys,
                value,
            } => {
                self.stats(*global, keys);
                self.reg(*value, Long, "added value");
            }
            Op::StatGet {
                dst,
                global,
                keys,
                what,
            } => {
                self.reg(*dst, Long, "destination");
                if let Some(needs) = self.stats(*global, keys) {
                    self.extractor_kept(*global, needs, *what);
                }
            }
            Op::PrintHist { global, keys, kind } => {
                if let Some(needs) = self.stats(*global, keys) {
                    let kept = match kind {
                        HistKind::Log => needs.hist_log,
                        HistKind::Linear(h) => needs.hist_linear == Some(*h),
                    };
                    if !kept {
                        self.error(format!(
                            "`{}` does not keep this histogram",
                            self.global_name(*global)
                        ));
                    }
                }
            }
            Op::IterStart {
                iter,
                global,
                sort,
                limit,
            } => {
                self.iter_slot(*iter);
                self.iter_start(*global, sort.as_ref());
                if let Some(limit) = limit {
                    self.reg(*limit, Long, "limit");
                }
            }
            Op::IterNext {
                iter,
                has,
                keys,
                value,
            } => {
                self.iter_slot(*iter);
                self.reg(*has, Long, "has-next flag");
                self.iter_next(*iter, keys, *value);
            }
            Op::Call { dst, func, args } => self.call(*dst, func.0 as usize, args),
            Op::Builtin { dst, name, args } => self.builtin(*dst, name, args),
            Op::ContextArg { dst, .. } | Op::ContextReturn { dst } => {
                self.kernel_only("context access");
                self.reg(*dst, Long, "destination");
            }
            Op::BulkArgs { dst, .. } => {
                self.kernel_only("context access");
                self.reg(*dst, Str, "destination");
            }
            Op::ContextField { dst, size, .. } => {
                self.kernel_only("context access");
                self.reg(*dst, Long, "destination");
                self.access_size(*size);
            }
            // The host reads kernel memory through /proc/kcore; it has no
            // user task to read.
            Op::ReadKernel {
                dst, addr, size, ..
            } => {
                self.reg(*dst, Long, "destination");
                self.reg(*addr, Long, "address");
                self.access_size(*size);
            }
            Op::ReadUser {
                dst, addr, size, ..
            } => {
                self.kernel_only("user memory read");
                self.reg(*dst, Long, "destination");
                self.reg(*addr, Long, "address");
                self.access_size(*size);
            }
            Op::Printf { format, args } => {
                let regs: Vec<(Reg, bool)> = args
                    .iter()
                    .map(|a| match a {
                        PrintArg::Value(r) => (*r, false),
                        PrintArg::Symbol { addr, .. } => (*addr, true),
                    })
                    .collect();
                self.format_args(*format, &regs);
            }
            Op::Sprintf { dst, format, args } => {
                self.reg(*dst, Str, "destination");
                let regs: Vec<(Reg, bool)> = args.iter().map(|r| (*r, false)).collect();
                self.format_args(*format, &regs);
            }
            Op::Exit | Op::Tick => {}
        }
    }

    fn scalar(&mut self, global: GlobalId) -> Option<ValType> {
        match self.storage(global)? {
            Storage::Scalar(ty) => Some(*ty),
            _ => {
                self.error(format!(
                    "`{}` is not a scalar global",
                    self.global_name(global)
                ));
                None
            }
        }
    }

    /// An associative array's value type, after checking the keys.
    fn array(&mut self, global: GlobalId, keys: &[Reg]) -> Option<ValType> {
        match self.storage(global)? {
            Storage::Array {
                keys: want, value, ..
            } => {
                self.keys(global, want, keys);
                Some(*value)
            }
            _ => {
                self.error(format!(
                    "`{}` is not an associative array",
                    self.global_name(global)
                ));
                None
            }
        }
    }

    /// A statistic's kept values, after checking the keys.
    fn stats(&mut self, global: GlobalId, keys: &[Reg]) -> Option<StatNeeds> {
        match self.storage(global)? {
            Storage::Stats {
                keys: want, needs, ..
            } => {
                self.keys(global, want, keys);
                Some(*needs)
            }
            _ => {
                self.error(format!("`{}` is not a statistic", self.global_name(global)));
                None
            }
        }
    }

    /// An array or a statistics array: `delete a[k]`, `k in a`.
    fn keyed(&mut self, global: GlobalId, keys: &[Reg]) {
        match self.storage(global) {
            Some(Storage::Array { keys: want, .. } | Storage::Stats { keys: want, .. }) => {
                self.keys(global, want, keys)
            }
            Some(Storage::Scalar(_)) => self.error(format!(
                "`{}` is a scalar, not an array",
                self.global_name(global)
            )),
            None => {}
        }
    }

    fn extractor_kept(&mut self, global: GlobalId, needs: StatNeeds, what: StatValue) {
        let kept = match what {
            StatValue::Min | StatValue::Max => needs.min_max,
            StatValue::Variance { .. } => needs.variance,
            StatValue::Count | StatValue::Sum | StatValue::Avg => true,
        };
        if !kept {
            self.error(format!(
                "`{}` does not keep what {what:?} needs",
                self.global_name(global)
            ));
        }
    }

    fn iter_slot(&mut self, iter: crate::ir::IterId) {
        if iter.0 >= self.function().iters {
            self.error(format!(
                "iterator it{} is out of range ({} slots)",
                iter.0,
                self.function().iters
            ));
        }
    }

    fn iter_start(&mut self, global: GlobalId, sort: Option<&Sort>) {
        let (keys, needs) = match self.storage(global) {
            Some(Storage::Array { keys, .. }) => (keys.len(), None),
            Some(Storage::Stats { keys, needs, .. }) => (keys.len(), Some(*needs)),
            Some(Storage::Scalar(_)) => {
                self.error(format!(
                    "foreach over `{}`, a scalar",
                    self.global_name(global)
                ));
                return;
            }
            None => return,
        };
        match sort.map(|s| s.by) {
            Some(SortBy::Key(i)) if i as usize >= keys => self.error(format!(
                "sorts by key {i} but `{}` has {keys} keys",
                self.global_name(global)
            )),
            Some(SortBy::Aggregate(what)) => match needs {
                Some(needs) => self.extractor_kept(global, needs, what),
                None => self.error(format!(
                    "sorts `{}` by an aggregate but it is not a statistic",
                    self.global_name(global)
                )),
            },
            _ => {}
        }
    }

    fn iter_next(&mut self, iter: crate::ir::IterId, keys: &[Reg], value: Option<Reg>) {
        let Some(global) = self.iter_global(iter) else {
            self.error(format!("iterator it{} is never started", iter.0));
            return;
        };
        let (want, value_ty) = match self.storage(global) {
            Some(Storage::Array {
                keys: want, value, ..
            }) => (want, *value),
            Some(Storage::Stats { keys: want, .. }) => (want, ValType::Long),
            _ => return,
        };
        self.keys(global, want, keys);
        if let Some(v) = value {
            self.reg(v, value_ty, "iterated value");
        }
    }

    fn call(&mut self, dst: Option<Reg>, callee: usize, args: &[Reg]) {
        let module = self.module();
        let Some(target) = module.functions.get(callee) else {
            self.error(format!(
                "calls fn{callee}, out of range ({} functions)",
                module.functions.len()
            ));
            return;
        };
        let caller = self.function();
        if target.side != caller.side {
            self.error(format!(
                "a {} function calls `{}`, compiled for the other side",
                side_name(caller.side),
                target.name
            ));
        }
        if args.len() != target.param_count {
            self.error(format!(
                "calls `{}` with {} arguments, it takes {}",
                target.name,
                args.len(),
                target.param_count
            ));
        } else {
            for (i, arg) in args.iter().enumerate() {
                if let Some(ty) = target.regs.get(i) {
                    self.reg(*arg, *ty, &format!("argument {i}"));
                }
            }
        }
        match (dst, target.ret) {
            (None, _) => {}
            (Some(d), Some(ty)) => self.reg(d, ty, "call result"),
            (Some(_), None) => self.error(format!(
                "takes a result from `{}`, which returns nothing",
                target.name
            )),
        }
    }

    fn builtin(&mut self, dst: Option<Reg>, name: &str, args: &[Reg]) {
        if DEDICATED.contains(&name) {
            self.error(format!("`{name}` must be lowered to its own op"));
            return;
        }
        let Some(b) = builtins::lookup(name) else {
            self.error(format!("unknown built-in `{name}`"));
            return;
        };
        let side = self.function().side;
        let allowed = match side {
            Placement::Kernel => b.kernel,
            Placement::Host => b.host,
        };
        if !allowed {
            self.error(format!(
                "`{name}` cannot run in a {} function",
                side_name(side)
            ));
        }
        let too_many = b.max_args().is_some_and(|max| args.len() > max);
        if args.len() < b.min_args() || too_many {
            self.error(format!("`{name}` given {} arguments", args.len()));
        }
        for (i, arg) in args.iter().enumerate() {
            let what = format!("argument {i} of `{name}`");
            match b.param(i) {
                Some(ParamType::Long) => self.reg(*arg, ValType::Long, &what),
                Some(ParamType::String) => self.reg(*arg, ValType::Str, &what),
                Some(ParamType::Any) | None => {
                    self.reg_type(*arg, &what);
                }
            }
        }
        match (dst, b.ret) {
            (None, _) => {}
            (Some(d), ReturnType::Long) => self.reg(d, ValType::Long, "built-in result"),
            (Some(d), ReturnType::String) => self.reg(d, ValType::Str, "built-in result"),
            (Some(_), ReturnType::Void) => self.error(format!(
                "takes a result from `{name}`, which returns nothing"
            )),
        }
    }

    fn kernel_only(&mut self, what: &str) {
        if self.function().side != Placement::Kernel {
            self.error(format!("{what} in a host function"));
        }
    }

    fn access_size(&mut self, size: u32) {
        if ![1, 2, 4, 8].contains(&size) {
            self.error(format!("access size {size} is not 1, 2, 4 or 8"));
        }
    }

    /// Checks printf/sprintf arguments against the format. `symbol` marks
    /// a `PrintArg::Symbol`: an address printed as text (`%s`).
    fn format_args(&mut self, format: FormatId, args: &[(Reg, bool)]) {
        let Some(text) = self.module().formats.get(format.0 as usize) else {
            self.error(format!("format f{} is out of range", format.0));
            return;
        };
        let pieces = match printf::parse(&text.text) {
            Ok(pieces) => pieces,
            Err(e) => {
                self.error(format!("format f{} does not parse: {e:?}", format.0));
                return;
            }
        };
        let kinds = printf::arg_kinds(&pieces);
        if kinds.len() != args.len() {
            self.error(format!(
                "format f{} takes {} arguments, given {}",
                format.0,
                kinds.len(),
                args.len()
            ));
            return;
        }
        for (i, ((reg, symbol), kind)) in args.iter().zip(&kinds).enumerate() {
            let what = format!("printf argument {i}");
            if *symbol {
                self.reg(*reg, ValType::Long, &what);
                if *kind != ArgKind::String {
                    self.error(format!("{what} is a symbol, printed by a non-%s directive"));
                }
                continue;
            }
            let want = match kind {
                ArgKind::Long => ValType::Long,
                ArgKind::String => ValType::Str,
            };
            self.reg(*reg, want, &what);
        }
    }
}

fn side_name(side: Placement) -> &'static str {
    match side {
        Placement::Kernel => "kernel",
        Placement::Host => "host",
    }
}
