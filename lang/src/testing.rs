//! [`FakeKernel`]: an in-memory [`KernelFacts`] for tests.
//!
//! It describes a small, realistic slice of a 6.18 x86_64 kernel: the
//! networking structs the stdlib and the seed script touch, a dozen
//! tracepoints and kernel functions. Offsets were read from this machine's
//! BTF (`bpftool btf dump file /sys/kernel/btf/vmlinux format raw`), so code
//! tested against the fake computes the same addresses it would for real.
//! Where the real kernel nests a member in several anonymous
//! structs/unions, the fake sometimes keeps only one level of nesting, but
//! every member keeps its real absolute offset.
//!
//! Everything is data: the tables below name types by their C spelling
//! (`struct sk_buff *`, `char[16]`, `const struct sock *`), and
//! [`FakeKernel::new`] resolves the spellings into [`TypeId`]s.

use hashbrown::HashMap;

use crate::kernel::{
    ClassicField, FactsError, FunctionProto, KernelFacts, KernelVersion, Mechanisms, Member, Param,
    Tracepoint, TracepointArgs, TypeId, TypeKind,
};

// ---------------------------------------------------------------------------
// The tables
// ---------------------------------------------------------------------------

/// A base integer type: C spelling, size in bytes, signedness.
const INTS: &[(&str, u32, bool)] = &[
    ("char", 1, true),
    ("signed char", 1, true),
    ("unsigned char", 1, false),
    ("short", 2, true),
    ("unsigned short", 2, false),
    ("int", 4, true),
    ("unsigned int", 4, false),
    ("long", 8, true),
    ("unsigned long", 8, false),
    ("long long", 8, true),
    ("unsigned long long", 8, false),
    ("_Bool", 1, false),
];

/// Other spellings of the base types (BTF spells `unsigned long` as
/// `long unsigned int`, and so on).
const INT_ALIASES: &[(&str, &str)] = &[
    ("short int", "short"),
    ("short unsigned int", "unsigned short"),
    ("long int", "long"),
    ("long unsigned int", "unsigned long"),
    ("long long int", "long long"),
    ("long long unsigned int", "unsigned long long"),
    ("unsigned", "unsigned int"),
    ("signed", "int"),
];

/// `typedef TARGET NAME`, as `(NAME, TARGET)`. A target must appear earlier
/// in this table or be a base type or struct.
const TYPEDEFS: &[(&str, &str)] = &[
    ("__u8", "unsigned char"),
    ("__s8", "signed char"),
    ("__u16", "unsigned short"),
    ("__s16", "short"),
    ("__u32", "unsigned int"),
    ("__s32", "int"),
    ("__u64", "unsigned long long"),
    ("__s64", "long long"),
    ("u8", "__u8"),
    ("s8", "__s8"),
    ("u16", "__u16"),
    ("s16", "__s16"),
    ("u32", "__u32"),
    ("s32", "__s32"),
    ("u64", "__u64"),
    ("s64", "__s64"),
    ("__be16", "__u16"),
    ("__be32", "__u32"),
    ("__sum16", "__u16"),
    ("__wsum", "__u32"),
    ("__addrpair", "__u64"),
    ("__portpair", "__u32"),
    ("bool", "_Bool"),
    ("pid_t", "int"),
    ("gfp_t", "unsigned int"),
    ("umode_t", "unsigned short"),
    ("size_t", "unsigned long"),
    ("__kernel_size_t", "unsigned long"),
    ("ktime_t", "s64"),
    ("sk_buff_data_t", "unsigned int"),
    ("sa_family_t", "unsigned short"),
];

/// A member of a struct or union: name (empty for an anonymous member), C
/// spelling of its type, offset in bits, bitfield width.
#[derive(Clone, Copy)]
struct MemberDef {
    name: &'static str,
    ty: &'static str,
    bit_offset: u32,
    bitfield_bits: Option<u32>,
}

const fn m(name: &'static str, ty: &'static str, bit_offset: u32) -> MemberDef {
    MemberDef {
        name,
        ty,
        bit_offset,
        bitfield_bits: None,
    }
}

const fn bits(name: &'static str, ty: &'static str, bit_offset: u32, width: u32) -> MemberDef {
    MemberDef {
        name,
        ty,
        bit_offset,
        bitfield_bits: Some(width),
    }
}

/// A struct or union. `key` is how members refer to it: `struct NAME` or
/// `union NAME`; a key containing `::` (`union sk_buff::dev_u`) is an
/// anonymous aggregate, which has no C name and is not findable by name.
/// Offsets of an anonymous aggregate's members are relative to it.
struct AggregateDef {
    key: &'static str,
    size: u32,
    members: &'static [MemberDef],
}

const AGGREGATES: &[AggregateDef] = &[
    AggregateDef {
        key: "struct sk_buff",
        size: 224,
        members: &[
            m("next", "struct sk_buff *", 0),
            m("prev", "struct sk_buff *", 64),
            m("", "union sk_buff::dev_u", 128),
            m("sk", "struct sock *", 192),
            m("", "union sk_buff::tstamp_u", 256),
            m("cb", "char[48]", 320),
            m("_nfct", "unsigned long", 832),
            m("len", "unsigned int", 896),
            m("data_len", "unsigned int", 928),
            m("mac_len", "__u16", 960),
            m("hdr_len", "__u16", 976),
            m("queue_mapping", "__u16", 992),
            bits("cloned", "__u8", 1008, 1),
            bits("nohdr", "__u8", 1009, 1),
            bits("fclone", "__u8", 1010, 2),
            bits("peeked", "__u8", 1012, 1),
            bits("head_frag", "__u8", 1013, 1),
            bits("pfmemalloc", "__u8", 1014, 1),
            bits("pp_recycle", "__u8", 1015, 1),
            m("active_extensions", "__u8", 1016),
            m("", "struct sk_buff::headers", 1024),
            m("tail", "sk_buff_data_t", 1472),
            m("end", "sk_buff_data_t", 1504),
            m("head", "unsigned char *", 1536),
            m("data", "unsigned char *", 1600),
            m("truesize", "unsigned int", 1664),
        ],
    },
    AggregateDef {
        key: "union sk_buff::dev_u",
        size: 8,
        members: &[
            m("dev", "struct net_device *", 0),
            m("dev_scratch", "unsigned long", 0),
        ],
    },
    AggregateDef {
        key: "union sk_buff::tstamp_u",
        size: 8,
        members: &[m("tstamp", "ktime_t", 0), m("skb_mstamp_ns", "u64", 0)],
    },
    // The kernel's `struct_group(headers, ...)`, at bit 1024 of sk_buff.
    AggregateDef {
        key: "struct sk_buff::headers",
        size: 56,
        members: &[
            bits("pkt_type", "__u8", 0, 3),
            bits("ignore_df", "__u8", 3, 1),
            bits("ip_summed", "__u8", 5, 2),
            m("tc_index", "__u16", 32),
            m("priority", "__u32", 96),
            m("skb_iif", "int", 128),
            m("hash", "__u32", 160),
            m("mark", "__u32", 288),
            m("inner_transport_header", "__u16", 336),
            m("inner_network_header", "__u16", 352),
            m("inner_mac_header", "__u16", 368),
            m("protocol", "__be16", 384),
            m("transport_header", "__u16", 400),
            m("network_header", "__u16", 416),
            m("mac_header", "__u16", 432),
        ],
    },
    AggregateDef {
        key: "struct net_device",
        size: 2496,
        members: &[
            m("mtu", "unsigned int", 448),
            m("flags", "unsigned int", 1408),
            m("ifindex", "int", 1792),
            m("name", "char[16]", 2240),
            m("type", "unsigned short", 4288),
            m("addr_len", "unsigned char", 6464),
            m("dev_addr", "unsigned char *", 7744),
        ],
    },
    AggregateDef {
        key: "struct sock_common",
        size: 136,
        members: &[
            m("", "union sock_common::addrpair_u", 0),
            m("", "union sock_common::hash_u", 64),
            m("", "union sock_common::portpair_u", 96),
            m("skc_family", "unsigned short", 128),
            m("skc_state", "unsigned char", 144),
            bits("skc_reuse", "unsigned char", 152, 4),
            bits("skc_reuseport", "unsigned char", 156, 1),
            bits("skc_ipv6only", "unsigned char", 157, 1),
            m("skc_bound_dev_if", "int", 160),
            m("skc_prot", "struct proto *", 320),
            m("skc_v6_daddr", "struct in6_addr", 448),
            m("skc_v6_rcv_saddr", "struct in6_addr", 576),
        ],
    },
    AggregateDef {
        key: "union sock_common::addrpair_u",
        size: 8,
        members: &[
            m("skc_addrpair", "__addrpair", 0),
            m("", "struct sock_common::addrs", 0),
        ],
    },
    AggregateDef {
        key: "struct sock_common::addrs",
        size: 8,
        members: &[
            m("skc_daddr", "__be32", 0),
            m("skc_rcv_saddr", "__be32", 32),
        ],
    },
    AggregateDef {
        key: "union sock_common::hash_u",
        size: 4,
        members: &[
            m("skc_hash", "unsigned int", 0),
            m("skc_u16hashes", "__u16[2]", 0),
        ],
    },
    AggregateDef {
        key: "union sock_common::portpair_u",
        size: 4,
        members: &[
            m("skc_portpair", "__portpair", 0),
            m("", "struct sock_common::ports", 0),
        ],
    },
    AggregateDef {
        key: "struct sock_common::ports",
        size: 4,
        members: &[m("skc_dport", "__be16", 0), m("skc_num", "__u16", 16)],
    },
    AggregateDef {
        key: "struct in6_addr",
        size: 16,
        members: &[m("in6_u", "union in6_addr::in6_u", 0)],
    },
    AggregateDef {
        key: "union in6_addr::in6_u",
        size: 16,
        members: &[
            m("u6_addr8", "__u8[16]", 0),
            m("u6_addr16", "__be16[8]", 0),
            m("u6_addr32", "__be32[4]", 0),
        ],
    },
    AggregateDef {
        key: "struct sock",
        size: 784,
        members: &[
            m("__sk_common", "struct sock_common", 0),
            m("sk_rcvbuf", "int", 1952),
            m("sk_err", "int", 2272),
            m("sk_priority", "u32", 4160),
            m("sk_mark", "u32", 4192),
            m("sk_protocol", "u16", 4256),
            m("sk_type", "u16", 4272),
            m("sk_sndbuf", "int", 4544),
        ],
    },
    AggregateDef {
        key: "struct inet_sock",
        size: 1016,
        members: &[
            m("sk", "struct sock", 0),
            m("pinet6", "struct ipv6_pinfo *", 6272),
            m("inet_saddr", "__be32", 6464),
            m("uc_ttl", "__s16", 6496),
            m("inet_sport", "__be16", 6512),
            m("tos", "__u8", 6624),
        ],
    },
    AggregateDef {
        key: "struct inet_connection_sock",
        size: 1400,
        members: &[m("icsk_inet", "struct inet_sock", 0)],
    },
    AggregateDef {
        key: "struct tcp_sock",
        size: 2304,
        members: &[
            m("inet_conn", "struct inet_connection_sock", 0),
            m("snd_cwnd", "u32", 11552),
            m("retrans_out", "u32", 11840),
            m("rcv_nxt", "u32", 13312),
            m("snd_nxt", "u32", 13344),
            m("snd_una", "u32", 13376),
            m("srtt_us", "u32", 13440),
            m("packets_out", "u32", 13472),
        ],
    },
    AggregateDef {
        key: "struct iphdr",
        size: 20,
        members: &[
            bits("ihl", "__u8", 0, 4),
            bits("version", "__u8", 4, 4),
            m("tos", "__u8", 8),
            m("tot_len", "__be16", 16),
            m("id", "__be16", 32),
            m("frag_off", "__be16", 48),
            m("ttl", "__u8", 64),
            m("protocol", "__u8", 72),
            m("check", "__sum16", 80),
            m("", "union iphdr::addrs_u", 96),
        ],
    },
    // `struct_group(addrs, saddr, daddr)`: the same anonymous struct both
    // unnamed and named `addrs`.
    AggregateDef {
        key: "union iphdr::addrs_u",
        size: 8,
        members: &[
            m("", "struct iphdr::addrs", 0),
            m("addrs", "struct iphdr::addrs", 0),
        ],
    },
    AggregateDef {
        key: "struct iphdr::addrs",
        size: 8,
        members: &[m("saddr", "__be32", 0), m("daddr", "__be32", 32)],
    },
    AggregateDef {
        key: "struct tcphdr",
        size: 20,
        members: &[
            m("source", "__be16", 0),
            m("dest", "__be16", 16),
            m("seq", "__be32", 32),
            m("ack_seq", "__be32", 64),
            bits("ae", "__u16", 96, 1),
            bits("res1", "__u16", 97, 3),
            bits("doff", "__u16", 100, 4),
            bits("fin", "__u16", 104, 1),
            bits("syn", "__u16", 105, 1),
            bits("rst", "__u16", 106, 1),
            bits("psh", "__u16", 107, 1),
            bits("ack", "__u16", 108, 1),
            bits("urg", "__u16", 109, 1),
            bits("ece", "__u16", 110, 1),
            bits("cwr", "__u16", 111, 1),
            m("window", "__be16", 112),
            m("check", "__sum16", 128),
            m("urg_ptr", "__be16", 144),
        ],
    },
    AggregateDef {
        key: "struct udphdr",
        size: 8,
        members: &[
            m("source", "__be16", 0),
            m("dest", "__be16", 16),
            m("len", "__be16", 32),
            m("check", "__sum16", 48),
        ],
    },
    AggregateDef {
        key: "struct msghdr",
        size: 104,
        members: &[
            m("msg_name", "void *", 0),
            m("msg_namelen", "int", 64),
            m("msg_inq", "int", 96),
            m("", "union msghdr::control_u", 448),
            bits("msg_control_is_user", "bool", 512, 1),
            bits("msg_get_inq", "bool", 513, 1),
            m("msg_flags", "unsigned int", 544),
            m("msg_controllen", "__kernel_size_t", 576),
            m("msg_iocb", "struct kiocb *", 640),
        ],
    },
    AggregateDef {
        key: "union msghdr::control_u",
        size: 8,
        members: &[
            m("msg_control", "void *", 0),
            m("msg_control_user", "void *", 0),
        ],
    },
    AggregateDef {
        key: "struct sockaddr",
        size: 16,
        members: &[
            m("sa_family", "sa_family_t", 0),
            m("sa_data", "char[14]", 16),
        ],
    },
    AggregateDef {
        key: "struct sockaddr_in",
        size: 16,
        members: &[
            m("sin_family", "sa_family_t", 0),
            m("sin_port", "__be16", 16),
            m("sin_addr", "struct in_addr", 32),
            m("__pad", "unsigned char[8]", 64),
        ],
    },
    AggregateDef {
        key: "struct in_addr",
        size: 4,
        members: &[m("s_addr", "__be32", 0)],
    },
    AggregateDef {
        key: "struct task_struct",
        size: 3264,
        members: &[
            m("__state", "unsigned int", 192),
            m("flags", "unsigned int", 352),
            m("mm", "struct mm_struct *", 9088),
            m("pid", "pid_t", 10112),
            m("tgid", "pid_t", 10144),
            m("real_parent", "struct task_struct *", 10240),
            m("cred", "const struct cred *", 13888),
            m("comm", "char[16]", 14016),
        ],
    },
    AggregateDef {
        key: "struct linux_binprm",
        size: 408,
        members: &[
            m("mm", "struct mm_struct *", 192),
            m("p", "unsigned long", 256),
            m("file", "struct file *", 512),
            m("filename", "const char *", 768),
            m("interp", "const char *", 832),
        ],
    },
    AggregateDef {
        key: "struct pt_regs",
        size: 168,
        members: &[
            m("r15", "unsigned long", 0),
            m("r14", "unsigned long", 64),
            m("r13", "unsigned long", 128),
            m("r12", "unsigned long", 192),
            m("bp", "unsigned long", 256),
            m("bx", "unsigned long", 320),
            m("r11", "unsigned long", 384),
            m("r10", "unsigned long", 448),
            m("r9", "unsigned long", 512),
            m("r8", "unsigned long", 576),
            m("ax", "unsigned long", 640),
            m("cx", "unsigned long", 704),
            m("dx", "unsigned long", 768),
            m("si", "unsigned long", 832),
            m("di", "unsigned long", 896),
            m("orig_ax", "unsigned long", 960),
            m("ip", "unsigned long", 1024),
            m("flags", "unsigned long", 1152),
            m("sp", "unsigned long", 1216),
        ],
    },
];

/// Enums: name without `enum `, and values. All are 4-byte unsigned, as in
/// BTF. Only a few of skb_drop_reason's 129 values are listed.
const ENUMS: &[(&str, &[(&str, i64)])] = &[(
    "skb_drop_reason",
    &[
        ("SKB_NOT_DROPPED_YET", 0),
        ("SKB_CONSUMED", 1),
        ("SKB_DROP_REASON_NOT_SPECIFIED", 2),
        ("SKB_DROP_REASON_NO_SOCKET", 3),
        ("SKB_DROP_REASON_SOCKET_CLOSE", 4),
        ("SKB_DROP_REASON_SOCKET_FILTER", 5),
        ("SKB_DROP_REASON_SOCKET_RCVBUFF", 6),
        ("SKB_DROP_REASON_PKT_TOO_SMALL", 9),
        ("SKB_DROP_REASON_TCP_CSUM", 10),
        ("SKB_DROP_REASON_UDP_CSUM", 11),
        ("SKB_DROP_REASON_NETFILTER_DROP", 12),
        ("SKB_DROP_REASON_OTHERHOST", 13),
        ("SKB_DROP_REASON_IP_CSUM", 14),
        ("SKB_DROP_REASON_IP_NOPROTO", 19),
        ("SKB_DROP_REASON_TCP_FLAGS", 30),
        ("SKB_DROP_REASON_TCP_RESET", 45),
        ("SKB_DROP_REASON_NEIGH_FAILED", 58),
        ("SKB_DROP_REASON_QDISC_DROP", 64),
        ("SKB_DROP_REASON_NOMEM", 81),
        ("SKB_DROP_REASON_MAX", 128),
    ],
)];

/// The most common parameters.
const SK: (&str, &str) = ("sk", "struct sock *");
const SKB: (&str, &str) = ("skb", "struct sk_buff *");

/// How a tracepoint's arguments are described in [`TRACEPOINTS`].
enum ArgsDef {
    /// `(name, C type)` of the raw tracepoint's BTF-typed args.
    Raw(&'static [(&'static str, &'static str)]),
    /// `(name, C type, offset, size)` of the classic tracepoint's tracefs
    /// fields, without the `common_*` header fields.
    Classic(&'static [(&'static str, &'static str, u32, u32)]),
}

/// `(system, name, args)`. Raw argument names are those of the kernel's
/// `__traceiter_NAME` prototypes; the classic fields are tracefs's.
#[rustfmt::skip]
const TRACEPOINTS: &[(&str, &str, ArgsDef)] = &[
    ("skb", "kfree_skb", ArgsDef::Raw(&[SKB, ("location", "void *"), ("reason", "enum skb_drop_reason"), ("rx_sk", "struct sock *")])),
    ("skb", "consume_skb", ArgsDef::Raw(&[SKB, ("location", "void *")])),
    ("net", "net_dev_xmit", ArgsDef::Raw(&[SKB, ("rc", "int"), ("dev", "struct net_device *"), ("skb_len", "unsigned int")])),
    ("net", "net_dev_queue", ArgsDef::Raw(&[SKB])),
    ("net", "netif_receive_skb", ArgsDef::Raw(&[SKB])),
    ("sock", "inet_sock_set_state", ArgsDef::Raw(&[("sk", "const struct sock *"), ("oldstate", "const int"), ("newstate", "const int")])),
    ("sock", "sock_send_length", ArgsDef::Raw(&[SK, ("ret", "int"), ("flags", "int")])),
    ("sock", "sock_recv_length", ArgsDef::Raw(&[SK, ("ret", "int"), ("flags", "int")])),
    ("tcp", "tcp_retransmit_skb", ArgsDef::Raw(&[("sk", "const struct sock *"), ("skb", "const struct sk_buff *"), ("err", "int")])),
    ("tcp", "tcp_probe", ArgsDef::Raw(&[SK, ("skb", "const struct sk_buff *")])),
    ("sched", "sched_switch", ArgsDef::Raw(&[("preempt", "bool"), ("prev", "struct task_struct *"), ("next", "struct task_struct *"), ("prev_state", "unsigned int")])),
    ("sched", "sched_process_exec", ArgsDef::Raw(&[("p", "struct task_struct *"), ("old_pid", "pid_t"), ("bprm", "struct linux_binprm *")])),
    ("raw_syscalls", "sys_enter", ArgsDef::Raw(&[("regs", "struct pt_regs *"), ("id", "long")])),
    ("raw_syscalls", "sys_exit", ArgsDef::Raw(&[("regs", "struct pt_regs *"), ("ret", "long")])),
    ("syscalls", "sys_enter_openat", ArgsDef::Classic(&[
        ("__syscall_nr", "int", 8, 4),
        ("dfd", "int", 16, 8),
        ("filename", "const char *", 24, 8),
        ("flags", "int", 32, 8),
        ("mode", "umode_t", 40, 8),
    ])),
    ("syscalls", "sys_exit_openat", ArgsDef::Classic(&[("__syscall_nr", "int", 8, 4), ("ret", "long", 16, 8)])),
];

/// A kernel function: name, return type (`None` for void), params, module.
type FunctionDef = (
    &'static str,
    Option<&'static str>,
    &'static [(&'static str, &'static str)],
    Option<&'static str>,
);

/// Prototypes as in 6.18's BTF (tcp_recvmsg has lost its `addr_len`
/// parameter there, and `tcp_transmit_skb` only exists as
/// `__tcp_transmit_skb`).
#[rustfmt::skip]
const FUNCTIONS: &[FunctionDef] = &[
    ("tcp_sendmsg", Some("int"), &[SK, ("msg", "struct msghdr *"), ("size", "size_t")], None),
    // The BPF LSM stub of the socket_bind hook (kernel.lsm probes).
    ("bpf_lsm_socket_bind", Some("int"), &[("sock", "struct socket *"), ("address", "struct sockaddr *"), ("addrlen", "int")], None),
    ("tcp_recvmsg", Some("int"), &[SK, ("msg", "struct msghdr *"), ("len", "size_t"), ("flags", "int")], None),
    ("tcp_v4_connect", Some("int"), &[SK, ("uaddr", "struct sockaddr *"), ("addr_len", "int")], None),
    ("tcp_v4_rcv", Some("int"), &[SKB], None),
    ("tcp_v4_conn_request", Some("int"), &[SK, SKB], None),
    ("tcp_connect", Some("int"), &[SK], None),
    ("__tcp_transmit_skb", Some("int"), &[SK, SKB, ("clone_it", "int"), ("gfp_mask", "gfp_t"), ("rcv_nxt", "u32")], None),
    ("tcp_retransmit_skb", Some("int"), &[SK, SKB, ("segs", "int")], None),
    ("tcp_rcv_established", None, &[SK, SKB], None),
    ("tcp_set_state", None, &[SK, ("state", "int")], None),
    ("tcp_close", None, &[SK, ("timeout", "long")], None),
    ("inet_csk_accept", Some("struct sock *"), &[SK, ("arg", "struct proto_accept_arg *")], None),
    ("udp_sendmsg", Some("int"), &[SK, ("msg", "struct msghdr *"), ("len", "size_t")], None),
    ("udp_recvmsg", Some("int"), &[SK, ("msg", "struct msghdr *"), ("len", "size_t"), ("flags", "int")], None),
    ("ip_output", Some("int"), &[("net", "struct net *"), SK, SKB], None),
    ("ip_queue_xmit", Some("int"), &[SK, SKB, ("fl", "struct flowi *")], None),
    ("ip_rcv", Some("int"), &[SKB, ("dev", "struct net_device *"), ("pt", "struct packet_type *"), ("orig_dev", "struct net_device *")], None),
    ("__dev_queue_xmit", Some("int"), &[SKB, ("sb_dev", "struct net_device *")], None),
    ("__netif_receive_skb", Some("int"), &[SKB], None),
    ("sk_skb_reason_drop", None, &[SK, SKB, ("reason", "enum skb_drop_reason")], None),
    ("nf_conntrack_in", Some("unsigned int"), &[SKB, ("state", "struct nf_hook_state *")], Some("nf_conntrack")),
];

/// A user-space function: name, return type (`None` for void), parameters.
type UserFunctionDef = (
    &'static str,
    Option<&'static str>,
    &'static [(&'static str, &'static str)],
);

/// User-space functions of fake binaries, as if read from their DWARF, by
/// binary. Any other binary has no DWARF.
#[rustfmt::skip]
const USER_FUNCTIONS: &[(&str, UserFunctionDef)] = &[
    ("/bin/fake", ("f", Some("int"), &[("n", "int"), ("s", "const char *")])),
    ("/bin/fake", ("g", None, &[("p", "struct point *"), ("len", "long")])),
    ("/bin/fake", ("h", Some("struct point"), &[("p", "struct point"), ("n", "int")])),
];

// ---------------------------------------------------------------------------
// The fake
// ---------------------------------------------------------------------------

/// One resolved type. Typedefs and qualifiers are kept (for `type_name`)
/// and peeled by `kind`.
#[derive(Debug, Clone)]
enum Node {
    Void,
    Int {
        bytes: u32,
        signed: bool,
        is_char: bool,
    },
    Enum {
        name: String,
    },
    Typedef(TypeId),
    Const(TypeId),
    Pointer(TypeId),
    Array {
        elem: TypeId,
        len: u32,
    },
    Aggregate {
        name: String,
        size: u32,
        is_union: bool,
        members: Vec<Member>,
    },
    Opaque {
        name: String,
    },
}

#[derive(Debug, Clone)]
struct TypeEntry {
    /// The C spelling `type_name` returns.
    c_name: String,
    node: Node,
}

/// A fake kernel for tests. See the module documentation.
#[derive(Debug, Clone)]
pub struct FakeKernel {
    version: KernelVersion,
    arch: String,
    config: Vec<(String, String)>,
    mechanisms: Mechanisms,
    /// When set, every fallible query fails with this message.
    facts_error: Option<String>,
    types: Vec<TypeEntry>,
    /// Every spelling resolved so far (aliases and internal keys included).
    by_spelling: HashMap<String, TypeId>,
    enums: Vec<(String, Vec<(String, i64)>)>,
    tracepoints: Vec<Tracepoint>,
    functions: Vec<FunctionProto>,
    /// `(binary, prototype)` from [`USER_FUNCTIONS`].
    user_functions: Vec<(String, FunctionProto)>,
    /// ftrace's list; `None` (unknown) unless a test sets it.
    traceable: Option<crate::kernel::TraceableFunctions>,
    /// Whether the kernel's DWARF ([`SOURCE_LINES`]) is installed.
    dwarf: bool,
}

/// One function of the fake kernel's DWARF: name, declaring file,
/// declaration line, and `(line, offset)` of its lines.
pub type SourceLines = (&'static str, &'static str, u64, &'static [(u64, u64)]);

/// The fake kernel's DWARF (with [`FakeKernel::with_dwarf`]).
pub const SOURCE_LINES: &[SourceLines] = &[
    (
        "tcp_sendmsg",
        "net/ipv4/tcp.c",
        1360,
        &[(1360, 0), (1364, 0x12), (1365, 0x2c)],
    ),
    (
        "tcp_recvmsg",
        "net/ipv4/tcp.c",
        2900,
        &[(2900, 0), (2905, 0x1a)],
    ),
    ("tcp_v4_connect", "net/ipv4/tcp_ipv4.c", 199, &[(199, 0)]),
];

impl Default for FakeKernel {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeKernel {
    /// A typical kernel: 6.18.0 x86_64, CONFIG_BPF/KPROBES/NET=y, every
    /// mechanism available, and the tables above.
    pub fn new() -> Self {
        let mut kernel = FakeKernel {
            version: KernelVersion {
                major: 6,
                minor: 18,
                patch: 0,
                release: "6.18.0-test".to_string(),
            },
            arch: "x86_64".to_string(),
            config: [
                ("CONFIG_BPF", "y"),
                ("CONFIG_KPROBES", "y"),
                ("CONFIG_NET", "y"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            mechanisms: Mechanisms {
                tracepoints: true,
                raw_tracepoints: true,
                tp_btf: true,
                fentry: true,
                kprobes: true,
                uprobes: true,
                perf_events: true,
            },
            facts_error: None,
            types: Vec::new(),
            by_spelling: HashMap::new(),
            enums: Vec::new(),
            tracepoints: Vec::new(),
            functions: Vec::new(),
            user_functions: Vec::new(),
            traceable: None,
            dwarf: false,
        };
        kernel.load_tables();
        kernel
    }

    /// The kernel of the machine stap-rs is developed on (see
    /// platform.md): no kprobes (CONFIG_KPROBES unset) and fentry refused,
    /// everything else available.
    pub fn like_this_host() -> Self {
        let mechanisms = Mechanisms {
            fentry: false,
            kprobes: false,
            ..Self::new().mechanisms
        };
        Self::new()
            .with_mechanisms(mechanisms)
            .with_config("CONFIG_KPROBES", None)
    }

    /// The same kernel with other probe mechanisms (e.g. this host's: no
    /// kprobes, no fentry).
    pub fn with_mechanisms(mut self, mechanisms: Mechanisms) -> Self {
        self.mechanisms = mechanisms;
        self
    }

    /// The same kernel reporting another version; `release` becomes
    /// `MAJOR.MINOR.PATCH-test`.
    pub fn with_version(mut self, major: u32, minor: u32, patch: u32) -> Self {
        self.version = KernelVersion {
            major,
            minor,
            patch,
            release: format!("{major}.{minor}.{patch}-test"),
        };
        self
    }

    /// The same kernel with another architecture name.
    pub fn with_arch(mut self, arch: &str) -> Self {
        self.arch = arch.to_string();
        self
    }

    /// Sets (`Some`) or unsets (`None`) a config option.
    pub fn with_config(mut self, name: &str, value: Option<&str>) -> Self {
        self.config.retain(|(k, _)| k != name);
        if let Some(value) = value {
            self.config.push((name.to_string(), value.to_string()));
        }
        self
    }

    /// The same kernel with ftrace's list of hookable functions: `name`
    /// or `name [module]` lines, as `available_filter_functions` has them.
    /// Installs the kernel's DWARF: [`SOURCE_LINES`].
    pub fn with_dwarf(mut self) -> Self {
        self.dwarf = true;
        self
    }

    /// [`SOURCE_LINES`] whose function matches `function` and whose file
    /// matches `file` (stap's rule: also after leading directories).
    fn source_lines(
        &self,
        function: &str,
        file: &str,
    ) -> Result<Vec<&'static SourceLines>, FactsError> {
        if !self.dwarf {
            return Err(FactsError(
                "no DWARF for the running kernel 6.18.0-test (fake)".to_string(),
            ));
        }
        let glob = crate::sema::glob_match;
        Ok(SOURCE_LINES
            .iter()
            .filter(|(f, path, ..)| {
                glob(function, f) && (glob(file, path) || glob(&format!("*/{file}"), path))
            })
            .collect())
    }

    pub fn with_traceable(mut self, lines: &[&str]) -> Self {
        self.traceable = Some(crate::kernel::TraceableFunctions::from_lines(
            lines.iter().copied(),
        ));
        self
    }

    /// Makes every fallible query (`tracepoint`, `function`, `find_type`,
    /// ...) return `Err(FactsError(message))`, to test error paths.
    pub fn with_facts_error(mut self, message: &str) -> Self {
        self.facts_error = Some(message.to_string());
        self
    }

    fn check(&self) -> Result<(), FactsError> {
        match &self.facts_error {
            Some(message) => Err(FactsError(message.clone())),
            None => Ok(()),
        }
    }

    fn entry(&self, ty: TypeId) -> Option<&TypeEntry> {
        self.types.get(ty.0 as usize)
    }

    fn push(&mut self, c_name: String, node: Node) -> TypeId {
        let id = TypeId(self.types.len() as u32);
        self.types.push(TypeEntry { c_name, node });
        id
    }

    /// Resolves the tables. Aggregates are registered before any member is
    /// resolved, because structs point at each other.
    fn load_tables(&mut self) {
        let void = self.push("void".to_string(), Node::Void);
        self.by_spelling.insert("void".to_string(), void);
        for &(name, bytes, signed) in INTS {
            let is_char = bytes == 1 && name.contains("char");
            let id = self.push(
                name.to_string(),
                Node::Int {
                    bytes,
                    signed,
                    is_char,
                },
            );
            self.by_spelling.insert(name.to_string(), id);
        }
        for &(alias, base) in INT_ALIASES {
            let id = self.resolve(base);
            self.by_spelling.insert(alias.to_string(), id);
        }
        for &(name, values) in ENUMS {
            let id = self.push(
                format!("enum {name}"),
                Node::Enum {
                    name: name.to_string(),
                },
            );
            self.by_spelling.insert(format!("enum {name}"), id);
            let values = values.iter().map(|&(n, v)| (n.to_string(), v)).collect();
            self.enums.push((name.to_string(), values));
        }
        for def in AGGREGATES {
            let is_union = def.key.starts_with("union ");
            let anonymous = def.key.contains("::");
            let (name, c_name) = if anonymous {
                let keyword = if is_union { "union" } else { "struct" };
                (String::new(), format!("{keyword} (anon)"))
            } else {
                let name = def.key.split_once(' ').map_or(def.key, |(_, n)| n);
                (name.to_string(), def.key.to_string())
            };
            let node = Node::Aggregate {
                name,
                size: def.size,
                is_union,
                members: Vec::new(),
            };
            let id = self.push(c_name, node);
            self.by_spelling.insert(def.key.to_string(), id);
        }
        for &(name, target) in TYPEDEFS {
            let target = self.resolve(target);
            let id = self.push(name.to_string(), Node::Typedef(target));
            self.by_spelling.insert(name.to_string(), id);
        }
        for def in AGGREGATES {
            let resolved: Vec<Member> = def
                .members
                .iter()
                .map(|mdef| Member {
                    name: mdef.name.to_string(),
                    ty: self.resolve(mdef.ty),
                    bit_offset: mdef.bit_offset,
                    bitfield_bits: mdef.bitfield_bits,
                })
                .collect();
            let id = self.by_spelling[def.key];
            if let Node::Aggregate { members, .. } = &mut self.types[id.0 as usize].node {
                *members = resolved;
            }
        }
        for (system, name, args) in TRACEPOINTS {
            let args = match args {
                ArgsDef::Raw(params) => TracepointArgs::Raw(self.resolve_params(params)),
                ArgsDef::Classic(fields) => TracepointArgs::Classic(
                    fields
                        .iter()
                        .map(|&(name, ty, offset, size)| ClassicField {
                            name: name.to_string(),
                            ty: self.resolve(ty),
                            offset,
                            size,
                        })
                        .collect(),
                ),
            };
            self.tracepoints.push(Tracepoint {
                system: system.to_string(),
                name: name.to_string(),
                args,
            });
        }
        for &(name, ret, params, module) in FUNCTIONS {
            let proto = FunctionProto {
                name: name.to_string(),
                params: self.resolve_params(params),
                ret: ret.map(|r| self.resolve(r)),
                module: module.map(str::to_string),
            };
            self.functions.push(proto);
        }
        for &(binary, (name, ret, params)) in USER_FUNCTIONS {
            let proto = FunctionProto {
                name: name.to_string(),
                params: self.resolve_params(params),
                ret: ret.map(|r| self.resolve(r)),
                module: None,
            };
            self.user_functions.push((binary.to_string(), proto));
        }
    }

    fn resolve_params(&mut self, params: &[(&str, &str)]) -> Vec<Param> {
        params
            .iter()
            .map(|&(name, ty)| Param {
                name: name.to_string(),
                ty: self.resolve(ty),
            })
            .collect()
    }

    /// Resolves a C spelling from the tables, minting pointer, array and
    /// `const` types on first use. An unknown `struct X` becomes an opaque
    /// forward declaration (the tables only describe what tests need).
    fn resolve(&mut self, spelling: &str) -> TypeId {
        let spelling = spelling.trim();
        if let Some(&id) = self.by_spelling.get(spelling) {
            return id;
        }
        let (c_name, node) = if let Some(pointee) = spelling.strip_suffix('*') {
            let pointee = self.resolve(pointee);
            (
                pointer_name(&self.types[pointee.0 as usize].c_name),
                Node::Pointer(pointee),
            )
        } else if let Some((elem, len)) = parse_array(spelling) {
            let elem = self.resolve(elem);
            (
                format!("{}[{len}]", self.types[elem.0 as usize].c_name),
                Node::Array { elem, len },
            )
        } else if let Some(inner) = spelling.strip_prefix("const ") {
            let inner = self.resolve(inner);
            (
                format!("const {}", self.types[inner.0 as usize].c_name),
                Node::Const(inner),
            )
        } else if let Some(name) = spelling.strip_prefix("struct ") {
            (
                spelling.to_string(),
                Node::Opaque {
                    name: name.to_string(),
                },
            )
        } else {
            // Only reachable through a typo in the tables above, which the
            // unit tests below would catch.
            panic!("FakeKernel tables name an unknown type `{spelling}`");
        };
        let id = self.push(c_name, node);
        self.by_spelling.insert(spelling.to_string(), id);
        id
    }
}

/// `T *`, or `T **` when T is itself a pointer.
fn pointer_name(pointee: &str) -> String {
    if pointee.ends_with('*') {
        format!("{pointee}*")
    } else {
        format!("{pointee} *")
    }
}

/// Splits `char[16]` into `("char", 16)`.
fn parse_array(spelling: &str) -> Option<(&str, u32)> {
    let inner = spelling.strip_suffix(']')?;
    let (elem, len) = inner.rsplit_once('[')?;
    Some((elem, len.trim().parse().ok()?))
}

/// Collapses runs of whitespace, so `struct  sk_buff` finds `struct sk_buff`.
fn normalize_spelling(c_name: &str) -> String {
    let mut out = c_name.split_whitespace().collect::<Vec<_>>().join(" ");
    // `char *` and `char*` are the same spelling.
    while out.ends_with('*') && !out.ends_with(" *") && !out.ends_with("**") {
        out.insert(out.len() - 1, ' ');
    }
    out
}

/// A slice of x86_64's system call table, numbered as the kernel's.
const SYSCALLS: &[(u32, &str)] = &[
    (0, "read"),
    (1, "write"),
    (2, "open"),
    (3, "close"),
    (4, "stat"),
    (9, "mmap"),
    (59, "execve"),
    (60, "exit"),
    (62, "kill"),
    (166, "umount2"),
    (231, "exit_group"),
    (257, "openat"),
];

impl KernelFacts for FakeKernel {
    fn version(&self) -> KernelVersion {
        self.version.clone()
    }

    fn kernel_source_functions(
        &self,
        function: &str,
        file: &str,
    ) -> Result<Vec<crate::kernel::SourceFunction>, FactsError> {
        Ok(self
            .source_lines(function, file)?
            .into_iter()
            .map(|(name, file, line, _)| crate::kernel::SourceFunction {
                name: name.to_string(),
                file: file.to_string(),
                line: *line,
            })
            .collect())
    }

    fn kernel_lines(
        &self,
        function: &str,
        file: &str,
        lines: crate::kernel::LineSelector,
    ) -> Result<Vec<crate::kernel::KernelLine>, FactsError> {
        let mut out = Vec::new();
        for (name, path, _, rows) in self.source_lines(function, file)? {
            for (line, offset) in rows.iter().filter(|(line, _)| lines.contains(*line)) {
                out.push(crate::kernel::KernelLine {
                    function: name.to_string(),
                    offset: *offset,
                    file: path.to_string(),
                    line: *line,
                });
            }
        }
        Ok(out)
    }

    fn syscalls(&self) -> Vec<(u32, String)> {
        SYSCALLS.iter().map(|(n, s)| (*n, s.to_string())).collect()
    }

    fn arch(&self) -> String {
        self.arch.clone()
    }

    fn config(&self, name: &str) -> Option<String> {
        self.config
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    fn mechanisms(&self) -> Mechanisms {
        self.mechanisms
    }

    fn tracepoint_names(&self) -> Result<Vec<(String, String)>, FactsError> {
        self.check()?;
        Ok(self
            .tracepoints
            .iter()
            .map(|tp| (tp.system.clone(), tp.name.clone()))
            .collect())
    }

    fn tracepoint(
        &self,
        system: Option<&str>,
        name: &str,
    ) -> Result<Option<Tracepoint>, FactsError> {
        self.check()?;
        Ok(self
            .tracepoints
            .iter()
            .find(|tp| tp.name == name && system.is_none_or(|s| s == tp.system))
            .cloned())
    }

    fn function_names(&self) -> Result<Vec<String>, FactsError> {
        self.check()?;
        Ok(self.functions.iter().map(|f| f.name.clone()).collect())
    }

    fn function(&self, name: &str) -> Result<Option<FunctionProto>, FactsError> {
        self.check()?;
        Ok(self.functions.iter().find(|f| f.name == name).cloned())
    }

    fn traceable_functions(&self) -> Option<&crate::kernel::TraceableFunctions> {
        self.traceable.as_ref()
    }

    fn find_type(&self, c_name: &str) -> Result<Option<TypeId>, FactsError> {
        self.check()?;
        let spelling = normalize_spelling(c_name);
        // Internal keys of anonymous aggregates are not C names.
        if spelling.contains("::") {
            return Ok(None);
        }
        Ok(self.by_spelling.get(&spelling).copied())
    }

    fn kind(&self, ty: TypeId) -> TypeKind {
        let Some(entry) = self.entry(ty) else {
            return TypeKind::Opaque {
                name: format!("<bad type id {}>", ty.0),
            };
        };
        match &entry.node {
            Node::Void => TypeKind::Void,
            &Node::Int {
                bytes,
                signed,
                is_char,
            } => TypeKind::Int {
                bytes,
                signed,
                is_char,
            },
            Node::Enum { name } => TypeKind::Enum {
                name: name.clone(),
                bytes: 4,
                signed: false,
            },
            Node::Typedef(target) | Node::Const(target) => self.kind(*target),
            Node::Pointer(pointee) => TypeKind::Pointer(*pointee),
            &Node::Array { elem, len } => TypeKind::Array { elem, len },
            Node::Aggregate {
                name,
                size,
                is_union,
                ..
            } => TypeKind::Struct {
                name: name.clone(),
                size: *size,
                is_union: *is_union,
            },
            Node::Opaque { name } => TypeKind::Opaque { name: name.clone() },
        }
    }

    fn type_name(&self, ty: TypeId) -> String {
        match self.entry(ty) {
            Some(entry) => entry.c_name.clone(),
            None => format!("<bad type id {}>", ty.0),
        }
    }

    fn members(&self, ty: TypeId) -> Vec<Member> {
        match self.entry(ty).map(|e| &e.node) {
            Some(Node::Aggregate { members, .. }) => members.clone(),
            Some(Node::Typedef(target) | Node::Const(target)) => self.members(*target),
            _ => Vec::new(),
        }
    }

    fn enum_values(&self, name: &str) -> Result<Option<Vec<(String, i64)>>, FactsError> {
        self.check()?;
        let name = name.strip_prefix("enum ").unwrap_or(name);
        Ok(self
            .enums
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, values)| values.clone()))
    }

    fn struct_names(&self) -> Vec<String> {
        self.types
            .iter()
            .filter_map(|entry| match &entry.node {
                Node::Aggregate { name, .. } if !name.is_empty() => Some(name.clone()),
                _ => None,
            })
            .collect()
    }

    fn user_function(
        &self,
        path: &str,
        function: &str,
    ) -> Result<Option<FunctionProto>, FactsError> {
        self.check()?;
        let mut in_binary = self
            .user_functions
            .iter()
            .filter(|(binary, _)| binary == path)
            .peekable();
        if in_binary.peek().is_none() {
            return Ok(None);
        }
        match in_binary.find(|(_, proto)| proto.name == function) {
            Some((_, proto)) => Ok(Some(proto.clone())),
            None => Err(FactsError(format!(
                "the DWARF of {path} has no function `{function}`"
            ))),
        }
    }
}

/// Passes 1 and 2 for one script in tests: parses it (as `script.stp`,
/// with the preprocessor answering from `facts`) and elaborates it against
/// `facts` with `options`. Gives the program and its source map, or every
/// diagnostic rendered, for tests that check either.
pub fn try_elaborate(
    script: &str,
    facts: &dyn KernelFacts,
    options: &crate::sema::ElabOptions,
) -> Result<(crate::sema::Program, crate::source::SourceMap), String> {
    use crate::diag::render_plain;
    let config = |name: &str| facts.config(name);
    let env = crate::preprocess::PreprocessEnv {
        kernel: facts.version(),
        arch: facts.arch(),
        config: &config,
        args: &[],
    };
    let mut map = crate::source::SourceMap::new();
    let id = map.add("script.stp", script);
    let parsed = crate::parse::parse_file(&map, id, &env);
    if !parsed.diags.is_empty() {
        return Err(render_plain(&map, &parsed.diags));
    }
    let (program, diags) = crate::sema::elaborate(&[parsed.file], &[], facts, options);
    match program {
        Some(program) => Ok((program, map)),
        None => Err(render_plain(&map, &diags)),
    }
}

/// Passes 1 to 3 for one script in tests: parses it (as `script.stp`, with
/// the preprocessor answering from `facts`), elaborates it against `facts`
/// and lowers it to the IR. Panics with the rendered diagnostics on any
/// error, so a test states only what it checks.
pub fn lower_script(
    script: &str,
    facts: &dyn KernelFacts,
) -> (crate::ir::Module, crate::source::SourceMap) {
    let (program, map) = try_elaborate(script, facts, &crate::sema::ElabOptions::default())
        .unwrap_or_else(|errors| panic!("{errors}"));
    let module = crate::ir::lower::lower(&program)
        .unwrap_or_else(|d| panic!("{}", crate::diag::render_plain(&map, &d)));
    (module, map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{find_member, member_names};

    fn ty(kernel: &FakeKernel, name: &str) -> TypeId {
        kernel
            .find_type(name)
            .unwrap()
            .unwrap_or_else(|| panic!("no type {name}"))
    }

    fn member(kernel: &FakeKernel, strukt: &str, name: &str) -> Member {
        let ty = ty(kernel, strukt);
        find_member(kernel, ty, name).unwrap_or_else(|| panic!("no {strukt}.{name}"))
    }

    #[test]
    fn typical_kernel_basics() {
        let k = FakeKernel::new();
        assert_eq!(k.version().to_string(), "6.18.0");
        assert_eq!(k.version().release, "6.18.0-test");
        assert_eq!(k.arch(), "x86_64");
        assert_eq!(k.config("CONFIG_KPROBES").as_deref(), Some("y"));
        assert_eq!(k.config("CONFIG_NOPE"), None);
        assert!(k.mechanisms().kprobes && k.mechanisms().fentry);
    }

    #[test]
    fn builders_vary_the_kernel() {
        let k = FakeKernel::new()
            .with_version(6, 1, 0)
            .with_mechanisms(Mechanisms {
                tracepoints: true,
                ..Mechanisms::default()
            })
            .with_config("CONFIG_KPROBES", None)
            .with_config("CONFIG_HZ", Some("250"))
            .with_arch("aarch64");
        assert_eq!(k.version().release, "6.1.0-test");
        assert!(!k.mechanisms().kprobes);
        assert_eq!(k.config("CONFIG_KPROBES"), None);
        assert_eq!(k.config("CONFIG_HZ").as_deref(), Some("250"));
        assert_eq!(k.arch(), "aarch64");
        let host = FakeKernel::like_this_host();
        assert!(!host.mechanisms().kprobes && !host.mechanisms().fentry);
        assert!(host.mechanisms().tp_btf && host.mechanisms().uprobes);
        let failing = FakeKernel::new().with_facts_error("no BTF");
        assert_eq!(
            failing.function("tcp_sendmsg"),
            Err(FactsError("no BTF".into()))
        );
    }

    #[test]
    fn sk_buff_layout() {
        let k = FakeKernel::new();
        let skb = ty(&k, "struct sk_buff");
        assert_eq!(
            k.kind(skb),
            TypeKind::Struct {
                name: "sk_buff".into(),
                size: 224,
                is_union: false
            }
        );
        assert_eq!(member(&k, "struct sk_buff", "len").bit_offset, 112 * 8);
        // `dev` sits in an anonymous union; find_member adds the offsets.
        let dev = member(&k, "struct sk_buff", "dev");
        assert_eq!(dev.bit_offset, 16 * 8);
        assert_eq!(k.type_name(dev.ty), "struct net_device *");
        assert_eq!(member(&k, "struct sk_buff", "protocol").bit_offset, 176 * 8);
        assert_eq!(
            k.type_name(member(&k, "struct sk_buff", "protocol").ty),
            "__be16"
        );
        assert_eq!(member(&k, "struct sk_buff", "mark").bit_offset, 164 * 8);
        assert_eq!(member(&k, "struct sk_buff", "data").bit_offset, 200 * 8);
        let fclone = member(&k, "struct sk_buff", "fclone");
        assert_eq!((fclone.bit_offset, fclone.bitfield_bits), (1010, Some(2)));
        assert!(member_names(&k, skb).contains(&"dev_scratch".to_string()));
    }

    #[test]
    fn net_device_name_is_not_first() {
        let k = FakeKernel::new();
        let name = member(&k, "struct net_device", "name");
        assert_eq!(name.bit_offset, 280 * 8);
        assert_eq!(k.type_name(name.ty), "char[16]");
        let char_ty = ty(&k, "char");
        assert_eq!(
            k.kind(name.ty),
            TypeKind::Array {
                elem: char_ty,
                len: 16
            }
        );
        assert_eq!(
            k.kind(char_ty),
            TypeKind::Int {
                bytes: 1,
                signed: true,
                is_char: true
            }
        );
    }

    #[test]
    fn sock_common_through_nested_anonymous_members() {
        let k = FakeKernel::new();
        assert_eq!(member(&k, "struct sock_common", "skc_daddr").bit_offset, 0);
        assert_eq!(
            member(&k, "struct sock_common", "skc_rcv_saddr").bit_offset,
            32
        );
        assert_eq!(member(&k, "struct sock_common", "skc_dport").bit_offset, 96);
        assert_eq!(member(&k, "struct sock_common", "skc_num").bit_offset, 112);
        assert_eq!(
            member(&k, "struct sock_common", "skc_state").bit_offset,
            144
        );
        let first = &k.members(ty(&k, "struct sock"))[0];
        assert_eq!((first.name.as_str(), first.bit_offset), ("__sk_common", 0));
        let iph = member(&k, "struct iphdr", "ihl");
        assert_eq!((iph.bit_offset, iph.bitfield_bits), (0, Some(4)));
        assert_eq!(member(&k, "struct iphdr", "daddr").bit_offset, 128);
        assert_eq!(member(&k, "struct tcphdr", "syn").bitfield_bits, Some(1));
    }

    #[test]
    fn typedefs_and_qualifiers_peel() {
        let k = FakeKernel::new();
        let be16 = ty(&k, "__be16");
        assert_eq!(
            k.kind(be16),
            TypeKind::Int {
                bytes: 2,
                signed: false,
                is_char: false
            }
        );
        assert_eq!(k.type_name(be16), "__be16");
        assert_eq!(ty(&k, "long unsigned int"), ty(&k, "unsigned long"));
        assert_eq!(ty(&k, "struct  sk_buff*"), ty(&k, "struct sk_buff *"));
        assert_eq!(k.find_type("struct no_such_thing").unwrap(), None);
        assert_eq!(k.find_type("union sk_buff::dev_u").unwrap(), None);
        assert!(k.struct_names().contains(&"tcphdr".to_string()));
        assert!(!k.struct_names().iter().any(String::is_empty));
    }

    #[test]
    fn tracepoints() {
        let k = FakeKernel::new();
        let tp = k.tracepoint(Some("skb"), "kfree_skb").unwrap().unwrap();
        let TracepointArgs::Raw(params) = &tp.args else {
            panic!("kfree_skb should be raw")
        };
        let names: Vec<_> = params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["skb", "location", "reason", "rx_sk"]);
        assert_eq!(k.type_name(params[2].ty), "enum skb_drop_reason");
        assert_eq!(
            k.kind(params[2].ty),
            TypeKind::Enum {
                name: "skb_drop_reason".into(),
                bytes: 4,
                signed: false
            }
        );
        assert_eq!(
            k.tracepoint(None, "net_dev_xmit").unwrap().unwrap().system,
            "net"
        );
        assert_eq!(k.tracepoint(Some("net"), "kfree_skb").unwrap(), None);
        let set_state = k
            .tracepoint(Some("sock"), "inet_sock_set_state")
            .unwrap()
            .unwrap();
        let TracepointArgs::Raw(params) = &set_state.args else {
            panic!("raw expected")
        };
        assert_eq!(k.type_name(params[0].ty), "const struct sock *");
        assert!(matches!(k.kind(params[0].ty), TypeKind::Pointer(_)));

        let openat = k
            .tracepoint(Some("syscalls"), "sys_enter_openat")
            .unwrap()
            .unwrap();
        let TracepointArgs::Classic(fields) = &openat.args else {
            panic!("classic expected")
        };
        let layout: Vec<_> = fields
            .iter()
            .map(|f| (f.name.as_str(), f.offset, f.size))
            .collect();
        assert_eq!(
            layout,
            [
                ("__syscall_nr", 8, 4),
                ("dfd", 16, 8),
                ("filename", 24, 8),
                ("flags", 32, 8),
                ("mode", 40, 8)
            ]
        );
        assert_eq!(k.type_name(fields[2].ty), "const char *");
        assert!(
            k.tracepoint_names()
                .unwrap()
                .contains(&("tcp".into(), "tcp_probe".into()))
        );
    }

    #[test]
    fn functions() {
        let k = FakeKernel::new();
        let f = k.function("tcp_sendmsg").unwrap().unwrap();
        let params: Vec<_> = f
            .params
            .iter()
            .map(|p| (p.name.as_str(), k.type_name(p.ty)))
            .collect();
        assert_eq!(
            params,
            [
                ("sk", "struct sock *".to_string()),
                ("msg", "struct msghdr *".into()),
                ("size", "size_t".into())
            ]
        );
        assert_eq!(f.ret.map(|r| k.type_name(r)).as_deref(), Some("int"));
        assert_eq!(f.module, None);
        assert_eq!(k.function("tcp_close").unwrap().unwrap().ret, None);
        let nf = k.function("nf_conntrack_in").unwrap().unwrap();
        assert_eq!(nf.module.as_deref(), Some("nf_conntrack"));
        assert!(k.function_names().unwrap().len() >= 12);
        assert_eq!(k.function("no_such_function").unwrap(), None);
    }

    #[test]
    fn enums_and_opaque_types() {
        let k = FakeKernel::new();
        let values = k.enum_values("skb_drop_reason").unwrap().unwrap();
        assert!(values.contains(&("SKB_DROP_REASON_NO_SOCKET".to_string(), 3)));
        assert_eq!(
            k.enum_values("enum skb_drop_reason")
                .unwrap()
                .unwrap()
                .len(),
            values.len()
        );
        assert_eq!(k.enum_values("nope").unwrap(), None);
        // Types the tables only point at are forward declarations.
        let net = ty(&k, "struct net");
        assert_eq!(k.kind(net), TypeKind::Opaque { name: "net".into() });
        assert!(k.members(net).is_empty());
    }
}
