//! The host JIT end to end: hand-built IR modules (the lowering is being
//! written in parallel) compiled with Cranelift and run against a runtime
//! whose output is captured.

use stap_lang::ir::*;
use stap_lang::sema::hir::{GlobalId, Limits, Placement, ProbeKind};
use stap_lang::source::Span;
use stap_runtime::host::{HostRuntime, Output, RuntimeError};
use stap_runtime::jit::{HostProgram, clif_listing};

/// Builds one IR function block by block.
struct Fb {
    f: Function,
    current: usize,
}

impl Fb {
    fn new(name: &str, params: &[ValType], ret: Option<ValType>) -> Fb {
        Fb {
            f: Function {
                name: name.into(),
                side: Placement::Host,
                param_count: params.len(),
                ret,
                regs: params.to_vec(),
                blocks: vec![Block {
                    insts: vec![],
                    term: Term::Return(None),
                    term_span: Span::default(),
                    catch: None,
                }],
                iters: 0,
                span: Span::default(),
            },
            current: 0,
        }
    }

    fn reg(&mut self, ty: ValType) -> Reg {
        self.f.regs.push(ty);
        Reg(self.f.regs.len() as u32 - 1)
    }

    fn block(&mut self) -> BlockId {
        self.f.blocks.push(Block {
            insts: vec![],
            term: Term::Return(None),
            term_span: Span::default(),
            catch: None,
        });
        BlockId(self.f.blocks.len() as u32 - 1)
    }

    fn at(&mut self, b: BlockId) {
        self.current = b.0 as usize;
    }

    fn op(&mut self, op: Op) {
        self.f.blocks[self.current].insts.push(Inst {
            op,
            span: Span::default(),
        });
    }

    fn term(&mut self, term: Term) {
        self.f.blocks[self.current].term = term;
    }

    fn long(&mut self, value: i64) -> Reg {
        let dst = self.reg(ValType::Long);
        self.op(Op::Const { dst, value });
        dst
    }

    fn bin(&mut self, op: BinOp, lhs: Reg, rhs: Reg) -> Reg {
        let dst = self.reg(ValType::Long);
        self.op(Op::Binary { dst, op, lhs, rhs });
        dst
    }
}

/// A module under construction: strings, formats, globals, functions.
#[derive(Default)]
struct Mb {
    m: Option<Module>,
}

impl Mb {
    fn new() -> Mb {
        Mb {
            m: Some(Module {
                globals: vec![],
                functions: vec![],
                probes: vec![],
                strings: vec![],
                formats: vec![],
                limits: Limits::default(),
            }),
        }
    }

    fn m(&mut self) -> &mut Module {
        self.m.as_mut().unwrap()
    }

    fn string(&mut self, fb: &mut Fb, text: &str) -> Reg {
        self.m().strings.push(text.into());
        let id = StrId(self.m().strings.len() as u32 - 1);
        let dst = fb.reg(ValType::Str);
        fb.op(Op::ConstStr { dst, id });
        dst
    }

    fn printf(&mut self, fb: &mut Fb, text: &str, args: &[Reg]) {
        self.m().formats.push(Format { text: text.into() });
        let format = FormatId(self.m().formats.len() as u32 - 1);
        fb.op(Op::Printf {
            format,
            args: args.iter().map(|r| PrintArg::Value(*r)).collect(),
        });
    }

    fn global(&mut self, name: &str, storage: Storage) -> GlobalId {
        self.m().globals.push(Global {
            name: name.into(),
            storage,
            init: None,
            kernel: false,
            host: true,
            span: Span::default(),
            key_text_bytes: None,
        });
        GlobalId(self.m().globals.len() as u32 - 1)
    }

    fn function(&mut self, fb: Fb) -> FuncId {
        self.m().functions.push(fb.f);
        FuncId(self.m().functions.len() as u32 - 1)
    }

    fn begin(&mut self, fb: Fb) -> usize {
        let function = self.function(fb);
        self.m().probes.push(ProbeHandler {
            point: "begin".into(),
            written: "begin".into(),
            kind: ProbeKind::Begin { order: 0 },
            placement: Placement::Host,
            function,
            span: Span::default(),
        });
        self.m().probes.len() - 1
    }

    fn finish(&mut self) -> Module {
        self.m.take().unwrap()
    }
}

/// Compiles the module and runs probe 0; returns the output and result.
fn run(module: &Module) -> (String, Result<(), RuntimeError>, HostRuntime) {
    let program = HostProgram::compile(module).expect("compiles");
    let mut rt = HostRuntime::new(module, Output::buffer());
    let result = program.run_probe(0, &mut rt);
    let out = String::from_utf8(rt.output.take_buffer()).unwrap();
    (out, result, rt)
}

fn stats(keys: Vec<ValType>, needs: StatNeeds) -> Storage {
    Storage::Stats {
        keys,
        max_entries: 2048,
        needs,
    }
}

#[test]
fn arithmetic_and_printf_widths() {
    let mut mb = Mb::new();
    let mut fb = Fb::new("probe0 begin", &[], None);
    let (a, b) = (fb.long(-17), fb.long(5));
    let sum = fb.bin(BinOp::Add, a, b);
    let quot = fb.bin(BinOp::Div, a, b);
    let rem = fb.bin(BinOp::Mod, a, b);
    let shr = fb.bin(BinOp::Shr, a, b);
    let minus_one = fb.long(-1);
    let min = fb.long(i64::MIN);
    let wrap = fb.bin(BinOp::Div, min, minus_one);
    let lt = fb.reg(ValType::Long);
    fb.op(Op::Compare {
        dst: lt,
        op: CmpOp::Lt,
        lhs: a,
        rhs: b,
    });
    let not = fb.reg(ValType::Long);
    fb.op(Op::Unary {
        dst: not,
        op: UnOp::Not,
        src: lt,
    });
    let s = mb.string(&mut fb, "ab");
    let t = mb.string(&mut fb, "cd");
    let cat = fb.reg(ValType::Str);
    fb.op(Op::Concat {
        dst: cat,
        lhs: s,
        rhs: t,
    });
    mb.printf(
        &mut fb,
        "%d %d %d %d %d|%5d|%-5d|%05x|%s|%6s|%-4s|%d %d\n",
        &[sum, quot, rem, shr, wrap, sum, sum, b, cat, cat, s, lt, not],
    );
    mb.begin(fb);
    let (out, result, _) = run(&mb.finish());
    assert_eq!(result, Ok(()));
    assert_eq!(
        out,
        "-12 -3 -2 -1 -9223372036854775808|  -12|-12  |00005|abcd|  abcd|ab  |1 0\n"
    );
}

#[test]
fn strings_compare_and_builtins() {
    let mut mb = Mb::new();
    let mut fb = Fb::new("probe0 begin", &[], None);
    let hay = mb.string(&mut fb, "hello world");
    let needle = mb.string(&mut fb, "world");
    let lt = fb.reg(ValType::Long);
    fb.op(Op::StrCompare {
        dst: lt,
        op: CmpOp::Lt,
        lhs: hay,
        rhs: needle,
    });
    let call = |fb: &mut Fb, name: &str, args: Vec<Reg>, ty: ValType| {
        let dst = fb.reg(ty);
        fb.op(Op::Builtin {
            dst: Some(dst),
            name: name.into(),
            args,
        });
        dst
    };
    let len = call(&mut fb, "strlen", vec![hay], ValType::Long);
    let pos = call(&mut fb, "strpos", vec![hay, needle], ValType::Long);
    let (one, three) = (fb.long(1), fb.long(3));
    let sub = call(&mut fb, "substr", vec![hay, one, three], ValType::Str);
    let o = mb.string(&mut fb, "o");
    let zero = mb.string(&mut fb, "0");
    let replaced = call(&mut fb, "str_replace", vec![hay, o, zero], ValType::Str);
    let nl = mb.string(&mut fb, "a\"b\n");
    let quoted = call(&mut fb, "string_quoted", vec![nl], ValType::Str);
    let hex = mb.string(&mut fb, "ff");
    let sixteen = fb.long(16);
    let parsed = call(&mut fb, "strtol", vec![hex, sixteen], ValType::Long);
    mb.printf(
        &mut fb,
        "%d %d %d %s %s %s %d\n",
        &[lt, len, pos, sub, replaced, quoted, parsed],
    );
    mb.begin(fb);
    let (out, result, _) = run(&mb.finish());
    assert_eq!(result, Ok(()));
    assert_eq!(out, "1 11 6 ell hell0 w0rld \"a\\\"b\\n\" 255\n");
}

/// `function fib(n) { if (n <= 2) return n; return fib(n-1) + fib(n-2) }`
#[test]
fn recursion_and_nesting_limit() {
    let build = |arg: i64| {
        let mut mb = Mb::new();
        let mut fib = Fb::new("fib", &[ValType::Long], Some(ValType::Long));
        let n = Reg(0);
        let two = fib.long(2);
        let small = fib.reg(ValType::Long);
        fib.op(Op::Compare {
            dst: small,
            op: CmpOp::Le,
            lhs: n,
            rhs: two,
        });
        let (base, rec) = (fib.block(), fib.block());
        fib.term(Term::Branch {
            cond: small,
            then: base,
            otherwise: rec,
        });
        fib.at(base);
        fib.term(Term::Return(Some(n)));
        fib.at(rec);
        let one = fib.long(1);
        let n1 = fib.bin(BinOp::Sub, n, one);
        let n2 = fib.bin(BinOp::Sub, n, two);
        let (r1, r2) = (fib.reg(ValType::Long), fib.reg(ValType::Long));
        fib.op(Op::Call {
            dst: Some(r1),
            func: FuncId(1),
            args: vec![n1],
        });
        fib.op(Op::Call {
            dst: Some(r2),
            func: FuncId(1),
            args: vec![n2],
        });
        let sum = fib.bin(BinOp::Add, r1, r2);
        fib.term(Term::Return(Some(sum)));

        let mut fb = Fb::new("probe0 begin", &[], None);
        let x = fb.long(arg);
        let r = fb.reg(ValType::Long);
        fb.op(Op::Call {
            dst: Some(r),
            func: FuncId(1),
            args: vec![x],
        });
        mb.printf(&mut fb, "11th fibonacci number: %d\n", &[r]);
        mb.begin(fb);
        mb.function(fib);
        mb.finish()
    };
    // The language reference's example: fib(11) = 144 with fib(1)=1, fib(2)=2.
    let (out, result, _) = run(&build(11));
    assert_eq!(result, Ok(()));
    assert_eq!(out, "11th fibonacci number: 144\n");
    let (out, result, _) = run(&build(40));
    assert_eq!(result, Err(RuntimeError::MaxNesting));
    assert_eq!(out, "");
}

#[test]
fn division_by_zero_and_maxaction() {
    let mut mb = Mb::new();
    let mut fb = Fb::new("probe0 begin", &[], None);
    let fail = fb.block();
    let s = mb.string(&mut fb, "before\n");
    mb.printf(&mut fb, "%s", &[s]);
    fb.term(Term::Jump(fail));
    fb.at(fail);
    fb.term(Term::Fail(Failure::DivisionByZero));
    mb.begin(fb);
    let (out, result, _) = run(&mb.finish());
    assert_eq!(out, "before\n");
    let error = result.unwrap_err();
    assert_eq!(error, RuntimeError::DivisionByZero);
    assert_eq!(error.to_string(), "division by zero");

    // while (1) {} : the back edge ticks until MAXACTION (x10 in begin).
    let mut mb = Mb::new();
    let mut fb = Fb::new("probe0 begin", &[], None);
    let body = fb.block();
    fb.term(Term::Jump(body));
    fb.at(body);
    fb.op(Op::Tick);
    fb.term(Term::Jump(body));
    mb.begin(fb);
    let (_, result, _) = run(&mb.finish());
    assert_eq!(result.unwrap_err().to_string(), "MAXACTION exceeded");
}

#[test]
fn exit_sets_the_flag_and_the_handler_goes_on() {
    let mut mb = Mb::new();
    let mut fb = Fb::new("probe0 begin", &[], None);
    fb.op(Op::Exit);
    let s = mb.string(&mut fb, "after exit\n");
    mb.printf(&mut fb, "%s", &[s]);
    mb.begin(fb);
    let (out, result, rt) = run(&mb.finish());
    assert_eq!(result, Ok(()));
    assert!(rt.exit_requested);
    assert_eq!(out, "after exit\n");
}

/// `a[k] = v` for 5 keys, `delete a["c"]`, `"b" in a`, then
/// `foreach ([k] in a- limit 3)` (by value, descending) and by key.
#[test]
fn arrays_delete_in_and_sorted_foreach() {
    let mut mb = Mb::new();
    let a = mb.global(
        "a",
        Storage::Array {
            keys: vec![ValType::Str],
            value: ValType::Long,
            max_entries: 2048,
            wrap: false,
        },
    );
    let mut fb = Fb::new("probe0 begin", &[], None);
    for (k, v) in [("a", 3), ("b", 10), ("c", 7), ("d", 1), ("e", 5)] {
        let key = mb.string(&mut fb, k);
        let value = fb.long(v);
        fb.op(Op::MapSet {
            global: a,
            keys: vec![key],
            src: value,
        });
    }
    let c = mb.string(&mut fb, "c");
    fb.op(Op::MapDelete {
        global: a,
        keys: vec![c],
    });
    let bkey = mb.string(&mut fb, "b");
    let (has_b, has_c) = (fb.reg(ValType::Long), fb.reg(ValType::Long));
    fb.op(Op::MapContains {
        dst: has_b,
        global: a,
        keys: vec![bkey],
    });
    fb.op(Op::MapContains {
        dst: has_c,
        global: a,
        keys: vec![c],
    });
    fb.op(Op::MapAdd {
        global: a,
        keys: vec![bkey],
        delta: has_b,
    });
    mb.printf(&mut fb, "in: %d %d\n", &[has_b, has_c]);
    let limit = fb.long(3);
    for (iter, sort, limit) in [
        (
            0,
            Sort {
                by: SortBy::Value,
                descending: true,
            },
            Some(limit),
        ),
        (
            1,
            Sort {
                by: SortBy::Key(0),
                descending: false,
            },
            None,
        ),
    ] {
        fb.f.iters += 1;
        fb.op(Op::IterStart {
            iter: IterId(iter),
            global: a,
            sort: Some(sort),
            limit,
        });
        let (head, body, done) = (fb.block(), fb.block(), fb.block());
        fb.term(Term::Jump(head));
        fb.at(head);
        let (has, k, v) = (
            fb.reg(ValType::Long),
            fb.reg(ValType::Str),
            fb.reg(ValType::Long),
        );
        fb.op(Op::IterNext {
            iter: IterId(iter),
            has,
            keys: vec![k],
            value: Some(v),
        });
        fb.term(Term::Branch {
            cond: has,
            then: body,
            otherwise: done,
        });
        fb.at(body);
        fb.op(Op::Tick);
        mb.printf(&mut fb, "%s=%d ", &[k, v]);
        fb.term(Term::Jump(head));
        fb.at(done);
        let nl = mb.string(&mut fb, "\n");
        mb.printf(&mut fb, "%s", &[nl]);
    }
    mb.begin(fb);
    let (out, result, _) = run(&mb.finish());
    assert_eq!(result, Ok(()));
    assert_eq!(out, "in: 1 0\nb=11 e=5 a=3 \na=3 b=11 d=1 e=5 \n");
}

/// `for (i=1;i<=5;i++) x<<<i` then every extractor.
#[test]
fn statistics_extractors() {
    let mut mb = Mb::new();
    let x = mb.global(
        "x",
        stats(
            vec![],
            StatNeeds {
                min_max: true,
                variance: true,
                ..StatNeeds::default()
            },
        ),
    );
    let mut fb = Fb::new("probe0 begin", &[], None);
    for v in 1..=5 {
        let value = fb.long(v);
        fb.op(Op::StatAdd {
            global: x,
            keys: vec![],
            value,
        });
    }
    let mut regs = vec![];
    for what in [
        StatValue::Count,
        StatValue::Sum,
        StatValue::Min,
        StatValue::Max,
        StatValue::Avg,
        StatValue::Variance { shift: 0 },
    ] {
        let dst = fb.reg(ValType::Long);
        fb.op(Op::StatGet {
            dst,
            global: x,
            keys: vec![],
            what,
        });
        regs.push(dst);
    }
    mb.printf(&mut fb, "%d %d %d %d %d %d\n", &regs);
    mb.begin(fb);
    let (out, result, _) = run(&mb.finish());
    assert_eq!(result, Ok(()));
    assert_eq!(out, "5 15 1 5 3 12\n");

    // With `@variance(x, 1)` the statistic keeps shift 1: prints 2.
    let mut mb = Mb::new();
    let x = mb.global(
        "x",
        stats(
            vec![],
            StatNeeds {
                variance: true,
                ..StatNeeds::default()
            },
        ),
    );
    let mut fb = Fb::new("probe0 begin", &[], None);
    for v in 1..=5 {
        let value = fb.long(v);
        fb.op(Op::StatAdd {
            global: x,
            keys: vec![],
            value,
        });
    }
    let dst = fb.reg(ValType::Long);
    fb.op(Op::StatGet {
        dst,
        global: x,
        keys: vec![],
        what: StatValue::Variance { shift: 1 },
    });
    mb.printf(&mut fb, "%d\n", &[dst]);
    // @min of an empty statistic is an error.
    let y = mb.global(
        "y",
        stats(
            vec![],
            StatNeeds {
                min_max: true,
                ..StatNeeds::default()
            },
        ),
    );
    let min = fb.reg(ValType::Long);
    fb.op(Op::StatGet {
        dst: min,
        global: y,
        keys: vec![],
        what: StatValue::Min,
    });
    mb.begin(fb);
    let (out, result, _) = run(&mb.finish());
    assert_eq!(out, "2\n");
    assert_eq!(result, Err(RuntimeError::EmptyAggregate));
}

/// Feeds `samples` (value, times) into a histogram statistic and prints it.
fn histogram(kind: HistKind, samples: &[(i64, i64)]) -> String {
    let mut mb = Mb::new();
    let needs = match kind {
        HistKind::Log => StatNeeds {
            hist_log: true,
            ..StatNeeds::default()
        },
        HistKind::Linear(h) => StatNeeds {
            hist_linear: Some(h),
            ..StatNeeds::default()
        },
    };
    let reads = mb.global("reads", stats(vec![], needs));
    let mut fb = Fb::new("probe0 begin", &[], None);
    // A loop per sample value keeps the IR small.
    for (value, times) in samples {
        let (v, n, one) = (fb.long(*value), fb.long(*times), fb.long(1));
        let (head, body, done) = (fb.block(), fb.block(), fb.block());
        fb.term(Term::Jump(head));
        fb.at(head);
        let more = fb.reg(ValType::Long);
        let zero = fb.long(0);
        fb.op(Op::Compare {
            dst: more,
            op: CmpOp::Gt,
            lhs: n,
            rhs: zero,
        });
        fb.term(Term::Branch {
            cond: more,
            then: body,
            otherwise: done,
        });
        fb.at(body);
        fb.op(Op::StatAdd {
            global: reads,
            keys: vec![],
            value: v,
        });
        fb.op(Op::Binary {
            dst: n,
            op: BinOp::Sub,
            lhs: n,
            rhs: one,
        });
        fb.term(Term::Jump(head));
        fb.at(done);
    }
    fb.op(Op::PrintHist {
        global: reads,
        keys: vec![],
        kind,
    });
    mb.begin(fb);
    let (out, result, _) = run(&mb.finish());
    assert_eq!(result, Ok(()));
    out
}

/// The language reference's `@hist_linear(reads, 0, 10240, 200)` example.
#[test]
fn hist_linear_matches_the_language_reference() {
    let h = LinearHist {
        lo: 0,
        hi: 10240,
        width: 200,
    };
    let out = histogram(HistKind::Linear(h), &[(100, 1650), (300, 8), (1450, 1)]);
    let expected = "\
value |-------------------------------------------------- count
    0 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@ 1650
  200 |                                                      8
  400 |                                                      0
  600 |                                                      0
      ~
 1000 |                                                      0
 1200 |                                                      0
 1400 |                                                      1
 1600 |                                                      0
 1800 |                                                      0

";
    assert_eq!(out, expected);
    insta::assert_snapshot!("hist_linear_langref", out);
}

/// The language reference's `@hist_log(reads)` example.
#[test]
fn hist_log_matches_the_language_reference() {
    let out = histogram(
        HistKind::Log,
        &[
            (40, 254),
            (64, 3),
            (130, 2),
            (300, 2),
            (600, 4),
            (1500, 16689),
        ],
    );
    let expected = "\
value |-------------------------------------------------- count
    8 |                                                      0
   16 |                                                      0
   32 |                                                    254
   64 |                                                      3
  128 |                                                      2
  256 |                                                      2
  512 |                                                      4
 1024 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@ 16689
 2048 |                                                      0
 4096 |                                                      0

";
    assert_eq!(out, expected);
    insta::assert_snapshot!("hist_log_langref", out);
}

#[test]
fn clif_listing_of_a_small_function() {
    let mut mb = Mb::new();
    let mut fb = Fb::new("add3", &[ValType::Long], Some(ValType::Long));
    let three = fb.long(3);
    let sum = fb.bin(BinOp::Add, Reg(0), three);
    fb.term(Term::Return(Some(sum)));
    mb.function(fb);
    let listing = clif_listing(&mb.finish()).expect("listing");
    insta::assert_snapshot!("clif_add3", listing);
}

/// Elements of every fake map, by (map fd, key).
type FakeElements = std::collections::BTreeMap<(i32, Vec<u8>), Vec<u8>>;

/// An in-memory stand-in for BPF maps: hash semantics, 2 CPUs.
struct FakeMaps(std::cell::RefCell<FakeElements>);

impl stap_runtime::host::BpfMapOps for FakeMaps {
    fn lookup(&self, fd: i32, key: &[u8], value: &mut [u8]) -> std::io::Result<bool> {
        Ok(match self.0.borrow().get(&(fd, key.to_vec())) {
            Some(v) => {
                value.copy_from_slice(v);
                true
            }
            None => false,
        })
    }
    fn update(&self, fd: i32, key: &[u8], value: &[u8]) -> std::io::Result<()> {
        self.0
            .borrow_mut()
            .insert((fd, key.to_vec()), value.to_vec());
        Ok(())
    }
    fn delete(&self, fd: i32, key: &[u8]) -> std::io::Result<bool> {
        Ok(self.0.borrow_mut().remove(&(fd, key.to_vec())).is_some())
    }
    fn next_key(&self, fd: i32, key: Option<&[u8]>, next: &mut [u8]) -> std::io::Result<bool> {
        let map = self.0.borrow();
        let found = map
            .keys()
            .filter(|(f, k)| *f == fd && key.is_none_or(|prev| k.as_slice() > prev))
            .map(|(_, k)| k)
            .next();
        Ok(found.map(|k| next.copy_from_slice(k)).is_some())
    }
    fn possible_cpus(&self) -> usize {
        2
    }
}

/// Kernel-shared globals: a per-CPU statistic written "by the kernel" on
/// two CPUs and an array, read and iterated by host code.
#[test]
fn kernel_shared_globals_combine_cpus() {
    use stap_lang::bpf::layout::StatLayout;
    let mut mb = Mb::new();
    let needs = StatNeeds {
        min_max: true,
        ..StatNeeds::default()
    };
    let s = mb.global("s", stats(vec![], needs));
    let a = mb.global(
        "a",
        Storage::Array {
            keys: vec![ValType::Long],
            value: ValType::Long,
            max_entries: 2048,
            wrap: false,
        },
    );
    let mut fb = Fb::new("probe0 end", &[], None);
    let mut regs = vec![];
    for what in [
        StatValue::Count,
        StatValue::Sum,
        StatValue::Min,
        StatValue::Max,
    ] {
        let dst = fb.reg(ValType::Long);
        fb.op(Op::StatGet {
            dst,
            global: s,
            keys: vec![],
            what,
        });
        regs.push(dst);
    }
    mb.printf(&mut fb, "%d %d %d %d\n", &regs);
    fb.f.iters = 1;
    fb.op(Op::IterStart {
        iter: IterId(0),
        global: a,
        sort: Some(Sort {
            by: SortBy::Value,
            descending: true,
        }),
        limit: None,
    });
    let (head, body, done) = (fb.block(), fb.block(), fb.block());
    fb.term(Term::Jump(head));
    fb.at(head);
    let (has, k, v) = (
        fb.reg(ValType::Long),
        fb.reg(ValType::Long),
        fb.reg(ValType::Long),
    );
    fb.op(Op::IterNext {
        iter: IterId(0),
        has,
        keys: vec![k],
        value: Some(v),
    });
    fb.term(Term::Branch {
        cond: has,
        then: body,
        otherwise: done,
    });
    fb.at(body);
    mb.printf(&mut fb, "a[%d]=%d\n", &[k, v]);
    fb.term(Term::Jump(head));
    mb.begin(fb);
    let module = mb.finish();

    let maps = std::rc::Rc::new(FakeMaps(Default::default()));
    // CPU 0: count 2, sum 10, min 3, max 7; CPU 1: count 1, sum -2.
    let layout = StatLayout::new(&needs);
    let mut value = vec![0i64; layout.slots as usize * 2];
    value[..4].copy_from_slice(&[2, 10, 3, 7]);
    value[4..8].copy_from_slice(&[1, -2, -2, -2]);
    let bytes: Vec<u8> = value.iter().flat_map(|v| v.to_ne_bytes()).collect();
    use stap_runtime::host::BpfMapOps;
    maps.update(10, &0u32.to_ne_bytes(), &bytes).unwrap();
    for (key, val) in [(1i64, 5i64), (2, 50), (3, 20)] {
        maps.update(11, &key.to_ne_bytes(), &val.to_ne_bytes())
            .unwrap();
    }

    let program = HostProgram::compile(&module).unwrap();
    let mut rt = HostRuntime::new(&module, Output::buffer());
    rt.globals.attach_kernel_map(s, 10, maps.clone()).unwrap();
    rt.globals.attach_kernel_map(a, 11, maps.clone()).unwrap();
    assert_eq!(program.run_probe(0, &mut rt), Ok(()));
    let out = String::from_utf8(rt.output.take_buffer()).unwrap();
    assert_eq!(out, "3 8 -2 7\na[2]=50\na[3]=20\na[1]=5\n");
}

/// Runs the first begin probe of `script`, taken through the front end
/// against the fake kernel.
fn run_script(script: &str) -> (String, Result<(), RuntimeError>) {
    let facts = stap_lang::testing::FakeKernel::new();
    let (module, _) = stap_lang::testing::lower_script(script, &facts);
    let (out, result, _) = run(&module);
    (out, result)
}

#[test]
fn regex_match_and_captures() {
    let (out, result) = run_script(
        r#"
function kind(name) {
  if (name !~ "^tcp_") return "other"
  return matched(0)
}
probe begin {
  if ("tcp_v4_rcv" =~ "^tcp_(v[46])_(.*)$") println(matched(1), " ", matched(2))
  println("udp_rcv" !~ "^tcp_", " ", "eth0" =~ "^[[:alpha:]]+[[:digit:]]$")
  println(kind("udp_rcv"), " ", kind("tcp_v6_rcv"))
}
"#,
    );
    assert_eq!(result, Ok(()));
    assert_eq!(out, "v4 rcv\n1 1\nother tcp_\n");
}

#[test]
fn regex_errors_stop_the_probe() {
    let (out, result) = run_script(
        r#"probe begin { pat = "(tcp"; println("before"); if ("x" =~ pat) println("no") }"#,
    );
    assert_eq!(out, "before\n");
    let message = result.unwrap_err().to_string();
    assert!(
        message.starts_with("regex compilation error: "),
        "{message}"
    );

    let (_, result) = run_script(r#"probe begin { if ("a" =~ "b") {} println(matched(0)) }"#);
    assert_eq!(
        result.unwrap_err().to_string(),
        "Attempted to get subexpression 0 from failed match"
    );
}

/// Runs every probe of `script` (in the module's order) and returns each
/// one's output and result.
fn run_every_probe(script: &str) -> Vec<(String, String, Result<(), RuntimeError>)> {
    let facts = stap_lang::testing::FakeKernel::new();
    let (module, _) = stap_lang::testing::lower_script(script, &facts);
    let program = HostProgram::compile(&module).expect("compiles");
    let mut rt = HostRuntime::new(&module, Output::buffer());
    (0..module.probes.len())
        .map(|i| {
            let result = program.run_probe(i, &mut rt);
            let out = String::from_utf8(rt.output.take_buffer()).unwrap();
            (module.probes[i].point.clone(), out, result)
        })
        .collect()
}

#[test]
fn pp_names_the_host_probe_that_runs() {
    let runs = run_every_probe(
        r#"
function where() { return pp() }
probe begin { println(pp()) }
probe begin(10) { println(where()) }
probe timer.s(5) { println(pp()) }
probe timer.ms(100).randomize(20) { println(pp()) }
probe timer.hz(3) { println(pp()) }
probe end { println(pp()) }
probe end(3), error(-2) { println(pp()) }
"#,
    );
    let outputs: Vec<&str> = runs.iter().map(|(_, out, _)| out.as_str()).collect();
    assert_eq!(
        outputs,
        [
            "begin\n",
            "begin(10)\n",
            "timer.s(5)\n",
            "timer.ms(100).randomize(20)\n",
            "timer.hz(3)\n",
            "end\n",
            "end(3)\n",
            "error(-2)\n"
        ]
    );
    assert!(runs.iter().all(|(_, _, r)| r.is_ok()));
}

#[test]
fn backtraces_in_host_probes_say_there_is_none() {
    // stap's begin/end/timer probes have no registers: print_backtrace
    // says so, naming the probe point; backtrace() is empty.
    let runs = run_every_probe(
        r#"
probe begin { print_backtrace(); printf("[%s]\n", backtrace()); print_stack(backtrace()) }
probe timer.s(1) {
  print_backtrace(); print_ubacktrace()
  printf("[%s] [%s]\n", sprint_backtrace(), sprint_stack(""))
}
"#,
    );
    assert_eq!(runs[0].1, "<no kernel backtrace at begin>\n[]\n");
    assert_eq!(
        runs[1].1,
        "<no kernel backtrace at timer.s(1)>\n<no user backtrace at timer.s(1)>\n\
         [<no kernel backtrace at timer.s(1)>] []\n"
    );
}

#[test]
fn print_stack_symbolizes_each_address() {
    let dir = std::env::temp_dir().join(format!("stap-rs-jit-stack-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kallsyms = dir.join("kallsyms");
    std::fs::write(
        &kallsyms,
        "ffffffff81000000 T tcp_v4_rcv\nffffffff81000400 T tcp_v4_do_rcv\n\
         ffffffffc0000000 t e1000_xmit\t[e1000]\nffffffffc0000100 t e1000_end\t[e1000]\n",
    )
    .unwrap();
    let facts = stap_lang::testing::FakeKernel::new();
    let (module, _) = stap_lang::testing::lower_script(
        r#"probe begin {
  print_stack("0xffffffff81000010 0xffffffffc0000008 0x10")
  printf("[%s]\n", sprint_stack("0xffffffff81000404 ffffffffc0000001"))
  print_backtrace(); print_ubacktrace()
  printf("[%s] [%s]\n", sprint_backtrace(), backtrace())
}"#,
        &facts,
    );
    let program = HostProgram::compile(&module).unwrap();
    let mut rt = HostRuntime::new(&module, Output::buffer());
    rt.symbols = stap_runtime::host::Symbols::from_path(&kallsyms);
    assert_eq!(program.run_probe(0, &mut rt), Ok(()));
    let out = String::from_utf8(rt.output.take_buffer()).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    // stap's _STP_SYM_FULL frames for print_stack, _STP_SYM_SIMPLE for
    // sprint_stack (last newline dropped), and a host probe's no-stack text.
    insta::assert_snapshot!("host_stack_formats", out);
}

#[test]
fn wrapping_arrays_evict_the_oldest_element() {
    // Keys 1..=6 into a 4-element `%` array: 1 and 2 go. Updating 3 keeps
    // its place; deleting 4 and inserting it again makes it the newest.
    let (out, result) = run_script(
        r#"
global a%[4]
probe begin {
  for (i = 1; i <= 6; i++) a[i] = i * 10
  foreach (k in a+) printf("%d=%d ", k, a[k])
  println("")
  a[3] = 33; delete a[4]; a[4] = 44
  a[7] = 70
  a[8] = 80
  foreach (k in a+) printf("%d=%d ", k, a[k])
  println("")
  delete a
  for (i = 10; i <= 14; i++) a[i] = i
  foreach (k in a+) printf("%d ", k)
  println("")
}
"#,
    );
    assert_eq!(result, Ok(()));
    assert_eq!(
        out,
        "3=30 4=40 5=50 6=60 \n4=44 6=60 7=70 8=80 \n11 12 13 14 \n"
    );
}

/// A kernel map whose contents "the kernel" changes right after each
/// snapshot, counting the element lookups the host makes.
struct RacingMaps {
    maps: FakeMaps,
    lookups: std::cell::Cell<usize>,
    snapshots: std::cell::Cell<i64>,
}

impl stap_runtime::host::BpfMapOps for RacingMaps {
    fn lookup(&self, fd: i32, key: &[u8], value: &mut [u8]) -> std::io::Result<bool> {
        self.lookups.set(self.lookups.get() + 1);
        self.maps.lookup(fd, key, value)
    }
    fn update(&self, fd: i32, key: &[u8], value: &[u8]) -> std::io::Result<()> {
        self.maps.update(fd, key, value)
    }
    fn delete(&self, fd: i32, key: &[u8]) -> std::io::Result<bool> {
        self.maps.delete(fd, key)
    }
    fn next_key(&self, fd: i32, key: Option<&[u8]>, next: &mut [u8]) -> std::io::Result<bool> {
        self.maps.next_key(fd, key, next)
    }
    fn possible_cpus(&self) -> usize {
        2
    }
    fn for_each_batch(
        &self,
        fd: i32,
        key_size: usize,
        value_size: usize,
        each: &mut dyn FnMut(&[u8], &[u8]),
    ) -> std::io::Result<()> {
        let (keys, values) = stap_runtime::host::kmap::walk(&self.maps, fd, key_size, value_size)?;
        let lookups = self.lookups.get();
        each(&keys, &values);
        self.lookups.set(lookups);
        if fd != 7 {
            return Ok(());
        }
        // Kernel probes write after the snapshot: one element changes,
        // one goes.
        self.snapshots.set(self.snapshots.get() + 1);
        let changed = 998 + self.snapshots.get();
        self.maps
            .update(fd, &2i64.to_ne_bytes(), &changed.to_ne_bytes())?;
        self.maps.delete(fd, &3i64.to_ne_bytes())?;
        Ok(())
    }
}

#[test]
fn foreach_over_a_kernel_map_reads_values_from_its_snapshot() {
    let facts = stap_lang::testing::FakeKernel::new();
    let (module, _) = stap_lang::testing::lower_script(
        r#"
global a
probe end {
  foreach (k in a+) printf("%d=%d ", k, a[k])
  println("")
  foreach (k in a+) { if (k == 1) a[9] = 1; printf("%d=%d ", k, a[k]) }
  println("")
}
"#,
        &facts,
    );
    let a = GlobalId(0);
    let maps = std::rc::Rc::new(RacingMaps {
        maps: FakeMaps(Default::default()),
        lookups: Default::default(),
        snapshots: Default::default(),
    });
    use stap_runtime::host::BpfMapOps;
    for (key, value) in [(1i64, 10i64), (2, 20), (3, 30)] {
        maps.update(7, &key.to_ne_bytes(), &value.to_ne_bytes())
            .unwrap();
    }
    let program = HostProgram::compile(&module).unwrap();
    let mut rt = HostRuntime::new(&module, Output::buffer());
    rt.globals.attach_kernel_map(a, 7, maps.clone()).unwrap();
    assert_eq!(program.run_probe(0, &mut rt), Ok(()));
    let out = String::from_utf8(rt.output.take_buffer()).unwrap();
    // First loop: the snapshot's values although the kernel changed them,
    // with no lookup per element (stap holds the array's lock for the whole
    // loop). Second loop (snapshot {1: 10, 2: 999}, then 2 becomes 1000):
    // once host code writes a global, `a[k]` reads the map again.
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, ["1=10 2=20 3=30 ", "1=10 2=1000 "]);
    assert_eq!(maps.lookups.get(), 2);
}

/// A /proc/kcore stand-in: an ELF64 file whose one PT_LOAD segment maps
/// `data` at kernel address `vaddr`.
fn fake_kcore(path: &std::path::Path, vaddr: u64, data: &[u8]) {
    let mut elf = vec![0u8; 0x1000];
    elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
    elf[0x20..0x28].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
    elf[0x36..0x38].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
    elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
    let ph = &mut elf[64..120];
    ph[..4].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    ph[8..16].copy_from_slice(&0x1000u64.to_le_bytes()); // p_offset
    ph[16..24].copy_from_slice(&vaddr.to_le_bytes());
    ph[32..40].copy_from_slice(&(data.len() as u64).to_le_bytes()); // p_filesz
    elf.extend_from_slice(data);
    std::fs::write(path, elf).unwrap();
}

#[test]
fn memory_directives_read_kernel_memory_on_the_host() {
    let dir = tempfile::Builder::new()
        .prefix("stap-rs-jit-kcore-")
        .tempdir()
        .unwrap();
    let kcore = dir.path().join("kcore");
    fake_kcore(&kcore, 0xffff_ffff_8200_0000, b"Linux version 6.18\0");
    let run_with_kcore = |script: &str| {
        let facts = stap_lang::testing::FakeKernel::new();
        let (module, _) = stap_lang::testing::lower_script(script, &facts);
        let program = HostProgram::compile(&module).unwrap();
        let mut rt = HostRuntime::new(&module, Output::buffer());
        rt.kmem = stap_runtime::host::kmem::KernelMemory::from_path(&kcore);
        let result = program.run_probe(0, &mut rt);
        (String::from_utf8(rt.output.take_buffer()).unwrap(), result)
    };
    let (out, result) = run_with_kcore(
        r#"probe begin {
  a = 0xffffffff82000000
  printf("[%m] [%.5m] [%.5M] [%-7.2m] [%6.1M] [%*.*m]\n", a, a, a, a, a + 1, 4, 3, a + 6)
  s = sprintf("%.7M", a + 6); println(s)
}"#,
    );
    assert_eq!(result, Ok(()));
    assert_eq!(
        out,
        "[L] [Linux] [4c696e7578] [Li     ] [    69] [ ver]\n76657273696f6e\n"
    );
    // Past the segment's end, and below it: stap's fault message.
    let (out, result) = run_with_kcore(
        r#"probe begin { println("before"); printf("%.8m\n", 0xffffffff82000010) }"#,
    );
    assert_eq!(out, "before\n");
    assert_eq!(
        result.unwrap_err().to_string(),
        "kernel read fault at 0xffffffff82000010"
    );
    let (_, result) = run_with_kcore(r#"probe begin { printf("%m", 0) }"#);
    assert_eq!(result.unwrap_err().to_string(), "kernel read fault at 0x0");
    // The kernel_string()/kernel_long() family and `->` read the same way;
    // a string that runs to the segment's end faults, or takes its fallback.
    let (out, result) = run_with_kcore(
        r#"probe begin {
  a = 0xffffffff82000000
  printf("%s|%s|%d|%d|%d\n", kernel_string(a), kernel_string_n(a, 5), kernel_char(a),
         kernel_short(a + 1), @cast(a - 1264, "struct task_struct")->pid == kernel_int(a))
  println(kernel_string(a + 19, "fallback"))
  try { kernel_string(a + 19) } catch (msg) { println(msg) }
  try { kernel_long(a + 16) } catch (msg) { println(msg) }
}"#,
    );
    assert_eq!(result, Ok(()), "{out}");
    assert_eq!(
        out,
        "Linux version 6.18|Linux|76|28265|1\nfallback\n\
         kernel string copy fault at 0xffffffff82000013\n\
         kernel read fault at 0xffffffff82000010\n"
    );
    let (_, result) = run_with_kcore(r#"probe begin { printf("%#m", 0xffffffff82000000) }"#);
    assert!(
        result
            .unwrap_err()
            .to_string()
            .starts_with("unsupported: %#m"),
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sorted_foreach_breaks_ties_by_key() {
    let (out, result) = run_script(
        r#"
global a, s
probe begin {
  a[5] = 1; a[3] = 2; a[9] = 1; a[1] = 2; a[7] = -9223372036854775808; a[2] = 9223372036854775807
  foreach (k in a-) printf("%d ", k)
  println("")
  foreach (k in a+ limit 4) printf("%d ", k)
  println("")
  s["b"] = 1; s["a"] = 1; s["c"] = 0
  foreach (name in s-) printf("%s ", name)
  println("")
}
"#,
    );
    assert_eq!(result, Ok(()));
    assert_eq!(out, "2 1 3 5 9 7 \n7 5 9 1 \na b c \n");
}

#[test]
fn foreach_over_kernel_statistics_reads_aggregates_from_its_snapshot() {
    use stap_lang::bpf::layout::StatLayout;
    let facts = stap_lang::testing::FakeKernel::new();
    let (module, _) = stap_lang::testing::lower_script(
        r#"
global s
probe end {
  foreach (k in s-) printf("%d: %d %d %d\n", k, @count(s[k]), @sum(s[k]), @max(s[k]))
}
"#,
        &facts,
    );
    let Storage::Stats { needs, .. } = &module.globals[0].storage else {
        panic!("s is not a statistic");
    };
    let layout = StatLayout::new(needs);
    let maps = std::rc::Rc::new(RacingMaps {
        maps: FakeMaps(Default::default()),
        lookups: Default::default(),
        snapshots: Default::default(),
    });
    use stap_runtime::host::BpfMapOps;
    // Two CPUs' slots per key: count, sum, then min and max.
    for (key, cpu0, cpu1) in [
        (1i64, [2, 10, 3, 7], [1, 4, 4, 4]),
        (2, [5, 50, 1, 20], [0, 0, 0, 0]),
    ] {
        let mut value = vec![0i64; layout.slots as usize * 2];
        value[..4].copy_from_slice(&cpu0);
        value[layout.slots as usize..layout.slots as usize + 4].copy_from_slice(&cpu1);
        let bytes: Vec<u8> = value.iter().flat_map(|v| v.to_ne_bytes()).collect();
        maps.update(8, &key.to_ne_bytes(), &bytes).unwrap();
    }
    let program = HostProgram::compile(&module).unwrap();
    let mut rt = HostRuntime::new(&module, Output::buffer());
    rt.globals
        .attach_kernel_map(GlobalId(0), 8, maps.clone())
        .unwrap();
    assert_eq!(program.run_probe(0, &mut rt), Ok(()));
    let out = String::from_utf8(rt.output.take_buffer()).unwrap();
    assert_eq!(out, "2: 5 50 20\n1: 3 14 7\n");
    assert_eq!(maps.lookups.get(), 0, "an extractor went back to the map");
}

#[test]
fn deferred_stacks_are_named_in_output_and_other_escapes_pass() {
    // A deferred kernel stack (what kernel probes make of
    // sprint_stack(backtrace())) prints as its frames; an address with no
    // symbol prints as hex. Terminal escapes and a cut deferred stack
    // (no closing ESC) are printed as they are.
    let (out, result) = run_script(
        r#"probe begin {
  printf("[%s]\n", "\033k0x1 0x2\033")
  print("\033[1mbold\033[0m \033k0x1\n")
  println("a\033k0x1 z\033b")
}"#,
    );
    assert_eq!(result, Ok(()));
    assert_eq!(
        out,
        "[0x1\n0x2]\n\u{1b}[1mbold\u{1b}[0m \u{1b}k0x1\na\u{1b}k0x1 z\u{1b}b\n"
    );
}
