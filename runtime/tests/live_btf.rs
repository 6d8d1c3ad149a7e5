//! Kernel facts read from this machine's own BTF and tracefs
//! (../shared/platform.md: Linux 6.18 with /sys/kernel/btf/vmlinux).

use std::sync::OnceLock;

use stap_lang::kernel::{
    KernelFacts, Member, Param, TracepointArgs, TypeId, TypeKind, find_member,
};
use stap_runtime::kernel::BtfKernel;
use stap_runtime::tracefs::{MOUNT_POINTS, Tracefs};

/// One kernel for all tests, as one stap-rs run would have.
fn kernel() -> &'static BtfKernel {
    static KERNEL: OnceLock<BtfKernel> = OnceLock::new();
    KERNEL.get_or_init(|| {
        mount_tracefs_if_absent();
        BtfKernel::open_default().unwrap_or_else(|e| panic!("{e}"))
    })
}

/// The platform notes say to mount tracefs when it is absent; a fresh
/// machine may not have it yet.
fn mount_tracefs_if_absent() {
    if Tracefs::find().is_ok() {
        return;
    }
    let target = c"/sys/kernel/tracing";
    // SAFETY: all pointers are NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            c"tracefs".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    assert_eq!(
        rc,
        0,
        "tracefs is not mounted at {MOUNT_POINTS:?} and mounting it failed: {}",
        std::io::Error::last_os_error()
    );
}

fn raw_args(system: Option<&str>, name: &str) -> (String, Vec<Param>) {
    let tp = kernel()
        .tracepoint(system, name)
        .expect("no error")
        .unwrap_or_else(|| panic!("no tracepoint {name}"));
    match tp.args {
        TracepointArgs::Raw(params) => (tp.system, params),
        TracepointArgs::Classic(_) => panic!("{name} is classic-only"),
    }
}

fn names_and_types(params: &[Param]) -> Vec<(String, String)> {
    params
        .iter()
        .map(|p| (p.name.clone(), kernel().type_name(p.ty)))
        .collect()
}

fn find(c_name: &str) -> TypeId {
    kernel()
        .find_type(c_name)
        .expect("no error")
        .unwrap_or_else(|| panic!("no {c_name}"))
}

fn member(ty: TypeId, name: &str) -> Member {
    find_member(kernel(), ty, name).unwrap_or_else(|| panic!("no member {name}"))
}

/// `stap -L`-style: the probe point and each `$arg:type`.
fn listing(system: &str, name: &str, params: &[Param]) -> String {
    let mut line = format!("kernel.trace(\"{system}:{name}\")");
    for (arg, ty) in names_and_types(params) {
        line.push_str(&format!(" ${arg}:{ty}"));
    }
    line
}

#[test]
fn kfree_skb_args_have_names_and_btf_types() {
    let (system, params) = raw_args(None, "kfree_skb");
    assert_eq!(
        system, "skb",
        "a bare name finds its system through tracefs"
    );
    let args = names_and_types(&params);
    let names: Vec<&str> = args.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["skb", "location", "reason", "rx_sk"]);
    assert_eq!(args[0].1, "struct sk_buff *");
    assert_eq!(args[2].1, "enum skb_drop_reason");
    let TypeKind::Pointer(skb) = kernel().kind(params[0].ty) else {
        panic!("$skb is not a pointer");
    };
    assert_eq!(skb, find("struct sk_buff"));
    insta::assert_snapshot!(listing(&system, "kfree_skb", &params));
}

#[test]
fn net_dev_xmit_args() {
    let (system, params) = raw_args(Some("net"), "net_dev_xmit");
    assert_eq!(system, "net");
    let names: Vec<String> = params.iter().map(|p| p.name.clone()).collect();
    assert_eq!(names, ["skb", "rc", "dev", "skb_len"]);
    assert_eq!(kernel().type_name(params[2].ty), "struct net_device *");
}

#[test]
fn a_wrong_system_is_no_tracepoint() {
    assert_eq!(kernel().tracepoint(Some("net"), "kfree_skb"), Ok(None));
    assert_eq!(kernel().tracepoint(None, "no_such_tracepoint_x"), Ok(None));
}

#[test]
fn sk_buff_dev_and_len() {
    let skb = find("struct sk_buff");
    let dev = member(skb, "dev");
    let TypeKind::Pointer(target) = kernel().kind(dev.ty) else {
        panic!("sk_buff.dev is not a pointer");
    };
    assert_eq!(target, find("struct net_device"));
    assert_eq!(kernel().type_name(dev.ty), "struct net_device *");
    let len = member(skb, "len");
    assert_eq!(
        kernel().kind(len.ty),
        TypeKind::Int {
            bytes: 4,
            signed: false,
            is_char: false
        }
    );
}

#[test]
fn net_device_name_is_a_char_array() {
    let name = member(find("struct net_device"), "name");
    assert!(name.bit_offset > 0, "name is not the first member");
    assert_eq!(name.bit_offset % 8, 0);
    assert_eq!(kernel().type_name(name.ty), "char[16]");
    let TypeKind::Array { elem, len } = kernel().kind(name.ty) else {
        panic!("net_device.name is not an array");
    };
    assert_eq!(len, 16);
    assert!(matches!(
        kernel().kind(elem),
        TypeKind::Int {
            bytes: 1,
            is_char: true,
            ..
        }
    ));
}

#[test]
fn bitfield_members_have_widths() {
    // __u8 pkt_type:3 in struct sk_buff.
    let pkt_type = member(find("struct sk_buff"), "pkt_type");
    assert_eq!(pkt_type.bitfield_bits, Some(3));
    assert_eq!(member(find("struct sk_buff"), "len").bitfield_bits, None);
}

#[test]
fn skb_drop_reason_values() {
    let values = kernel()
        .enum_values("skb_drop_reason")
        .expect("no error")
        .expect("the enum exists");
    let no_socket = values
        .iter()
        .find(|(name, _)| name == "SKB_DROP_REASON_NO_SOCKET")
        .expect("NO_SOCKET is there");
    assert!(no_socket.1 > 0);
}

#[test]
fn tcp_sendmsg_params() {
    let f = kernel()
        .function("tcp_sendmsg")
        .expect("no error")
        .expect("tcp_sendmsg is in BTF");
    assert_eq!(f.module, None);
    let params = names_and_types(&f.params);
    assert_eq!(
        params,
        [
            ("sk".to_string(), "struct sock *".to_string()),
            ("msg".to_string(), "struct msghdr *".to_string()),
            ("size".to_string(), "size_t".to_string()),
        ]
    );
    assert_eq!(f.ret.map(|r| kernel().type_name(r)).as_deref(), Some("int"));
}

#[test]
fn syscall_events_are_classic_with_tracefs_fields() {
    let tp = kernel()
        .tracepoint(Some("syscalls"), "sys_enter_openat")
        .expect("no error")
        .expect("sys_enter_openat exists");
    let TracepointArgs::Classic(fields) = tp.args else {
        panic!("syscalls have no BTF-typed raw tracepoint");
    };
    let filename = fields
        .iter()
        .find(|f| f.name == "filename")
        .expect("filename field");
    assert_eq!((filename.offset, filename.size), (24, 8));
    let TypeKind::Pointer(target) = kernel().kind(filename.ty) else {
        panic!("filename is not a pointer");
    };
    assert!(matches!(
        kernel().kind(target),
        TypeKind::Int { is_char: true, .. }
    ));
    let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["__syscall_nr", "dfd", "filename", "flags", "mode"]);
}

#[test]
fn name_lists_for_wildcards() {
    let k = kernel();
    let tracepoints = k.tracepoint_names().expect("tracefs");
    assert!(tracepoints.contains(&("skb".into(), "kfree_skb".into())));
    let functions = k.function_names().expect("BTF");
    assert!(
        functions
            .binary_search(&"tcp_v4_connect".to_string())
            .is_ok()
    );
    let structs = k.struct_names();
    assert!(structs.binary_search(&"sk_buff".to_string()).is_ok());
}

#[test]
fn module_btf_matches_sys_kernel_btf() {
    // Every file in /sys/kernel/btf but vmlinux is a module's split BTF.
    let mut on_disk: Vec<String> = std::fs::read_dir("/sys/kernel/btf")
        .expect("/sys/kernel/btf")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name != "vmlinux")
        .collect();
    on_disk.sort();
    assert_eq!(kernel().module_names(), on_disk);
    // Where a module is loaded, one of its functions resolves to it.
    for module in &on_disk {
        let path = std::path::Path::new("/sys/kernel/btf").join(module);
        let base = kernel().btf().expect("vmlinux BTF").clone();
        let btf = stap_runtime::btf::Btf::open_split(&path, base).expect("module BTF parses");
        let Some(id) = btf.ids_of_kind(stap_runtime::btf::Kind::Func).next() else {
            continue;
        };
        let name = btf.ty(id).expect("record").name.to_string();
        let f = kernel().function(&name).expect("no error").expect("found");
        assert!(f.module.is_some(), "{name} should come from a module");
    }
}

#[test]
fn version_arch_config_and_mechanisms() {
    let k = kernel();
    let v = k.version();
    assert!(v.major >= 6, "{v}");
    assert_eq!(k.arch(), std::env::consts::ARCH);
    assert_eq!(k.config("CONFIG_DEBUG_INFO_BTF").as_deref(), Some("y"));
    assert_eq!(k.config("BPF_SYSCALL").as_deref(), Some("y"));
    let m = k.mechanisms();
    assert!(m.tracepoints && m.raw_tracepoints && m.tp_btf && m.perf_events && m.uprobes);
    // This host: no CONFIG_KPROBES, and fentry loads are refused (EPERM).
    assert_eq!(m.kprobes, k.config("CONFIG_KPROBES").is_some());
    if let Some(reason) = k.fentry().reason() {
        assert!(reason.contains("tcp_v4_connect"), "{reason}");
    }
    if let Some(reason) = k.features().kprobes.reason() {
        assert!(reason.contains("CONFIG_KPROBES"), "{reason}");
    }
}
