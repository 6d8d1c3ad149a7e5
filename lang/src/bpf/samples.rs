//! Small hand-built IR modules of typical kernel probes, each with the
//! script it stands for. The backend's snapshot tests and the live
//! verifier test (runtime/tests/verifier.rs) share them, so the listings
//! that are reviewed are the programs the kernel is shown to accept.
//!
//! They are written the way the lowering (`ir::lower`) produces code:
//! locals in registers, loops with a `Tick` on the back edge, division
//! guarded by a zero test.

use crate::ir::{
    BinOp, Block, BlockId, CmpOp, Failure, FormatId, FuncId, Function, Global, Inst, Module, Op,
    PrintArg, ProbeHandler, Reg, StatNeeds, StatValue, Storage, StrId, SymbolText, Term, ValType,
};
use crate::ir::{Limits, Placement, ProbeKind, ProcessTarget};
use crate::kernel::{ClassicField, Param, TracepointArgs, TypeId};
use crate::source::{FileId, SourceMap, Span};

/// One sample program.
pub struct Sample {
    pub name: &'static str,
    pub map: SourceMap,
    pub module: Module,
}

/// Every sample, with MAXSTRINGLEN = `max_string_len`.
pub fn all(max_string_len: u32) -> Vec<Sample> {
    vec![
        counter(max_string_len),
        printf_string_and_long(max_string_len),
        kernel_string_chain(max_string_len),
        concat_and_compare(max_string_len),
        while_loop(max_string_len),
        division(max_string_len),
        many_longs(max_string_len),
        classic_user_string(max_string_len),
        profile_counter(max_string_len),
        hist_log(max_string_len),
        sprintf_and_symname(max_string_len),
        uprobe_arguments(max_string_len),
        stat_extractors(max_string_len),
    ]
}

/// Builds one function and its module around a script text.
struct Builder {
    file: FileId,
    text: &'static str,
    regs: Vec<ValType>,
    blocks: Vec<Block>,
    insts: Vec<Inst>,
    span: Span,
    strings: Vec<String>,
    formats: Vec<String>,
    globals: Vec<Global>,
}

impl Builder {
    fn new(text: &'static str) -> (Builder, SourceMap) {
        let mut map = SourceMap::new();
        let file = map.add("sample.stp", text);
        let builder = Builder {
            file,
            text,
            regs: Vec::new(),
            blocks: Vec::new(),
            insts: Vec::new(),
            span: Span::new(file, 0, text.len()),
            strings: Vec::new(),
            formats: Vec::new(),
            globals: Vec::new(),
        };
        (builder, map)
    }

    /// Following ops come from the first occurrence of `needle`.
    fn at(&mut self, needle: &str) {
        let start = self.text.find(needle).unwrap_or(0);
        self.span = Span::new(self.file, start, start + needle.len());
    }

    fn long(&mut self) -> Reg {
        self.regs.push(ValType::Long);
        Reg(self.regs.len() as u32 - 1)
    }

    fn string(&mut self) -> Reg {
        self.regs.push(ValType::Str);
        Reg(self.regs.len() as u32 - 1)
    }

    fn op(&mut self, op: Op) {
        self.insts.push(Inst {
            op,
            span: self.span,
        });
    }

    fn constant(&mut self, value: i64) -> Reg {
        let dst = self.long();
        self.op(Op::Const { dst, value });
        dst
    }

    fn text_constant(&mut self, text: &str) -> Reg {
        self.strings.push(text.to_string());
        let dst = self.string();
        let id = StrId(self.strings.len() as u32 - 1);
        self.op(Op::ConstStr { dst, id });
        dst
    }

    fn format(&mut self, text: &str) -> FormatId {
        self.formats.push(text.to_string());
        FormatId(self.formats.len() as u32 - 1)
    }

    fn global(&mut self, name: &str, storage: Storage) -> crate::ir::GlobalId {
        let start = self.text.find(name).unwrap_or(0);
        self.globals.push(Global {
            name: name.to_string(),
            storage,
            init: None,
            kernel: true,
            host: true,
            span: Span::new(self.file, start, start + name.len()),
            key_text_bytes: None,
        });
        crate::ir::GlobalId(self.globals.len() as u32 - 1)
    }

    /// Ends the current block; blocks are numbered in the order they end.
    fn end(&mut self, term: Term) {
        self.blocks.push(Block {
            insts: std::mem::take(&mut self.insts),
            term,
            term_span: self.span,
            catch: None,
        });
    }

    fn finish(self, point: &str, kind: ProbeKind, max_string_len: u32) -> Module {
        let span = Span::new(self.file, 0, self.text.len());
        let function = Function {
            name: format!("probe0 {point}"),
            side: Placement::Kernel,
            param_count: 0,
            ret: None,
            regs: self.regs,
            blocks: self.blocks,
            iters: 0,
            span,
        };
        Module {
            globals: self.globals,
            functions: vec![function],
            probes: vec![ProbeHandler {
                point: point.to_string(),
                written: point.to_string(),
                kind,
                placement: Placement::Kernel,
                function: FuncId(0),
                span,
            }],
            strings: self.strings,
            formats: self
                .formats
                .into_iter()
                .map(|text| crate::ir::Format { text })
                .collect(),
            limits: Limits {
                max_string_len: max_string_len as u64,
                ..Limits::default()
            },
        }
    }
}

fn raw_tracepoint(system: &str, name: &str, args: &[&str]) -> ProbeKind {
    ProbeKind::Tracepoint {
        system: system.to_string(),
        name: name.to_string(),
        args: TracepointArgs::Raw(
            args.iter()
                .map(|arg| Param {
                    name: arg.to_string(),
                    ty: TypeId(0),
                })
                .collect(),
        ),
    }
}

fn kfree_skb() -> ProbeKind {
    raw_tracepoint("skb", "kfree_skb", &["skb", "location", "reason", "rx_sk"])
}

fn process_exec() -> ProbeKind {
    raw_tracepoint("sched", "sched_process_exec", &["p", "old_pid", "bprm"])
}

fn counter(n: u32) -> Sample {
    let text =
        "global drops\nprobe kernel.trace(\"skb:kfree_skb\") {\n  drops[$location] <<< 1\n}\n";
    let (mut b, map) = Builder::new(text);
    let drops = b.global(
        "drops",
        Storage::Stats {
            keys: vec![ValType::Long],
            max_entries: 2048,
            needs: StatNeeds::default(),
        },
    );
    b.at("drops[$location] <<< 1");
    let location = b.long();
    b.op(Op::ContextArg {
        dst: location,
        index: 1,
    });
    let one = b.constant(1);
    b.op(Op::StatAdd {
        global: drops,
        keys: vec![location],
        value: one,
    });
    b.at("}");
    b.end(Term::Return(None));
    Sample {
        name: "counter",
        map,
        module: b.finish("kernel.trace(\"skb:kfree_skb\")", kfree_skb(), n),
    }
}

fn printf_string_and_long(n: u32) -> Sample {
    let text = "probe kernel.trace(\"sched:sched_process_exec\") {\n  printf(\"%s %d %s\\n\", execname(), pid(), symname($bprm))\n}\n";
    let (mut b, map) = Builder::new(text);
    b.at("printf");
    let name = b.string();
    b.op(Op::Builtin {
        dst: Some(name),
        name: "execname".into(),
        args: vec![],
    });
    let pid = b.long();
    b.op(Op::Builtin {
        dst: Some(pid),
        name: "pid".into(),
        args: vec![],
    });
    let bprm = b.long();
    b.op(Op::ContextArg {
        dst: bprm,
        index: 2,
    });
    let format = b.format("%s %d %s\n");
    b.op(Op::Printf {
        format,
        args: vec![
            PrintArg::Value(name),
            PrintArg::Value(pid),
            PrintArg::Symbol {
                addr: bprm,
                how: SymbolText::Name,
            },
        ],
    });
    b.at("}");
    b.end(Term::Return(None));
    Sample {
        name: "printf",
        map,
        module: b.finish(
            "kernel.trace(\"sched:sched_process_exec\")",
            process_exec(),
            n,
        ),
    }
}

fn kernel_string_chain(n: u32) -> Sample {
    // `$bprm->filename`: `filename` is read through the pointer at an
    // illustrative offset (the lowering takes it from BTF).
    let text = "probe kernel.trace(\"sched:sched_process_exec\") {\n  file = kernel_string($bprm->filename)\n  printf(\"%s\\n\", file)\n}\n";
    let (mut b, map) = Builder::new(text);
    b.at("$bprm->filename");
    let bprm = b.long();
    b.op(Op::ContextArg {
        dst: bprm,
        index: 2,
    });
    let offset = b.constant(0x60);
    let field = b.long();
    b.op(Op::Binary {
        dst: field,
        op: BinOp::Add,
        lhs: bprm,
        rhs: offset,
    });
    let filename = b.long();
    b.op(Op::ReadKernel {
        dst: filename,
        addr: field,
        size: 8,
        signed: false,
    });
    b.at("kernel_string($bprm->filename)");
    let file = b.string();
    b.op(Op::Builtin {
        dst: Some(file),
        name: "kernel_string".into(),
        args: vec![filename],
    });
    b.at("printf");
    let format = b.format("%s\n");
    b.op(Op::Printf {
        format,
        args: vec![PrintArg::Value(file)],
    });
    b.at("}");
    b.end(Term::Return(None));
    Sample {
        name: "kernel_string",
        map,
        module: b.finish(
            "kernel.trace(\"sched:sched_process_exec\")",
            process_exec(),
            n,
        ),
    }
}

fn concat_and_compare(n: u32) -> Sample {
    let text = "global last, bash_execs\nprobe kernel.trace(\"sched:sched_process_exec\") {\n  last = execname() . \"-exec\"\n  if (last == \"bash-exec\") bash_execs++\n}\n";
    let (mut b, map) = Builder::new(text);
    let last = b.global("last", Storage::Scalar(ValType::Str));
    let bash_execs = b.global("bash_execs", Storage::Scalar(ValType::Long));
    b.at("execname() . \"-exec\"");
    let name = b.string();
    b.op(Op::Builtin {
        dst: Some(name),
        name: "execname".into(),
        args: vec![],
    });
    let suffix = b.text_constant("-exec");
    let joined = b.string();
    b.op(Op::Concat {
        dst: joined,
        lhs: name,
        rhs: suffix,
    });
    b.at("last = execname()");
    b.op(Op::StoreGlobal {
        global: last,
        src: joined,
    });
    b.at("last == \"bash-exec\"");
    let current = b.string();
    b.op(Op::LoadGlobal {
        dst: current,
        global: last,
    });
    let wanted = b.text_constant("bash-exec");
    let same = b.long();
    b.op(Op::StrCompare {
        dst: same,
        op: CmpOp::Eq,
        lhs: current,
        rhs: wanted,
    });
    b.end(Term::Branch {
        cond: same,
        then: BlockId(1),
        otherwise: BlockId(2),
    });
    b.at("bash_execs++");
    let one = b.constant(1);
    b.op(Op::AddGlobal {
        global: bash_execs,
        delta: one,
    });
    b.end(Term::Jump(BlockId(2)));
    b.at("}");
    b.end(Term::Return(None));
    Sample {
        name: "concat",
        map,
        module: b.finish(
            "kernel.trace(\"sched:sched_process_exec\")",
            process_exec(),
            n,
        ),
    }
}

fn while_loop(n: u32) -> Sample {
    let text = "global steps\nprobe kernel.trace(\"skb:kfree_skb\") {\n  i = 0\n  while (i < 10) i += 2\n  steps[pid()] = i\n}\n";
    let (mut b, map) = Builder::new(text);
    let steps = b.global(
        "steps",
        Storage::Array {
            keys: vec![ValType::Long],
            value: ValType::Long,
            max_entries: 2048,
            wrap: false,
        },
    );
    b.at("i = 0");
    let i = b.constant(0);
    b.end(Term::Jump(BlockId(1)));
    b.at("i < 10");
    let ten = b.constant(10);
    let more = b.long();
    b.op(Op::Compare {
        dst: more,
        op: CmpOp::Lt,
        lhs: i,
        rhs: ten,
    });
    b.end(Term::Branch {
        cond: more,
        then: BlockId(2),
        otherwise: BlockId(3),
    });
    b.at("i += 2");
    let two = b.constant(2);
    b.op(Op::Binary {
        dst: i,
        op: BinOp::Add,
        lhs: i,
        rhs: two,
    });
    b.op(Op::Tick);
    b.end(Term::Jump(BlockId(1)));
    b.at("steps[pid()] = i");
    let pid = b.long();
    b.op(Op::Builtin {
        dst: Some(pid),
        name: "pid".into(),
        args: vec![],
    });
    b.op(Op::MapSet {
        global: steps,
        keys: vec![pid],
        src: i,
    });
    b.at("}");
    b.end(Term::Return(None));
    Sample {
        name: "while_loop",
        map,
        module: b.finish("kernel.trace(\"skb:kfree_skb\")", kfree_skb(), n),
    }
}

fn division(n: u32) -> Sample {
    let text = "global ratio\nprobe kernel.trace(\"skb:kfree_skb\") {\n  ratio = $location / $reason % 7\n}\n";
    let (mut b, map) = Builder::new(text);
    let ratio = b.global("ratio", Storage::Scalar(ValType::Long));
    b.at("$location / $reason");
    let location = b.long();
    b.op(Op::ContextArg {
        dst: location,
        index: 1,
    });
    let reason = b.long();
    b.op(Op::ContextArg {
        dst: reason,
        index: 2,
    });
    let zero = b.constant(0);
    let is_zero = b.long();
    b.op(Op::Compare {
        dst: is_zero,
        op: CmpOp::Eq,
        lhs: reason,
        rhs: zero,
    });
    b.end(Term::Branch {
        cond: is_zero,
        then: BlockId(1),
        otherwise: BlockId(2),
    });
    b.end(Term::Fail(Failure::DivisionByZero));
    let quotient = b.long();
    b.op(Op::Binary {
        dst: quotient,
        op: BinOp::Div,
        lhs: location,
        rhs: reason,
    });
    b.at("% 7");
    let seven = b.constant(7);
    let rest = b.long();
    b.op(Op::Binary {
        dst: rest,
        op: BinOp::Mod,
        lhs: quotient,
        rhs: seven,
    });
    b.at("ratio = ");
    b.op(Op::StoreGlobal {
        global: ratio,
        src: rest,
    });
    b.at("}");
    b.end(Term::Return(None));
    Sample {
        name: "division",
        map,
        module: b.finish("kernel.trace(\"skb:kfree_skb\")", kfree_skb(), n),
    }
}

/// Six longs live at once: two must spill.
fn many_longs(n: u32) -> Sample {
    let text = "global total\nprobe kernel.trace(\"skb:kfree_skb\") {\n  a = $skb; b = $location; c = $reason; d = $rx_sk; e = pid(); f = cpu()\n  total = a + b + c + d + e + f\n}\n";
    let (mut b, map) = Builder::new(text);
    let total = b.global("total", Storage::Scalar(ValType::Long));
    b.at("a = $skb");
    let mut values = Vec::new();
    for index in 0..4 {
        let dst = b.long();
        b.op(Op::ContextArg { dst, index });
        values.push(dst);
    }
    for name in ["pid", "cpu"] {
        let dst = b.long();
        b.op(Op::Builtin {
            dst: Some(dst),
            name: name.into(),
            args: vec![],
        });
        values.push(dst);
    }
    b.at("total = a + b + c + d + e + f");
    let sum = b.long();
    b.op(Op::Move {
        dst: sum,
        src: values[0],
    });
    for value in &values[1..] {
        b.op(Op::Binary {
            dst: sum,
            op: BinOp::Add,
            lhs: sum,
            rhs: *value,
        });
    }
    b.op(Op::StoreGlobal {
        global: total,
        src: sum,
    });
    b.at("}");
    b.end(Term::Return(None));
    Sample {
        name: "many_longs",
        map,
        module: b.finish("kernel.trace(\"skb:kfree_skb\")", kfree_skb(), n),
    }
}

fn classic_user_string(n: u32) -> Sample {
    let text = "global opens\nprobe kernel.trace(\"syscalls:sys_enter_openat\") {\n  opens[user_string($filename, \"?\")]++\n}\n";
    let (mut b, map) = Builder::new(text);
    let opens = b.global(
        "opens",
        Storage::Array {
            keys: vec![ValType::Str],
            value: ValType::Long,
            max_entries: 2048,
            wrap: false,
        },
    );
    b.at("$filename");
    let filename = b.long();
    b.op(Op::ContextField {
        dst: filename,
        offset: 24,
        size: 8,
        signed: false,
    });
    b.at("user_string($filename, \"?\")");
    let fallback = b.text_constant("?");
    let path = b.string();
    b.op(Op::Builtin {
        dst: Some(path),
        name: "user_string".into(),
        args: vec![filename, fallback],
    });
    b.at("opens[user_string($filename, \"?\")]++");
    let one = b.constant(1);
    b.op(Op::MapAdd {
        global: opens,
        keys: vec![path],
        delta: one,
    });
    b.at("}");
    b.end(Term::Return(None));
    let kind = ProbeKind::Tracepoint {
        system: "syscalls".into(),
        name: "sys_enter_openat".into(),
        args: TracepointArgs::Classic(vec![ClassicField {
            name: "filename".into(),
            ty: TypeId(0),
            offset: 24,
            size: 8,
        }]),
    };
    Sample {
        name: "classic_user_string",
        map,
        module: b.finish("kernel.trace(\"syscalls:sys_enter_openat\")", kind, n),
    }
}

fn profile_counter(n: u32) -> Sample {
    let text = "global ticks\nprobe timer.profile {\n  ticks[cpu()]++\n  if (ticks[cpu()] > 1000) exit()\n}\n";
    let (mut b, map) = Builder::new(text);
    let ticks = b.global(
        "ticks",
        Storage::Array {
            keys: vec![ValType::Long],
            value: ValType::Long,
            max_entries: 2048,
            wrap: false,
        },
    );
    b.at("ticks[cpu()]++");
    let cpu = b.long();
    b.op(Op::Builtin {
        dst: Some(cpu),
        name: "cpu".into(),
        args: vec![],
    });
    let one = b.constant(1);
    b.op(Op::MapAdd {
        global: ticks,
        keys: vec![cpu],
        delta: one,
    });
    b.at("ticks[cpu()] > 1000");
    let count = b.long();
    b.op(Op::MapGet {
        dst: count,
        global: ticks,
        keys: vec![cpu],
    });
    let limit = b.constant(1000);
    let over = b.long();
    b.op(Op::Compare {
        dst: over,
        op: CmpOp::Gt,
        lhs: count,
        rhs: limit,
    });
    b.end(Term::Branch {
        cond: over,
        then: BlockId(1),
        otherwise: BlockId(2),
    });
    b.at("exit()");
    b.op(Op::Exit);
    b.end(Term::Jump(BlockId(2)));
    b.at("}");
    b.end(Term::Return(None));
    Sample {
        name: "profile_counter",
        map,
        module: b.finish("timer.profile", ProbeKind::TimerProfile, n),
    }
}

fn hist_log(n: u32) -> Sample {
    let text =
        "global reasons\nprobe kernel.trace(\"skb:kfree_skb\") {\n  reasons <<< $reason\n}\n";
    let (mut b, map) = Builder::new(text);
    let reasons = b.global(
        "reasons",
        Storage::Stats {
            keys: vec![],
            max_entries: 1,
            needs: StatNeeds {
                min_max: true,
                variance: true,
                hist_log: true,
                hist_linear: Some(crate::ir::LinearHist {
                    lo: -100,
                    hi: 100,
                    width: 25,
                }),
            },
        },
    );
    b.at("$reason");
    let reason = b.long();
    b.op(Op::ContextArg {
        dst: reason,
        index: 2,
    });
    b.at("reasons <<< $reason");
    b.op(Op::StatAdd {
        global: reasons,
        keys: vec![],
        value: reason,
    });
    b.at("}");
    b.end(Term::Return(None));
    Sample {
        name: "hist_log",
        map,
        module: b.finish("kernel.trace(\"skb:kfree_skb\")", kfree_skb(), n),
    }
}

fn sprintf_and_symname(n: u32) -> Sample {
    let text = "global label, sym\nprobe kernel.trace(\"skb:kfree_skb\") {\n  label = sprintf(\"%s-%d-%x\", execname(), pid(), $reason)\n  sym = symname($location)\n}\n";
    let (mut b, map) = Builder::new(text);
    let label = b.global("label", Storage::Scalar(ValType::Str));
    let sym = b.global("sym", Storage::Scalar(ValType::Str));
    b.at("sprintf(\"%s-%d-%x\", execname(), pid(), $reason)");
    let name = b.string();
    b.op(Op::Builtin {
        dst: Some(name),
        name: "execname".into(),
        args: vec![],
    });
    let pid = b.long();
    b.op(Op::Builtin {
        dst: Some(pid),
        name: "pid".into(),
        args: vec![],
    });
    let reason = b.long();
    b.op(Op::ContextArg {
        dst: reason,
        index: 2,
    });
    let format = b.format("%s-%d-%x");
    let text_value = b.string();
    b.op(Op::Sprintf {
        dst: text_value,
        format,
        args: vec![name, pid, reason],
    });
    b.at("label = ");
    b.op(Op::StoreGlobal {
        global: label,
        src: text_value,
    });
    b.at("symname($location)");
    let location = b.long();
    b.op(Op::ContextArg {
        dst: location,
        index: 1,
    });
    let symbol = b.string();
    b.op(Op::Builtin {
        dst: Some(symbol),
        name: "symname".into(),
        args: vec![location],
    });
    b.at("sym = ");
    b.op(Op::StoreGlobal {
        global: sym,
        src: symbol,
    });
    b.at("}");
    b.end(Term::Return(None));
    Sample {
        name: "sprintf",
        map,
        module: b.finish("kernel.trace(\"skb:kfree_skb\")", kfree_skb(), n),
    }
}

/// A uprobe (a kprobe-type program over user registers): arguments come
/// from `pt_regs`, user memory through `bpf_probe_read_user`.
fn uprobe_arguments(n: u32) -> Sample {
    let text = "probe process(\"/bin/true\").function(\"main\") {\n  printf(\"%d %s\\n\", $argc, user_string(user_long($argv)))\n}\n";
    let (mut b, map) = Builder::new(text);
    b.at("$argc");
    let argc = b.long();
    b.op(Op::ContextArg {
        dst: argc,
        index: 0,
    });
    b.at("user_long($argv)");
    let argv = b.long();
    b.op(Op::ContextArg {
        dst: argv,
        index: 1,
    });
    let first = b.long();
    b.op(Op::ReadUser {
        dst: first,
        addr: argv,
        size: 8,
        signed: true,
    });
    b.at("user_string(user_long($argv))");
    let arg0 = b.string();
    b.op(Op::Builtin {
        dst: Some(arg0),
        name: "user_string".into(),
        args: vec![first],
    });
    b.at("printf");
    let format = b.format("%d %s\n");
    b.op(Op::Printf {
        format,
        args: vec![PrintArg::Value(argc), PrintArg::Value(arg0)],
    });
    b.at("}");
    b.end(Term::Return(None));
    let kind = ProbeKind::Process {
        path: "/bin/true".into(),
        target: ProcessTarget::Function("main".into()),
        is_return: false,
    };
    Sample {
        name: "uprobe",
        map,
        module: b.finish("process(\"/bin/true\").function(\"main\")", kind, n),
    }
}

/// Extractors read in the kernel, combining every CPU's value.
fn stat_extractors(n: u32) -> Sample {
    let text = "global s, out\nprobe kernel.trace(\"skb:kfree_skb\") {\n  s[1] <<< $reason\n  out[0] = @count(s[1]); out[1] = @sum(s[1]); out[2] = @min(s[1]); out[3] = @max(s[1]); out[4] = @avg(s[1])\n}\n";
    let (mut b, map) = Builder::new(text);
    let s = b.global(
        "s",
        Storage::Stats {
            keys: vec![ValType::Long],
            max_entries: 2048,
            needs: StatNeeds {
                min_max: true,
                ..StatNeeds::default()
            },
        },
    );
    let out = b.global(
        "out",
        Storage::Array {
            keys: vec![ValType::Long],
            value: ValType::Long,
            max_entries: 16,
            wrap: false,
        },
    );
    b.at("s[1] <<< $reason");
    let reason = b.long();
    b.op(Op::ContextArg {
        dst: reason,
        index: 2,
    });
    let one = b.constant(1);
    b.op(Op::StatAdd {
        global: s,
        keys: vec![one],
        value: reason,
    });
    let extractors = [
        ("@count(s[1])", StatValue::Count),
        ("@sum(s[1])", StatValue::Sum),
        ("@min(s[1])", StatValue::Min),
        ("@max(s[1])", StatValue::Max),
        ("@avg(s[1])", StatValue::Avg),
    ];
    for (slot, (needle, what)) in extractors.into_iter().enumerate() {
        b.at(needle);
        let value = b.long();
        b.op(Op::StatGet {
            dst: value,
            global: s,
            keys: vec![one],
            what,
        });
        let key = b.constant(slot as i64);
        b.op(Op::MapSet {
            global: out,
            keys: vec![key],
            src: value,
        });
    }
    b.at("}");
    b.end(Term::Return(None));
    Sample {
        name: "stat_get",
        map,
        module: b.finish("kernel.trace(\"skb:kfree_skb\")", kfree_skb(), n),
    }
}
