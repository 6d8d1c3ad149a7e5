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
        ] {
            assert!(reason(name).is_some(), "{name}");
        }
        for name in ["set_arg", "set_foo_arg", "user_string", "settle"] {
            assert!(reason(name).is_none(), "{name}");
        }
    }
}
