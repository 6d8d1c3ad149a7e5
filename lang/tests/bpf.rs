//! The BPF backend: listings of the sample probes (`bpf::samples`, which
//! runtime/tests/verifier.rs also loads into and runs in the real kernel),
//! the register allocator, diagnostics, lowered scripts, and the record
//! decoder. Listings use MAXSTRINGLEN=64 to stay short.

use stap_lang::bpf::{self, AttachKind, MapRole, Object, Options, records, regalloc, samples};
use stap_lang::diag::render_plain;
use stap_lang::ir::{self, Module, Op, Reg, Term, ValType};
use stap_lang::kernel::KernelFacts;
use stap_lang::source::SourceMap;
use stap_lang::testing::FakeKernel;

fn options() -> Options {
    Options {
        max_string_len: 64,
        test_out_of_bounds: false,
        cpus: bpf::DEFAULT_CPUS,
        tracepoint_mechanism: Default::default(),
        kernel: Default::default(),
        local_time: Default::default(),
    }
}

fn sample(name: &str) -> samples::Sample {
    samples::all(64)
        .into_iter()
        .find(|s| s.name == name)
        .expect("sample exists")
}

fn listing_of(name: &str) -> String {
    let sample = sample(name);
    let object = bpf::compile(&sample.module, &options()).expect("compiles");
    bpf::listing(&object, &sample.map)
}

#[test]
fn listing_counter() {
    insta::assert_snapshot!(listing_of("counter"));
}

#[test]
fn listing_printf_string_long_symbol() {
    insta::assert_snapshot!(listing_of("printf"));
}

#[test]
fn listing_kernel_string_of_a_member_chain() {
    insta::assert_snapshot!(listing_of("kernel_string"));
}

#[test]
fn listing_concat_and_compare() {
    insta::assert_snapshot!(listing_of("concat"));
}

#[test]
fn listing_while_loop_with_tick() {
    insta::assert_snapshot!(listing_of("while_loop"));
}

#[test]
fn listing_signed_division() {
    insta::assert_snapshot!(listing_of("division"));
}

#[test]
fn listings_are_deterministic() {
    for s in samples::all(64) {
        let a = bpf::listing(&bpf::compile(&s.module, &options()).unwrap(), &s.map);
        let b = bpf::listing(&bpf::compile(&s.module, &options()).unwrap(), &s.map);
        assert_eq!(a, b, "{}", s.name);
    }
}

// ----- register allocation -----

#[test]
fn four_live_longs_fit_in_callee_saved_registers() {
    let s = sample("counter");
    let alloc = regalloc::allocate(&s.module.functions[0]);
    assert_eq!(alloc.spill_slots, 0);
    for (index, ty) in s.module.functions[0].regs.iter().enumerate() {
        if *ty == ValType::Long {
            assert!(matches!(
                alloc.location(Reg(index as u32)),
                regalloc::Location::Register(6..=9)
            ));
        }
    }
}

#[test]
fn more_than_four_live_longs_spill() {
    // Six values live at once (a..f) plus the running sum.
    let s = sample("many_longs");
    let function = &s.module.functions[0];
    let alloc = regalloc::allocate(function);
    assert!(alloc.spill_slots >= 2, "{alloc:?}");
    let in_registers = alloc
        .locations
        .iter()
        .filter(|l| matches!(l, regalloc::Location::Register(_)))
        .count();
    assert!(in_registers >= 4);
    let object = bpf::compile(&s.module, &options()).unwrap();
    assert_eq!(object.programs[0].stack_bytes, 176 + 8 * alloc.spill_slots);
}

#[test]
fn registers_are_reused_after_their_last_use() {
    // In the loop sample, `i` lives across the loop; constants die at once.
    let s = sample("while_loop");
    let alloc = regalloc::allocate(&s.module.functions[0]);
    assert_eq!(alloc.spill_slots, 0);
    let i = alloc.location(Reg(0));
    assert!(matches!(i, regalloc::Location::Register(_)));
}

#[test]
fn string_registers_share_scratch_slots_when_their_lives_do_not_overlap() {
    let s = sample("concat");
    let function = &s.module.functions[0];
    let alloc = regalloc::allocate(function);
    let strings = function.regs.iter().filter(|t| **t == ValType::Str).count();
    assert!(alloc.string_slots >= 1 && (alloc.string_slots as usize) < strings);
    // An op never writes its result over one of its operands.
    let mut concats = 0;
    for inst in function.blocks.iter().flat_map(|b| &b.insts) {
        if let Op::Concat { dst, lhs, rhs } = &inst.op {
            concats += 1;
            assert_ne!(alloc.location(*dst), alloc.location(*lhs));
            assert_ne!(alloc.location(*dst), alloc.location(*rhs));
        }
    }
    assert!(concats > 0);
}

// ----- diagnostics -----

/// A one-probe module around `ops`, on the counter sample's probe.
fn with_ops(regs: Vec<ValType>, ops: Vec<Op>) -> (Module, SourceMap) {
    let s = sample("counter");
    let mut module = s.module;
    let span = module.functions[0].span;
    let function = &mut module.functions[0];
    function.regs = regs;
    function.blocks = vec![ir::Block {
        insts: ops.into_iter().map(|op| ir::Inst { op, span }).collect(),
        term: Term::Return(None),
        term_span: span,
        catch: None,
    }];
    (module, s.map)
}

fn errors(module: &Module, map: &SourceMap) -> String {
    match bpf::compile(module, &options()) {
        Ok(_) => panic!("expected diagnostics"),
        Err(diags) => render_plain(map, &diags),
    }
}

#[test]
fn unknown_kernel_builtins_are_unsupported_by_name() {
    let (module, map) = with_ops(
        vec![ValType::Long],
        vec![Op::Builtin {
            dst: Some(Reg(0)),
            name: "cmdline_str".into(),
            args: vec![],
        }],
    );
    let text = errors(&module, &map);
    assert!(
        text.contains("unsupported: cmdline_str() in kernel probes"),
        "{text}"
    );
}

#[test]
fn listing_kernel_sorted_foreach_rounds() {
    // By a string key's descending order, ties on nothing: the rounds, the
    // walk comparing the candidate with the last and the best, the body.
    let script = "global a\nprobe kernel.trace(\"sys_enter\") {\n  a[execname(), $id] = 1\n  foreach ([c-, i] in a limit 2) printf(\"%s %d\\n\", c, i)\n}\n";
    let (module, map) = lower(script);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    let program = &object.programs[0];
    assert!(program.needs_btf());
    assert_eq!(
        program.func_info.len(),
        5,
        "the handler, the body, the round, the walk and the output flush subprogram"
    );
    assert!(program.stack_bytes <= 512);
    insta::assert_snapshot!(bpf::listing(&object, &map));
}

#[test]
fn kernel_foreach_over_statistics_sorted_by_value_is_unsupported() {
    let script = "global s\nprobe kernel.trace(\"sys_enter\") {\n  s[$id] <<< 1\n  foreach ([k] in s-) printf(\"%d\\n\", k)\n}\n";
    let (module, map) = lower(script);
    let text = errors(&module, &map);
    assert!(
        text.contains(
            "unsupported: a foreach over a statistics array sorted by its values in a kernel probe"
        ),
        "{text}"
    );
}

#[test]
fn sprintf_directives_bpf_snprintf_lacks_are_named() {
    let s = sample("sprintf");
    let mut module = s.module;
    // What bpf_snprintf lacks is emitted code; only `%*b` is refused.
    module.formats[0].text = "%s-%d-%o".into();
    assert!(bpf::compile(&module, &options()).is_ok());
    module.formats[0].text = "%s-%*b".into();
    let text = errors(&module, &s.map);
    assert!(
        text.contains("unsupported: %*b in a sprintf format in kernel probes"),
        "{text}"
    );
}

#[test]
fn too_much_stack_names_the_probe() {
    // 60 longs all live at the end: 176 + 8 * 56 > 512.
    let count = 60;
    let mut ops: Vec<Op> = (0..count)
        .map(|i| Op::ContextArg {
            dst: Reg(i),
            index: i % 4,
        })
        .collect();
    ops.push(Op::Move {
        dst: Reg(count),
        src: Reg(0),
    });
    for i in 1..count {
        ops.push(Op::Binary {
            dst: Reg(count),
            op: ir::BinOp::Add,
            lhs: Reg(count),
            rhs: Reg(i),
        });
    }
    let (module, map) = with_ops(vec![ValType::Long; count as usize + 1], ops);
    let text = errors(&module, &map);
    assert!(
        text.contains("probe kernel.trace(\"skb:kfree_skb\") needs")
            && text.contains("bytes of BPF stack"),
        "{text}"
    );
}

#[test]
fn out_of_bounds_test_switch_marks_the_first_statement() {
    let s = sample("counter");
    let object = bpf::compile(
        &s.module,
        &Options {
            test_out_of_bounds: true,
            ..options()
        },
    )
    .unwrap();
    let program = &object.programs[0];
    let at = (0..program.insns.len())
        .find(|i| bpf::insn::disassemble(&program.insns, *i) == "r0 = *(u64 *)(r10 - 520)")
        .expect("the out-of-bounds read is emitted");
    let span = program
        .lines
        .iter()
        .rev()
        .find(|(i, _)| *i <= at)
        .unwrap()
        .1;
    assert_eq!(s.map.text(span), "drops[$location] <<< 1");
}

// ----- objects -----

#[test]
fn maps_follow_the_layout() {
    let s = sample("classic_user_string");
    let object: Object = bpf::compile(&s.module, &options()).unwrap();
    let opens = &object.maps[0];
    assert_eq!(
        opens.role,
        MapRole::Global(stap_lang::sema::hir::GlobalId(0))
    );
    assert_eq!(
        (opens.map_type, opens.key_size, opens.value_size),
        (1, 64, 8)
    );
    assert_eq!(opens.flags, 0, "preallocated");
    assert!(matches!(
        object.programs[0].attach,
        AttachKind::Tracepoint { ref system, ref name } if system == "syscalls" && name == "sys_enter_openat"
    ));
    let profile = bpf::compile(&sample("profile_counter").module, &options()).unwrap();
    assert_eq!(
        profile.programs[0].attach,
        AttachKind::PerfEvent {
            perf_type: 1,
            config: 0,
            sample_period: 4_000_000,
            frequency: false,
            every_cpu: true,
            chain: Default::default(),
        }
    );
    for program in object.programs.iter().chain(&profile.programs) {
        assert!(program.name.len() <= 15);
        assert!(program.stack_bytes <= 512);
    }
}

fn lower(script: &str) -> (Module, SourceMap) {
    stap_lang::testing::lower_script(script, &FakeKernel::like_this_host())
}

#[test]
fn the_seed_script_compiles_with_its_function_inlined() {
    let script = std::fs::read_to_string("../examples/drops.stp").unwrap();
    let (module, map) = lower(&script);
    let object =
        bpf::compile(&module, &options()).unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    assert_eq!(
        object.programs.len(),
        1,
        "only the kfree_skb probe is kernel"
    );
    assert_eq!(
        object.programs[0].attach,
        AttachKind::RawTracepoint {
            name: "kfree_skb".into()
        }
    );
    // devname()'s sprintf("%s", ...) goes through the formats map.
    let formats = object
        .maps
        .iter()
        .find_map(|m| match &m.role {
            MapRole::Formats(data) => Some(data.clone()),
            _ => None,
        })
        .expect("a formats map");
    assert!(formats.starts_with(b"%s\0"));
    let listing = bpf::listing(&object, &map);
    assert!(listing.contains("call snprintf#165"), "{listing}");
    assert!(
        listing.contains("; script.stp:7"),
        "devname's lines are cited"
    );
}

// ----- records -----

fn le32(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn decode_printf_record() {
    let s = sample("printf");
    // "%s %d %s\n": text "bash", long 42, symbol 0xffffffff81000000.
    let mut bytes = le32(&[records::KIND_PRINTF, 0, 0, 0]);
    bytes.extend(le32(&[records::TAG_TEXT, 4]));
    bytes.extend(b"bash\0\0\0\0");
    bytes.extend(42i64.to_le_bytes());
    bytes.extend(le32(&[records::TAG_SYMNAME, 8]));
    bytes.extend(0xffff_ffff_8100_0000u64.to_le_bytes());
    let len = bytes.len() as u32;
    bytes[12..16].copy_from_slice(&len.to_le_bytes());
    let record = records::decode(&bytes, &s.module, 64).unwrap();
    assert_eq!(
        record.body,
        records::RecordBody::Printf {
            format: ir::FormatId(0),
            args: vec![
                records::Arg::Str(b"bash"),
                records::Arg::Long(42),
                records::Arg::Symbol {
                    addr: 0xffff_ffff_8100_0000,
                    how: ir::SymbolText::Name
                },
            ]
        }
    );
}

#[test]
fn decode_rejects_malformed_records() {
    let s = sample("printf");
    assert!(matches!(
        records::decode(&[1, 2, 3], &s.module, 64),
        Err(records::DecodeError::Truncated { .. })
    ));
    let unknown = le32(&[99, 0, 0, 16]);
    assert_eq!(
        records::decode(&unknown, &s.module, 64),
        Err(records::DecodeError::UnknownKind(99))
    );
    // A text length past MAXSTRINGLEN.
    let mut long_text = le32(&[records::KIND_PRINTF, 0, 0, 0, records::TAG_TEXT, 1000]);
    long_text.resize(64, 0);
    long_text[12..16].copy_from_slice(&64u32.to_le_bytes());
    assert_eq!(
        records::decode(&long_text, &s.module, 64),
        Err(records::DecodeError::BadLength(1000))
    );
    // A header whose length runs past the bytes.
    let short = le32(&[records::KIND_EXIT, 0, 0, 64]);
    assert!(records::decode(&short, &s.module, 64).is_err());
}

#[test]
fn decode_exit_and_error_records() {
    let s = sample("division");
    let exit = le32(&[records::KIND_EXIT, 0, 3, 16]);
    let record = records::decode(&exit, &s.module, 64).unwrap();
    assert_eq!((record.probe, record.body), (3, records::RecordBody::Exit));
    let mut error = le32(&[
        records::KIND_ERROR,
        records::ERROR_KERNEL_READ,
        0,
        40,
        0,
        5,
        9,
        0,
    ]);
    error.extend(0x1060u64.to_le_bytes());
    let record = records::decode(&error, &s.module, 64).unwrap();
    let records::RecordBody::Error { kind, span } = record.body else {
        panic!()
    };
    assert_eq!(kind, records::ErrorKind::KernelRead(0x1060));
    assert_eq!((span.start, span.end), (5, 9));
    assert_eq!(kind.message(), "kernel read fault at 0x1060");
}

const KERNEL_FOREACH: &str = "global a, names\nprobe kernel.trace(\"sys_enter\") {\n  a[$id] += 1\n  names[execname(), $id] = pid()\n  s = 0\n  foreach ([k] in a limit 3) {\n    s += k + a[k]\n    if (k == 1) break\n  }\n  foreach (v = [c, i] in names) s += v + i\n  printf(\"%d\\n\", s)\n}\n";

#[test]
fn listing_kernel_foreach_callbacks() {
    let (module, map) = lower(KERNEL_FOREACH);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    let program = &object.programs[0];
    assert!(program.needs_btf());
    let starts: Vec<u32> = program.func_info.iter().map(|f| f.insn_off).collect();
    assert_eq!(
        starts.len(),
        4,
        "the handler, two callbacks and the output flush subprogram"
    );
    assert_eq!(program.plain_subprograms, 1);
    assert!(program.stack_bytes <= 512);
    insta::assert_snapshot!(bpf::listing(&object, &map));
}

#[test]
fn program_btf_func_info_and_line_info() {
    let script = "global a\nprobe kernel.trace(\"sys_enter\") {\n  a[$id] += 1\n  foreach ([k] in a) {\n    if (k == 0) break\n  }\n}\n";
    let (module, map) = lower(script);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    let mut dump = bpf::btf::dump(&object.btf);
    for program in &object.programs {
        dump.push_str(&format!("func_info of {}:\n", program.name));
        for f in &program.func_info {
            dump.push_str(&format!("  insn {} -> [{}]\n", f.insn_off, f.type_id));
        }
        dump.push_str("line_info:\n");
        for l in &program.line_info {
            dump.push_str(&format!(
                "  insn {} {}:{}:{} {:?}\n",
                l.insn_off,
                bpf::btf::string_at(&object.btf, l.file_name_off),
                l.line,
                l.column,
                bpf::btf::string_at(&object.btf, l.line_off)
            ));
        }
        // Every BPF function starts with a line record (the kernel insists).
        for f in &program.func_info {
            assert!(program.line_info.iter().any(|l| l.insn_off == f.insn_off));
        }
        assert!(
            program
                .line_info
                .windows(2)
                .all(|w| w[0].insn_off < w[1].insn_off)
        );
    }
    insta::assert_snapshot!(dump);
}

#[test]
fn without_the_source_there_is_func_info_but_no_line_info() {
    let (module, _) = lower(KERNEL_FOREACH);
    let object = bpf::compile(&module, &options()).unwrap();
    assert!(!object.btf.is_empty());
    assert_eq!(object.programs[0].func_info.len(), 4);
    assert!(object.programs[0].line_info.is_empty());
}

#[test]
fn return_from_a_kernel_foreach_in_an_inlined_function_leaves_the_loop() {
    let script = "global a\nfunction find(x) {\n  foreach ([k] in a) if (a[k] == x) return k\n  return -1\n}\nprobe kernel.trace(\"sys_enter\") {\n  a[$id] = $id\n  printf(\"%d\\n\", find(39))\n}\n";
    let (module, map) = lower(script);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    let listing = bpf::listing(&object, &map);
    // The callback stops with "escape 0" (2); the handler dispatches on it.
    assert!(listing.contains("= 2\n"), "{listing}");
    assert!(listing.contains("if r1 == 2 goto"), "{listing}");
}

// ----- %m/%M in a kernel printf -----

/// Memory at a `%m`/`%M` address goes into the record: after a string
/// (a running offset), with a fixed, a `*` and a default precision, and
/// `%#m` reading user memory.
const PRINTF_MEMORY: &str = "probe kernel.trace(\"sys_enter\") {\n  printf(\"%s %.4m %.*M %#m\\n\", execname(), $id, 3, $id, $id)\n}\n";

#[test]
fn listing_printf_copies_memory_into_the_record() {
    let (module, map) = lower(PRINTF_MEMORY);
    let object =
        bpf::compile(&module, &options()).unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    let listing = bpf::listing(&object, &map);
    // %.4m's and %.*M's reads (execname()'s padding to MAXSTRINGLEN 64
    // is a few stores, not a helper call).
    assert_eq!(
        listing.matches("call probe_read_kernel#").count(),
        2,
        "{listing}"
    );
    assert_eq!(
        listing.matches("call probe_read_user#").count(),
        1,
        "{listing}"
    );
    insta::assert_snapshot!(listing);
}

#[test]
fn decode_printf_memory_record() {
    use stap_lang::printf;
    let (module, _) = lower(PRINTF_MEMORY);
    let record = |third: u32| {
        let mut bytes = le32(&[records::KIND_PRINTF, 0, 0, 0]);
        bytes.extend(le32(&[records::TAG_TEXT, 4]));
        bytes.extend(b"bash\0\0\0\0");
        bytes.extend(le32(&[records::TAG_MEMORY, 4]));
        bytes.extend(b"abcd\0\0\0\0");
        bytes.extend(3i64.to_le_bytes());
        bytes.extend(le32(&[third, 3]));
        bytes.extend([0x01, 0xab, 0xff, 0, 0, 0, 0, 0]);
        bytes.extend(le32(&[records::TAG_MEMORY, 1]));
        bytes.extend(b"z\0\0\0\0\0\0\0");
        let len = bytes.len() as u32;
        bytes[12..16].copy_from_slice(&len.to_le_bytes());
        bytes
    };
    let bytes = record(records::TAG_MEMORY);
    let decoded = records::decode(&bytes, &module, 64).unwrap();
    let records::RecordBody::Printf { format, args } = decoded.body else {
        panic!("{decoded:?}")
    };
    assert_eq!(
        args,
        [
            records::Arg::Str(b"bash"),
            records::Arg::Str(b"abcd"),
            records::Arg::Long(3),
            records::Arg::Str(&[0x01, 0xab, 0xff]),
            records::Arg::Str(b"z"),
        ]
    );
    // The host formats the copied bytes as it would memory it read itself.
    let pieces = printf::parse(&module.formats[format.0 as usize].text).unwrap();
    let values: Vec<_> = args.iter().map(|a| a.as_value().unwrap()).collect();
    let mut out = Vec::new();
    printf::format(&pieces, &values, &mut out).unwrap();
    assert_eq!(out, b"bash abcd 01abff z\n");
    // The memory must carry its own tag and fit MAXSTRINGLEN.
    assert_eq!(
        records::decode(&record(records::TAG_TEXT), &module, 64),
        Err(records::DecodeError::BadTag(records::TAG_TEXT))
    );
    let mut too_long = le32(&[records::KIND_PRINTF, 0, 0, 0, records::TAG_TEXT, 0]);
    too_long.extend(le32(&[records::TAG_MEMORY, 65]));
    too_long.resize(200, 0);
    too_long[12..16].copy_from_slice(&200u32.to_le_bytes());
    assert_eq!(
        records::decode(&too_long, &module, 64),
        Err(records::DecodeError::BadLength(65))
    );
}

// ----- whole-array delete in a kernel probe -----

/// `delete` of a hash array, an LRU array, a statistics array (one shared
/// `bpf_for_each_map_elem` callback that deletes each key) and a scalar
/// statistic (zeroed on every CPU).
const KERNEL_DELETE: &str = "global a, b%[8], s, t\nprobe kernel.trace(\"sys_enter\") {\n  a[$id] = 1\n  b[$id] = 2\n  s[$id] <<< 3\n  t <<< 4\n  delete a\n  delete b\n  delete s\n  delete t\n}\n";

#[test]
fn listing_kernel_delete_whole_arrays() {
    let (module, map) = lower(KERNEL_DELETE);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    let program = &object.programs[0];
    assert_eq!(
        program.func_info.len(),
        2,
        "the handler and one delete callback"
    );
    assert!(program.stack_bytes <= 512);
    insta::assert_snapshot!(bpf::listing(&object, &map));
}

/// `print`/`println` of histograms in a kernel probe: a record naming the
/// statistic, with the element's key copied in (long key on the stack,
/// string key in scratch, no key).
const KERNEL_PRINT_HIST: &str = "global s, n, t\nprobe kernel.trace(\"sys_enter\") {\n  s[$id] <<< $id\n  n[execname()] <<< 1\n  t <<< 2\n  print(@hist_log(s[$id]))\n  println(@hist_linear(n[execname()], 0, 10, 2))\n  print(@hist_log(t))\n}\n";

#[test]
fn listing_kernel_print_hist_records() {
    let (module, map) = lower(KERNEL_PRINT_HIST);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    insta::assert_snapshot!(bpf::listing(&object, &map));
}

#[test]
fn hist_record_decodes_the_key() {
    let (module, _) = lower(KERNEL_PRINT_HIST);
    let n = module.globals.iter().position(|g| g.name == "n").unwrap() as u32;
    let mut bytes = le32(&[
        records::KIND_HIST,
        n,
        0,
        16 + 8 + 64,
        records::HIST_LINEAR,
        0,
    ]);
    let mut key = b"cat".to_vec();
    key.resize(64, 0);
    bytes.extend(key);
    let record = records::decode(&bytes, &module, 64).unwrap();
    assert_eq!(
        record.body,
        records::RecordBody::Hist {
            global: stap_lang::sema::hir::GlobalId(n),
            linear: true,
            keys: vec![records::Arg::Str(b"cat")],
        }
    );
    let s = module.globals.iter().position(|g| g.name == "s").unwrap() as u32;
    let mut bytes = le32(&[records::KIND_HIST, s, 0, 16 + 8 + 8, records::HIST_LOG, 0]);
    bytes.extend((-3i64).to_le_bytes());
    let record = records::decode(&bytes, &module, 64).unwrap();
    let records::RecordBody::Hist { keys, linear, .. } = record.body else {
        panic!()
    };
    assert_eq!((keys, linear), (vec![records::Arg::Long(-3)], false));
    let bad = le32(&[records::KIND_HIST, 999, 0, 24, 0, 0]);
    assert_eq!(
        records::decode(&bad, &module, 64),
        Err(records::DecodeError::UnknownGlobal(999))
    );
}

/// `@variance` in a kernel probe: a first pass over the CPUs for count and
/// sum, a second combining each CPU's Welford state (`variance_combine`).
#[test]
fn listing_kernel_variance_combines_cpus() {
    let script = "global s\nprobe kernel.trace(\"sys_enter\") {\n  s <<< $id\n  printf(\"%d\\n\", @variance(s, 1))\n}\n";
    let (module, map) = lower(script);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    insta::assert_snapshot!(bpf::listing(&object, &map));
}

/// The kprobe programs of a script against the fake 6.18 kernel (fentry
/// and kprobes), with or without kprobe_multi.
fn kprobe_programs(script: &str, multi: bool) -> Vec<AttachKind> {
    kprobe_programs_on(script, multi, &FakeKernel::new())
}

fn kprobe_programs_on(script: &str, multi: bool, facts: &FakeKernel) -> Vec<AttachKind> {
    let (module, map) = stap_lang::testing::lower_script(script, facts);
    let mut options = options();
    options.kernel.kprobe_multi = multi;
    let object =
        bpf::compile(&module, &options).unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    object.programs.into_iter().map(|p| p.attach).collect()
}

#[test]
fn a_wildcard_whose_code_does_not_depend_on_the_function_shares_one_program() {
    let attach = kprobe_programs(r#"global n probe kernel.function("tcp_*") { n++ }"#, true);
    let [
        AttachKind::Kprobes {
            functions,
            is_return: false,
            multi: true,
            ..
        },
    ] = attach.as_slice()
    else {
        panic!("one shared program: {attach:?}");
    };
    assert!(functions.len() > 5, "{functions:?}");
    assert!(functions.contains(&"tcp_sendmsg".to_string()));
}

/// para-callgraph.stp's handlers: `$$parms` and `$$return` list different
/// arguments per function, yet each direction is one program, which finds
/// its function's list through the attach cookie (one row per function).
#[test]
fn bulk_lists_that_differ_per_function_share_one_program() {
    let script = r#"
        function trace(entry_p, extra) {
          printf("%d%s%s %s\n", tid(), (entry_p>0?"->":"<-"), ppfunc(), extra)
        }
        probe kernel.function("tcp_*").call { trace(1, $$parms) }
        probe kernel.function("tcp_*").return { trace(-1, $$return) }
    "#;
    for multi in [true, false] {
        let (module, map) = stap_lang::testing::lower_script(script, &FakeKernel::new());
        let mut options = options();
        options.kernel.kprobe_multi = multi;
        let object = bpf::compile(&module, &options)
            .unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
        let sets: Vec<(&Vec<String>, &Vec<u64>, bool)> = object
            .programs
            .iter()
            .map(|p| match &p.attach {
                AttachKind::Kprobes {
                    functions,
                    cookies,
                    is_return,
                    ..
                } => (functions, cookies, *is_return),
                other => panic!("one shared program per direction: {other:?}"),
            })
            .collect();
        let [(calls, call_rows, false), (returns, return_rows, true)] = sets.as_slice() else {
            panic!("two programs: {sets:?}");
        };
        assert!(calls.len() > 5 && calls.len() == returns.len(), "{calls:?}");
        assert_eq!(call_rows.len(), calls.len());
        assert_eq!(return_rows.len(), returns.len());
        let mut distinct = call_rows.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), call_rows.len(), "a row per function");
        let listing = bpf::listing(&object, &map);
        assert!(listing.contains("get_attach_cookie"), "{listing}");
    }
}

#[test]
fn ppfunc_in_a_shared_program_is_computed_from_the_address() {
    let script = r#"probe kernel.function("tcp_*").return { printf("%s %s\n", ppfunc(), pn()) }"#;
    let (module, map) = stap_lang::testing::lower_script(script, &FakeKernel::new());
    let mut options = options();
    options.kernel.kprobe_multi = false;
    let object =
        bpf::compile(&module, &options).unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    assert_eq!(object.programs.len(), 1, "one program for every function");
    assert!(matches!(
        object.programs[0].attach,
        AttachKind::Kprobes {
            is_return: true,
            multi: false,
            ..
        }
    ));
    let listing = bpf::listing(&object, &map);
    assert!(listing.contains("get_func_ip"), "{listing}");
    assert!(
        listing.contains("snprintf"),
        "symname through %ps: {listing}"
    );
}

#[test]
fn handlers_that_read_arguments_of_different_types_keep_their_own_programs() {
    // `$sk` is the first argument of some tcp_* functions and absent from
    // others, so the code differs between functions.
    let attach = kprobe_programs(
        r#"probe kernel.function("tcp_*") { println(@choose_defined($sk, 0)) }"#,
        true,
    );
    assert!(attach.len() > 1, "{attach:?}");
    // pp() names each point: never shared.
    let attach = kprobe_programs(r#"probe kernel.function("tcp_*") { println(pp()) }"#, true);
    assert!(
        attach
            .iter()
            .all(|a| matches!(a, AttachKind::Kprobe { .. })),
        "{attach:?}"
    );
}

/// `=~` in a kernel probe: a pattern the DFA builder refuses and one that
/// is not a literal are errors at their line; `str_replace` with a search
/// string that is not a literal is unsupported, naming the argument.
#[test]
fn kernel_regex_and_string_loop_diagnostics() {
    let script = "probe kernel.trace(\"sys_enter\") {\n  p = execname()\n  if (p =~ \"a(b\") println(1)\n  if (execname() =~ p) println(2)\n  println(str_replace(p, p, \"x\"))\n}\n";
    let (module, map) = lower(script);
    let diags = bpf::compile_with_source(&module, &options(), &map).expect_err("must refuse");
    insta::assert_snapshot!(render_plain(&map, &diags));
}

/// A kernel `=~` walks its DFA table from the formats map; `text_str` and
/// `str_replace` run as `bpf_loop` callbacks, each its own BPF function.
#[test]
fn listing_kernel_regex_and_string_loops() {
    let script = "probe kernel.trace(\"sys_enter\") {\n  e = execname()\n  if (e =~ \"^(ba|z)sh$\") println(text_str(str_replace(e, \"sh\", \"\\n\")))\n}\n";
    let (module, map) = lower(script);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    let program = &object.programs[0];
    assert_eq!(
        program.func_info.len(),
        4,
        "the handler, two loop callbacks and the output flush subprogram"
    );
    assert!(program.stack_bytes <= 512);
    insta::assert_snapshot!(bpf::listing(&object, &map));
}

/// A function known only by its compiler clones is probed on each clone
/// symbol, in a program of its own: a shared program's `ppfunc()` would
/// name the clone, not the function.
#[test]
fn a_function_known_by_its_clones_attaches_to_each_clone() {
    let mut lines: Vec<String> = FakeKernel::new()
        .function_names()
        .expect("names")
        .into_iter()
        .filter(|n| n != "tcp_close")
        .collect();
    lines.extend([
        "tcp_close.isra.0".to_string(),
        "tcp_close.constprop.0".to_string(),
    ]);
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let facts = FakeKernel::new().with_traceable(&lines);
    let attach = kprobe_programs_on(
        r#"global n probe kernel.function("tcp_*") { n++; println(ppfunc()) }"#,
        true,
        &facts,
    );
    let sets: Vec<&Vec<String>> = attach
        .iter()
        .map(|a| match a {
            AttachKind::Kprobes {
                functions,
                multi: true,
                ..
            } => functions,
            other => panic!("a kprobe_multi set: {other:?}"),
        })
        .collect();
    let [first, second] = sets.as_slice() else {
        panic!("the shared program and the clones' own: {attach:?}");
    };
    let (clones, shared) = if first[0].starts_with("tcp_close") {
        (first, second)
    } else {
        (second, first)
    };
    assert!(
        !shared.iter().any(|f| f.starts_with("tcp_close")),
        "{shared:?}"
    );
    assert_eq!(*clones, &["tcp_close.constprop.0", "tcp_close.isra.0"]);
    let one = FakeKernel::new().with_traceable(&["tcp_close.isra.0"]);
    let attach = kprobe_programs_on(r#"probe kernel.function("tcp_close") { }"#, true, &one);
    assert!(
        matches!(attach.as_slice(), [AttachKind::Kprobe { function, .. }] if function == "tcp_close.isra.0"),
        "{attach:?}"
    );
}

/// Each program's perf event and its place in a chain of programs sharing
/// one event, a line per program, then the chain map's size.
fn perf_sharing(script: &str) -> String {
    let (module, map) = lower(script);
    let object =
        bpf::compile(&module, &options()).unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    let mut out = String::new();
    for program in &object.programs {
        let AttachKind::PerfEvent {
            every_cpu, chain, ..
        } = &program.attach
        else {
            continue;
        };
        let tail_calls = (0..program.insns.len())
            .filter(|i| bpf::insn::disassemble(&program.insns, *i).contains("tail_call"))
            .count();
        out.push_str(&format!(
            "probe {}: {}{} slot {:?} next {:?} ({tail_calls} tail call)\n",
            program.probe,
            program.attach.point_text(),
            if *every_cpu { " every cpu" } else { "" },
            chain.slot,
            chain.next,
        ));
    }
    for spec in object.maps.iter().filter(|m| m.role == MapRole::PerfChain) {
        out.push_str(&format!(
            "{}: type {} entries {}\n",
            spec.name, spec.map_type, spec.max_entries
        ));
    }
    out
}

#[test]
fn perf_probes_with_one_event_share_it_in_script_order() {
    // perf1.stp's pair (an explicit 1 ms period and the default), a third
    // of the same, a different period, the same period as a frequency,
    // and two timer.profile probes (every CPU): three chains.
    let script = "global n\n\
        probe perf.type(1).config(0).sample(1000000) { n++ }\n\
        probe perf.type(1).config(0).sample(2000000) { n++ }\n\
        probe perf.type(1).config(0) { n++ }\n\
        probe perf.type(1).config(0).hz(1000000) { n++ }\n\
        probe timer.profile { n++ }\n\
        probe perf.type(1).config(0).sample(1000000) { printf(\"%s\\n\", pp()) }\n\
        probe timer.profile { n++ }\n";
    insta::assert_snapshot!(perf_sharing(script));
}

#[test]
fn a_perf_chain_stays_within_the_kernel_tail_call_limit() {
    let mut script = String::from("global n\n");
    for _ in 0..40 {
        script.push_str("probe perf.type(1).config(0).sample(5000000) { n++ }\n");
    }
    let listing = perf_sharing(&script);
    let leaders = listing.lines().filter(|l| l.contains("slot None")).count();
    let ends = listing.lines().filter(|l| l.contains("next None")).count();
    // 40 programs: a chain of 32 and one of 8, each with its own event.
    assert_eq!((leaders, ends), (2, 2), "{listing}");
    assert!(
        listing.ends_with("stap_perfchain: type 3 entries 38\n"),
        "{listing}"
    );
}

/// String registers that are short and only feed map keys live on the
/// stack (`plan_stack_strings`): no nesting level, no per-CPU scratch
/// lookup, the key built in the frame. A string used any other way (here
/// printed) keeps the scratch region.
const STACK_STRING_KEYS: &str = "global c, s, d\nprobe kernel.trace(\"sys_enter\") {\n  c[execname()]++\n  s[execname()] <<< 1\n  d[\"lit\"] = $id\n}\n";

#[test]
fn listing_short_string_keys_on_the_stack() {
    let (module, map) = lower(STACK_STRING_KEYS);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    let listing = bpf::listing(&object, &map);
    let handler = listing.split("program ").nth(1).expect("one program");
    assert!(!handler.contains("stap_scratch"), "{handler}");
    insta::assert_snapshot!(listing);

    let printed = STACK_STRING_KEYS.replace("  d[", "  printf(\"%s\\n\", execname())\n  d[");
    let (module, map) = lower(&printed);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    let listing = bpf::listing(&object, &map);
    assert!(listing.contains("map[stap_scratch]"), "{listing}");
}

/// Speculative output in a kernel probe: `speculation()` as an atomic
/// fetch-add on the control map's counter, `speculate` a record with the
/// id and the text, `commit`/`discard` small records with the id.
const KERNEL_SPECULATION: &str = "probe kernel.trace(\"sys_enter\") {\n  id = speculation()\n  speculate(id, execname())\n  if ($id) commit(id) else discard(id)\n}\n";

#[test]
fn listing_kernel_speculation_records() {
    let (module, map) = lower(KERNEL_SPECULATION);
    let object = bpf::compile_with_source(&module, &options(), &map)
        .unwrap_or_else(|d| panic!("{}", render_plain(&map, &d)));
    insta::assert_snapshot!(bpf::listing(&object, &map));
}

#[test]
fn speculation_records_decode() {
    let (module, _) = lower(KERNEL_SPECULATION);
    let mut bytes = le32(&[
        records::KIND_SPECULATION,
        records::SPECULATE_ADD,
        0,
        16 + 8 + 8 + 8,
        7,
        0,
        records::TAG_TEXT,
        3,
    ]);
    bytes.extend(b"cat\0\0\0\0\0");
    let record = records::decode(&bytes, &module, 64).unwrap();
    assert_eq!(
        record.body,
        records::RecordBody::Speculation {
            op: records::SPECULATE_ADD,
            id: 7,
            text: Some(b"cat"),
        }
    );
    let mut bytes = le32(&[records::KIND_SPECULATION, records::SPECULATE_COMMIT, 0, 24]);
    bytes.extend((-2i64).to_le_bytes());
    let record = records::decode(&bytes, &module, 64).unwrap();
    assert_eq!(
        record.body,
        records::RecordBody::Speculation {
            op: records::SPECULATE_COMMIT,
            id: -2,
            text: None,
        }
    );
}
