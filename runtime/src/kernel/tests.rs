//! Tests of [`BtfKernel`] over BTF blobs written on the spot.

use super::types::builtin_int;
use super::*;
use stap_lang::bpf::btf::*;
use stap_lang::kernel::find_member;

/// A small vmlinux: see the ids in the comments.
fn vmlinux_blob() -> BtfWriter {
    let mut b = BtfWriter::new();
    let int = b.int("int", 4, INT_SIGNED); // 1
    let char_ = b.int("char", 1, INT_SIGNED | INT_CHAR); // 2
    let uint = b.int("unsigned int", 4, 0); // 3
    b.int("long unsigned int", 8, 0); // 4
    let name = b.array(char_, int, 16); // 5
    b.composite(
        KIND_STRUCT,
        "net_device",
        32,
        true,
        &[("name", name, 0), ("flags", uint, (3 << 24) | 128)],
    ); // 6
    let dev_ptr = b.ptr(6); // 7
    b.composite(
        KIND_STRUCT,
        "sk_buff",
        24,
        false,
        &[("dev", dev_ptr, 0), ("len", uint, 64), ("", 9, 128)],
    ); // 8
    b.composite(KIND_UNION, "", 4, false, &[("a", int, 0), ("b", uint, 0)]); // 9
    let reason = b.enumeration(
        "skb_drop_reason",
        false,
        &[("SKB_DROP_REASON_NO_SOCKET", 3)],
    ); // 10
    let skb_ptr = b.ptr(8); // 11
    let void_ptr = b.ptr(0); // 12
    let iter = b.func_proto(
        int,
        &[("__data", void_ptr), ("skb", skb_ptr), ("reason", reason)],
    ); // 13
    b.func("__traceiter_kfree_skb", iter, Linkage::Global); // 14
    let probe = b.func_proto(0, &[("", void_ptr), ("", skb_ptr), ("", reason)]); // 15
    let probe_ptr = b.ptr(probe); // 16
    b.record("btf_trace_kfree_skb", KIND_TYPEDEF, 0, false, probe_ptr); // 17
    let const_char = b.record("", KIND_CONST, 0, false, char_); // 18
    let string = b.ptr(const_char); // 19
    let send = b.func_proto(int, &[("name", string), ("size", int)]); // 20
    b.func("tcp_sendmsg", send, Linkage::Global); // 21
    b.record("u32", KIND_TYPEDEF, 0, false, uint); // 22
    b.record("opaque_u", KIND_FWD, 0, true, 0); // 23
    let callback = b.ptr(send); // 24
    let array_ptr = b.ptr(name); // 25
    b.composite(
        KIND_STRUCT,
        "ops",
        16,
        false,
        &[("cb", callback, 0), ("buf", array_ptr, 64)],
    ); // 26
    b
}

const VMLINUX_TYPES: u32 = 26;

/// Writes vmlinux and two modules' split BTF into a fresh directory.
fn kernel_on_disk(test: &str) -> BtfKernel {
    let dir = std::env::temp_dir().join(format!("stap-rs-btf-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let vmlinux = vmlinux_blob();
    let base_strings = vmlinux.finish().len() as u32 - 24 - types_len(&vmlinux);
    std::fs::write(dir.join("vmlinux"), vmlinux.finish()).expect("write vmlinux");

    let mut first = BtfWriter::split(VMLINUX_TYPES, base_strings);
    first.int("amod_int", 2, 0); // 27
    first.int("amod_int2", 2, 0); // 28
    std::fs::write(dir.join("amod"), first.finish()).expect("write amod");

    let mut module = BtfWriter::split(VMLINUX_TYPES, base_strings);
    let local = module.composite(KIND_STRUCT, "mod_state", 8, false, &[("count", 3, 0)]); // 27
    let local_ptr = module.ptr(local); // 28
    let proto = module.func_proto(1, &[("skb", 11), ("state", local_ptr)]); // 29
    module.func("mod_rx", proto, Linkage::Global); // 30
    std::fs::write(dir.join("mymod"), module.finish()).expect("write mymod");

    let kernel = BtfKernel::open_with_modules(&dir.join("vmlinux"), Some(&dir)).expect("opens");
    // Module BTF is opened lazily: open it before the files go.
    kernel.modules();
    std::fs::remove_dir_all(&dir).expect("clean up");
    kernel
}

fn types_len(b: &BtfWriter) -> u32 {
    let bytes = b.finish();
    u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"))
}

fn find(kernel: &BtfKernel, name: &str) -> TypeId {
    kernel
        .find_type(name)
        .expect("no error")
        .unwrap_or_else(|| panic!("{name} not found"))
}

#[test]
fn finds_types_by_c_spelling() {
    let k = kernel_on_disk("find");
    assert_eq!(find(&k, "struct sk_buff"), TypeId(8));
    assert_eq!(find(&k, "struct  net_device"), TypeId(6));
    assert_eq!(find(&k, "unsigned int"), TypeId(3));
    assert_eq!(find(&k, "unsigned long"), TypeId(4));
    assert_eq!(find(&k, "long unsigned int"), TypeId(4));
    assert_eq!(find(&k, "u32"), TypeId(22));
    assert_eq!(find(&k, "union opaque_u"), TypeId(23));
    assert_eq!(find(&k, "enum skb_drop_reason"), TypeId(10));
    assert_eq!(find(&k, "void"), TypeId(0));
    assert_eq!(k.find_type("struct opaque_u"), Ok(None));
    assert_eq!(k.find_type("struct no_such"), Ok(None));
    assert_eq!(k.find_type("no_such_t"), Ok(None));
    // Not in BTF: minted.
    let long_long = find(&k, "long long");
    assert!(long_long.0 >= SYNTHETIC_BASE);
    assert_eq!(
        k.kind(long_long),
        TypeKind::Int {
            bytes: 8,
            signed: true,
            is_char: false
        }
    );
    let char_ptr = find(&k, "char *");
    assert_eq!(k.kind(char_ptr), TypeKind::Pointer(TypeId(2)));
    assert_eq!(k.type_name(char_ptr), "char *");
    assert_eq!(find(&k, "char*"), char_ptr, "minted once");
}

#[test]
fn kinds_peel_typedefs_and_qualifiers() {
    let k = kernel_on_disk("kinds");
    assert_eq!(
        k.kind(TypeId(22)),
        TypeKind::Int {
            bytes: 4,
            signed: false,
            is_char: false
        }
    );
    assert_eq!(
        k.kind(TypeId(18)),
        TypeKind::Int {
            bytes: 1,
            signed: true,
            is_char: true
        }
    );
    assert_eq!(k.kind(TypeId(7)), TypeKind::Pointer(TypeId(6)));
    assert_eq!(
        k.kind(TypeId(5)),
        TypeKind::Array {
            elem: TypeId(2),
            len: 16
        }
    );
    assert_eq!(
        k.kind(TypeId(10)),
        TypeKind::Enum {
            name: "skb_drop_reason".into(),
            bytes: 4,
            signed: false
        }
    );
    assert_eq!(
        k.kind(TypeId(9)),
        TypeKind::Struct {
            name: String::new(),
            size: 4,
            is_union: true
        }
    );
    assert_eq!(
        k.kind(TypeId(23)),
        TypeKind::Opaque {
            name: "union opaque_u".into()
        }
    );
    assert_eq!(k.kind(TypeId(0)), TypeKind::Void);
    assert!(matches!(k.kind(TypeId(9999)), TypeKind::Opaque { .. }));
}

#[test]
fn spells_c_types() {
    let k = kernel_on_disk("spell");
    let spelled: Vec<String> = [7, 5, 19, 24, 25, 22, 23, 9, 12, 16, 0]
        .into_iter()
        .map(|id| k.type_name(TypeId(id)))
        .collect();
    assert_eq!(
        spelled,
        [
            "struct net_device *",
            "char[16]",
            "const char *",
            "int (*)(const char *, int)",
            "char (*)[16]",
            "u32",
            "union opaque_u",
            "union {...}",
            "void *",
            "void (*)(void *, struct sk_buff *, enum skb_drop_reason)",
            "void",
        ]
    );
}

#[test]
fn members_with_bitfields_and_anonymous_unions() {
    let k = kernel_on_disk("members");
    let dev = k.members(TypeId(6));
    assert_eq!(dev[1].name, "flags");
    assert_eq!((dev[1].bit_offset, dev[1].bitfield_bits), (128, Some(3)));
    let skb = TypeId(8);
    let b = find_member(&k, skb, "b").expect("through the anonymous union");
    assert_eq!((b.bit_offset, b.ty), (128, TypeId(3)));
    assert_eq!(find_member(&k, skb, "dev").map(|m| m.ty), Some(TypeId(7)));
    assert!(k.members(TypeId(3)).is_empty());
    assert_eq!(
        k.struct_names(),
        ["mod_state", "net_device", "ops", "sk_buff"]
    );
}

#[test]
fn raw_tracepoint_args_take_names_from_traceiter_and_types_from_typedef() {
    let k = kernel_on_disk("tracepoint");
    let params = k
        .raw_tracepoint_args("kfree_skb")
        .expect("no error")
        .expect("found");
    let got: Vec<_> = params.iter().map(|p| (p.name.as_str(), p.ty)).collect();
    assert_eq!(got, [("skb", TypeId(11)), ("reason", TypeId(10))]);
    assert_eq!(k.raw_tracepoint_args("nope"), Ok(None));
}

#[test]
fn functions_from_vmlinux_and_modules() {
    let k = kernel_on_disk("functions");
    let send = k.function("tcp_sendmsg").expect("no error").expect("found");
    assert_eq!(send.module, None);
    assert_eq!(send.ret, Some(TypeId(1)));
    assert_eq!(send.params[0].name, "name");

    let rx = k
        .function("mod_rx")
        .expect("no error")
        .expect("found in a module");
    assert_eq!(rx.module.as_deref(), Some("mymod"));
    // amod's two types take 27..=28, so mymod's start at 29.
    assert_eq!(rx.params[0].ty, TypeId(11), "a vmlinux type keeps its id");
    let state_ptr = rx.params[1].ty;
    assert_eq!(state_ptr, TypeId(29 + 1));
    assert_eq!(k.type_name(state_ptr), "struct mod_state *");
    let TypeKind::Pointer(state) = k.kind(state_ptr) else {
        panic!("not a pointer")
    };
    assert_eq!(state, TypeId(29));
    assert_eq!(k.members(state)[0].ty, TypeId(3));
    assert_eq!(k.module_names(), ["amod", "mymod"]);
    assert_eq!(
        k.function_names().expect("names"),
        ["__traceiter_kfree_skb", "mod_rx", "tcp_sendmsg"]
    );
    assert_eq!(k.function("nope"), Ok(None));
}

#[test]
fn enum_values_by_name() {
    let k = kernel_on_disk("enums");
    assert_eq!(
        k.enum_values("skb_drop_reason"),
        Ok(Some(vec![("SKB_DROP_REASON_NO_SOCKET".to_string(), 3)]))
    );
    assert_eq!(k.enum_values("nope"), Ok(None));
}

#[test]
fn missing_btf_says_what_still_works() {
    let err = BtfKernel::open(Path::new("/nonexistent/vmlinux")).expect_err("missing");
    let message = err.to_string();
    for needed in [
        "/nonexistent/vmlinux",
        "kernel.trace",
        "kernel.function",
        "@cast",
        "$var->field",
        "begin",
        "timer",
        "process(...)",
    ] {
        assert!(message.contains(needed), "`{message}` lacks `{needed}`");
    }
    let k = BtfKernel::without_btf();
    let facts_error = k.find_type("struct sk_buff").expect_err("needs BTF");
    assert!(facts_error.0.contains("@cast"));
    assert!(k.function("tcp_sendmsg").is_err());
    assert!(k.tracepoint(None, "kfree_skb").is_err());
    assert!(k.struct_names().is_empty());
    // Plain integers need no BTF.
    let int = find(&k, "unsigned int");
    assert_eq!(
        k.kind(int),
        TypeKind::Int {
            bytes: 4,
            signed: false,
            is_char: false
        }
    );
}

#[test]
fn corrupt_btf_file_is_an_open_error() {
    let path = std::env::temp_dir().join(format!("stap-rs-btf-{}-corrupt", std::process::id()));
    std::fs::write(&path, b"not btf at all, just text").expect("write");
    let err = BtfKernel::open(&path).expect_err("corrupt");
    std::fs::remove_file(&path).expect("clean up");
    assert!(matches!(err, OpenError::Corrupt { .. }));
    assert!(err.to_string().contains("bad magic"), "{err}");
}

#[test]
fn classic_field_types() {
    let k = kernel_on_disk("classic");
    let field = |c_type: &str, size: u32, signed: bool| FormatField {
        name: "f".into(),
        c_type: c_type.into(),
        offset: 8,
        size,
        signed,
        is_common: false,
    };
    let name =
        |c_type: &str, size: u32| k.type_name(k.classic_field_type(&field(c_type, size, false)));
    assert_eq!(name("const char *", 8), "char *");
    assert_eq!(name("char[16]", 16), "char[16]");
    assert_eq!(name("u32", 4), "u32");
    assert_eq!(name("umode_t", 8), "umode_t");
    assert_eq!(name("__data_loc char[]", 4), "__data_loc char[]");
    let unknown = k.classic_field_type(&field("umode_t", 2, false));
    assert_eq!(
        k.kind(unknown),
        TypeKind::Int {
            bytes: 2,
            signed: false,
            is_char: false
        }
    );
}

#[test]
fn user_function_types_from_dwarf() {
    let (_dir, binary) = crate::dwarf::tests::compile("kernel", &["-g"]);
    let path = binary.to_str().expect("utf-8 temp path");
    let kernel = BtfKernel::without_btf();
    let f = kernel
        .user_function(path, "f")
        .expect("reading DWARF")
        .expect("the binary has DWARF");
    let params: Vec<(String, String)> = f
        .params
        .iter()
        .map(|p| (p.name.clone(), kernel.type_name(p.ty)))
        .collect();
    assert_eq!(
        params,
        [
            ("n".to_string(), "int".to_string()),
            ("s".to_string(), "const char *".to_string())
        ]
    );
    assert!(f.params.iter().all(|p| p.ty.0 >= SYNTHETIC_BASE));
    assert_eq!(
        kernel.kind(f.params[0].ty),
        TypeKind::Int {
            bytes: 4,
            signed: true,
            is_char: false
        }
    );
    let TypeKind::Pointer(target) = kernel.kind(f.params[1].ty) else {
        panic!("s is a pointer");
    };
    assert!(matches!(
        kernel.kind(target),
        TypeKind::Int {
            bytes: 1,
            is_char: true,
            ..
        }
    ));
    assert_eq!(f.ret.map(|r| kernel.type_name(r)).as_deref(), Some("int"));

    let g = kernel.user_function(path, "g").unwrap().unwrap();
    let names: Vec<String> = g.params.iter().map(|p| kernel.type_name(p.ty)).collect();
    assert_eq!(
        names,
        [
            "struct point *",
            "my_size",
            "char **",
            "enum color",
            "const unsigned char *",
            "int (*)(int)",
            "double"
        ]
    );
    assert_eq!(g.ret, None);
    let TypeKind::Pointer(point) = kernel.kind(g.params[0].ty) else {
        panic!("p is a pointer");
    };
    assert_eq!(
        kernel.kind(point),
        TypeKind::Struct {
            name: "point".into(),
            size: 8,
            is_union: false
        }
    );
    assert!(kernel.members(point).is_empty());
    assert!(matches!(
        kernel.kind(g.params[1].ty),
        TypeKind::Int {
            bytes: 8,
            signed: false,
            ..
        }
    ));
    assert_eq!(kernel.kind(g.params[6].ty), TypeKind::Float { bytes: 8 });

    let missing = kernel.user_function(path, "nope").unwrap_err();
    assert!(missing.0.contains("no function `nope`"), "{missing}");
    let (_stripped_dir, stripped) = crate::dwarf::tests::compile("kernel-nodebug", &[]);
    let stripped = stripped.to_str().expect("utf-8 temp path");
    assert_eq!(kernel.user_function(stripped, "f"), Ok(None));
}

#[test]
fn release_and_config_parsing() {
    let v = parse_release("6.18.44-fc-v669");
    assert_eq!((v.major, v.minor, v.patch), (6, 18, 44));
    assert_eq!(v.to_string(), "6.18.44");
    let v = parse_release("6.1-rc2");
    assert_eq!((v.major, v.minor, v.patch), (6, 1, 0));
    let config = parse_config(
        "# comment\nCONFIG_BPF=y\n# CONFIG_KPROBES is not set\nCONFIG_HZ=250\nCONFIG_LOCALVERSION=\"-x\"\n",
    );
    assert_eq!(config.get("CONFIG_BPF").map(String::as_str), Some("y"));
    assert_eq!(config.get("CONFIG_HZ").map(String::as_str), Some("250"));
    assert_eq!(
        config.get("CONFIG_LOCALVERSION").map(String::as_str),
        Some("-x")
    );
    assert_eq!(config.get("CONFIG_KPROBES"), None);
}

#[test]
fn builtin_int_spellings() {
    let canonical = |s: &str| match builtin_int(s) {
        Some(Synthetic::Int { name, bytes, .. }) => Some((name, bytes)),
        _ => None,
    };
    assert_eq!(
        canonical("unsigned long"),
        Some(("long unsigned int".into(), 8))
    );
    assert_eq!(canonical("short"), Some(("short int".into(), 2)));
    assert_eq!(
        canonical("unsigned char"),
        Some(("unsigned char".into(), 1))
    );
    assert_eq!(
        canonical("long long unsigned int"),
        Some(("long long unsigned int".into(), 8))
    );
    assert_eq!(canonical("unsigned"), Some(("unsigned int".into(), 4)));
    assert_eq!(canonical("u32"), None);
}

/// A module file as an ELF relocatable object whose `.BTF` section holds
/// `btf`, as the kernel build writes one.
fn module_elf(btf: &[u8]) -> Vec<u8> {
    use object::write::Object as ElfWriter;
    use object::{Architecture, BinaryFormat, Endianness, SectionKind};
    let mut elf = ElfWriter::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
    let section = elf.add_section(Vec::new(), b".BTF".to_vec(), SectionKind::Other);
    elf.append_section_data(section, btf, 1);
    elf.write().expect("writes ELF")
}

#[test]
fn a_module_that_is_not_loaded_is_read_from_its_file() {
    let dir = std::env::temp_dir().join(format!("stap-rs-modfile-btf-{}", std::process::id()));
    let release = dir.join("6.12.0-test");
    std::fs::create_dir_all(release.join("kernel/fs/diskmod")).expect("temp dir");
    let vmlinux = vmlinux_blob();
    let base_strings = vmlinux.finish().len() as u32 - 24 - types_len(&vmlinux);
    let mut module = BtfWriter::split(VMLINUX_TYPES, base_strings);
    let local = module.composite(KIND_STRUCT, "disk_state", 8, false, &[("count", 3, 0)]); // 27
    let local_ptr = module.ptr(local); // 28
    let proto = module.func_proto(1, &[("skb", 11), ("state", local_ptr)]); // 29
    module.func("disk_rx", proto, Linkage::Global); // 30
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &module_elf(&module.finish())).expect("gzip");
    std::fs::write(
        release.join("kernel/fs/diskmod/disk-mod.ko.gz"),
        gz.finish().expect("gzip"),
    )
    .expect("write module");

    let mut kernel = BtfKernel::assemble(
        Some(Arc::new(
            Btf::from_bytes(vmlinux.finish()).expect("vmlinux"),
        )),
        Path::new("vmlinux"),
        None,
    );
    kernel.disk = DiskModules::new(Some(release.clone()));
    assert_eq!(kernel.open_module("disk_mod"), Ok(false));
    // Opened once: the second ask reads nothing.
    std::fs::remove_dir_all(&dir).expect("clean up");
    assert_eq!(kernel.open_module("disk-mod"), Ok(false));

    let proto = kernel
        .module_function("disk_mod", "disk_rx")
        .expect("reads")
        .expect("found in the module");
    assert_eq!(proto.module.as_deref(), Some("disk_mod"));
    let params: Vec<(String, String)> = proto
        .params
        .iter()
        .map(|p| (p.name.clone(), kernel.type_name(p.ty)))
        .collect();
    assert_eq!(
        params,
        [
            ("skb".to_string(), "struct sk_buff *".to_string()),
            ("state".to_string(), "struct disk_state *".to_string()),
        ]
    );
    // A vmlinux function is not the module's.
    assert_eq!(kernel.module_function("disk_mod", "tcp_sendmsg"), Ok(None));
    assert!(kernel.function_names().unwrap().contains(&"disk_rx".into()));

    // The module directory is gone by now: the error says so.
    let missing = kernel.open_module("absent").unwrap_err();
    assert!(
        missing.contains("module `absent` is not loaded") && missing.contains("does not exist"),
        "{missing}"
    );
}

/// The 6.12 guest kernel's package, unpacked in the VM cache
/// (tests/vm/run provision), if it is there.
fn guest_kernel_dir() -> Option<PathBuf> {
    let cache = std::env::var_os("STAP_RS_VM_CACHE")
        .map_or_else(|| PathBuf::from("/var/tmp/stap-rs-vm"), PathBuf::from);
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(cache)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("k-6.12"))
        })
        .collect();
    dirs.sort();
    dirs.pop()
}

#[test]
fn nfsd_of_the_debian_kernel_package_from_its_xz_file() {
    let Some(kdir) = guest_kernel_dir() else {
        eprintln!("skipped: no 6.12 kernel package in the VM cache");
        return;
    };
    let release = kdir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("k-"))
        .expect("k-RELEASE")
        .to_string();
    let vmlinux_elf = std::fs::read(kdir.join("vmlinux")).expect("vmlinux");
    let vmlinux = crate::modfile::btf_section(&vmlinux_elf, &kdir.join("vmlinux")).expect(".BTF");
    let mut kernel = BtfKernel::assemble(
        Some(Arc::new(Btf::from_bytes(vmlinux).expect("vmlinux BTF"))),
        Path::new("vmlinux"),
        None,
    );
    kernel.disk = DiskModules::new(Some(kdir.join("lib/modules").join(&release)));
    assert_eq!(kernel.open_module("nfsd"), Ok(false));
    let proto = kernel
        .module_function("nfsd", "nfsd_unlink")
        .expect("reads")
        .expect("nfsd_unlink is in nfsd.ko");
    let params: Vec<(String, String)> = proto
        .params
        .iter()
        .map(|p| (p.name.clone(), kernel.type_name(p.ty)))
        .collect();
    assert_eq!(params[0], ("rqstp".into(), "struct svc_rqst *".into()));
    assert!(params.iter().any(|(name, _)| name == "fname"), "{params:?}");
    // Its types are the module's: svc_rqst's members are there.
    let rqstp = kernel.peel(proto.params[0].ty);
    let TypeKind::Pointer(target) = kernel.kind(rqstp) else {
        panic!("rqstp is a pointer");
    };
    assert!(
        find_member(&kernel, target, "rq_xprt").is_some(),
        "svc_rqst has rq_xprt"
    );
}
