//! Tapset functions stap-rs knows but refuses, each with the reason: a
//! script calling one gets that reason at its line rather than "unknown
//! function", so the user learns why it cannot run here.

/// Why `name` (a function of stap's tapset reference) cannot run under
/// stap-rs, or `None` if it is not one of the refused ones.
pub fn reason(name: &str) -> Option<&'static str> {
    const MEMORY_WRITE: &str = "writes the probed program's memory, which stap allows only in guru \
         mode (-g) and stap-rs refuses with or without it, as it refuses assignments to `$` \
         variables: BPF programs cannot write kernel memory";
    const REGISTER_WRITE: &str = "changes an argument or the return value of the probed \
         function (stap: guru mode); BPF probes cannot change the probed function's registers";
    if name.starts_with("set_kernel_") || name.starts_with("set_user_") {
        return Some(MEMORY_WRITE);
    }
    let is_arg_write = name
        .strip_prefix("set_")
        .and_then(|rest| rest.strip_suffix("_arg"))
        .is_some_and(|ty| {
            matches!(
                ty,
                "int"
                    | "uint"
                    | "long"
                    | "ulong"
                    | "longlong"
                    | "ulonglong"
                    | "pointer"
                    | "s32"
                    | "u32"
                    | "s64"
                    | "u64"
            )
        });
    if is_arg_write || name == "set_returnval" {
        return Some(REGISTER_WRITE);
    }
    Some(match name {
        "panic" => {
            "crashes the kernel on purpose (stap: embedded C, guru mode); a BPF program cannot"
        }
        "mdelay" | "udelay" => {
            "busy-waits inside the probe (stap: embedded C, guru mode); BPF programs cannot spin or sleep"
        }
        "raise" => {
            "sends a signal from inside the kernel (stap: embedded C, guru mode); not implemented"
        }
        "printk" => {
            "writes to the kernel log (stap: embedded C, guru mode); BPF programs cannot; use printf or log"
        }
        "stack_used" | "stack_unused" => {
            "measures the kernel stack by the address of a local variable (stap: embedded C); \
             the BPF verifier does not let a program turn its stack pointer into a number"
        }
        "print_regs" => {
            "prints the probe's saved registers in the kernel's register-dump layout (stap: \
             embedded C); not implemented: read single registers with register(\"rip\") and friends"
        }
        "dump_stack" => {
            "writes a stack dump to the kernel log (stap: embedded C); BPF programs cannot; use print_backtrace"
        }
        "ftrace" => "writes to the ftrace ring buffer (stap: embedded C); not implemented",
        "stp_print_binary" | "switch_file" => {
            "belongs to stap's binary output and output-file switching (-b, -S), which stap-rs does not implement"
        }
        "cve_count_metric" | "cve_record_metric" | "cve_tmpdisable" => {
            "belongs to stap's CVE band-aid tapset, which patches kernel behaviour (embedded C, guru mode); BPF probes cannot"
        }
        "fp_add" | "fp_sub" | "fp_mul" | "fp_div" | "fp_rem" | "fp_sqrt" | "fp_eq" | "fp_le"
        | "fp_lt" | "fp_to_long" | "fp_to_string" | "fp32_to_fp64" | "long_to_fp"
        | "string_to_fp" => {
            "belongs to stap's floating-point tapset (software floats in embedded C), which stap-rs does not implement"
        }
        "print_java_backtrace" | "sprint_java_backtrace" => {
            "needs stap's Byteman-based Java support, which stap-rs does not implement"
        }
        "python_print_backtrace"
        | "python_sprint_backtrace"
        | "python3_get_locals"
        | "python3_get_var_obj"
        | "python3_initialize"
        | "Py3Object_GetAttr"
        | "Py3Object_Repr" => {
            "belongs to stap's Python tapset, which walks CPython's interpreter through embedded C; not implemented"
        }
        "NFS_I"
        | "NFS_PROTO"
        | "NFS_SERVER"
        | "stap_NFS_CLIENT"
        | "nfs3_cmode"
        | "nfs4_ctype"
        | "clones_from_clnt"
        | "tasks_from_clnt"
        | "prog_from_clnt"
        | "prot_from_clnt"
        | "port_from_clnt"
        | "port_from_xprt"
        | "vers_from_clnt"
        | "vers_from_prog"
        | "xid_from_clnt"
        | "proc_from_msg"
        | "get_ip_from_client"
        | "get_prot_from_client"
        | "get_ip"
        | "get_prot"
        | "ftype"
        | "daddr_to_string" => {
            "reads NFS or SunRPC structures (stap: embedded C in its nfs and rpc tapsets); their types \
             live in the nfs and sunrpc modules, and stap-rs takes types from vmlinux BTF only"
        }
        "kernel_string_utf16"
        | "kernel_string_utf32"
        | "kernel_string2_utf16"
        | "kernel_string2_utf32"
        | "kernel_string_quoted_utf16"
        | "kernel_string_quoted_utf32"
        | "kernel_or_user_string_quoted_utf16"
        | "kernel_or_user_string_quoted_utf32"
        | "user_string_utf16"
        | "user_string_utf32"
        | "user_string2_utf16"
        | "user_string2_utf32"
        | "user_string_quoted_utf16"
        | "user_string_quoted_utf32" => {
            "converts UTF-16 or UTF-32 text to UTF-8 (stap: embedded C); not implemented"
        }
        "module_size" => {
            "reports the section sizes of stap's kernel module; stap-rs loads BPF programs, not a module"
        }
        "user_buffer_quoted"
        | "user_buffer_quoted_error"
        | "kernel_buffer_quoted"
        | "kernel_buffer_quoted_error" => {
            "quotes a buffer that may hold NUL bytes, and stap-rs strings end at the first NUL; \
             use user_string_n_quoted or kernel_string_quoted for text"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::reason;

    #[test]
    fn the_writers_and_guru_functions_are_refused() {
        for name in [
            "set_kernel_int",
            "set_user_string_n",
            "set_ulonglong_arg",
            "set_returnval",
            "panic",
            "udelay",
            "printk",
            "kernel_buffer_quoted",
            "module_size",
            "stack_used",
            "fp_add",
            "NFS_I",
            "user_string_utf16",
            "python3_get_locals",
        ] {
            assert!(reason(name).is_some(), "{name}");
        }
        for name in ["set_arg", "set_foo_arg", "user_string", "settle"] {
            assert!(reason(name).is_none(), "{name}");
        }
    }
}
