//! Functions of stap's tapset library in kernel probes. The user-memory
//! family: the integer reads of every width and sign over the bytes of a
//! path the kernel is given, and what each form does when the memory
//! cannot be read (0, a warning, a catchable error, a fallback text or
//! the address). The constants and byte-order conversions, computed in
//! BPF, against the same values computed here.

use super::{Session, assert_success, build, serial, trigger_until_done};

/// The file name's bytes (UTF-8 of "AB\u{e9}CD\u{fc}"): high bytes, so
/// that the signed and unsigned reads differ, and a last byte >= 0x80, so
/// that the 64-bit read is negative.
const NAME: &str = "AB\u{e9}CD\u{fc}";

#[test]
fn user_integer_reads_and_their_fault_forms_in_a_tracepoint() {
    let _one = serial();
    let trigger = build("trigger");
    let dir = std::env::temp_dir().join(format!("stap-rs-umem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join(NAME);
    let path = path.to_str().expect("utf-8 path");
    // `o` is the offset of NAME's 8 bytes in the path.
    let mut session = Session::start(&[
        "-e",
        r#"probe kernel.trace("syscalls:sys_enter_openat") {
             if (execname() != "stapUMem") next
             f = $filename
             s = user_string(f)
             if (!isinstr(s, "stap-rs-umem-") || isinstr(s, ".missing")) next
             o = f + strlen(s) - 8
             printf("%d %d %d %d %d %d %d\n", user_char(o + 2), user_int8(o + 2),
                    user_uint8(o + 2), user_short(o + 2), user_int16(o + 2),
                    user_ushort(o + 2), user_uint16(o + 2))
             printf("%d %d %d %d %d %d %d %d\n", user_int(o + 4), user_int32(o + 4),
                    user_uint32(o + 4), user_long(o), user_int64(o), user_uint64(o),
                    user_ulong(o), user_uint32_error(o))
             printf("fault %d %d %d %d|%s|%s|%s|%s\n", user_int(0), user_char(0),
                    user_ulong_warn(0), user_short_warn(0), user_string_warn(0),
                    user_string_nofault(0), user_string2(0, "dflt"),
                    user_string_n_warn(0, 3, "w"))
             try { println(user_int64_error(0)) } catch (m) { println("caught") }
             printf("%s %s %s %s %s\n", user_string_n_quoted(o, 2), user_string_n_quoted(0, 2),
                    user_string_n2(o, 2, "x"), user_string_n_nofault(o, 1),
                    kernel_string_quoted(0))
             exit()
           }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapUMem", "open", path]);
    let done = session.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert_success(&done);

    let b = NAME.as_bytes();
    let i16_at = |k: usize| i16::from_le_bytes([b[k], b[k + 1]]);
    let u16_at = |k: usize| u16::from_le_bytes([b[k], b[k + 1]]);
    let bytes4 = |k: usize| [b[k], b[k + 1], b[k + 2], b[k + 3]];
    let whole = i64::from_le_bytes(b[..8].try_into().unwrap());
    let expected = format!(
        "{c} {c} {uc} {s} {s} {us} {us}\n{i} {i} {ui} {l} {l} {l} {l} {u0}\n\
         fault 0 0 0 0|||dflt|w\ncaught\n\"AB\" 0x0 AB A 0x0\n",
        c = b[2] as i8,
        uc = b[2],
        s = i16_at(2),
        us = u16_at(2),
        i = i32::from_le_bytes(bytes4(4)),
        ui = u32::from_le_bytes(bytes4(4)),
        l = whole,
        u0 = u32::from_le_bytes(bytes4(0)),
    );
    assert_eq!(done.stdout, expected, "stderr: {}", done.stderr);
    // The `_warn` forms say what failed, in stap's words.
    for warning in [
        "user unsigned long copy fault 0x",
        "user short copy fault 0x",
        "user string copy fault -14 at 0x0 [man error::fault]",
    ] {
        assert!(done.stderr.contains(warning), "{warning}: {}", done.stderr);
    }
}

/// The byte-order and wait-status helpers (stdlib/lib/bits.stp) in a
/// tracepoint, on values whose results Rust computes.
#[test]
fn byte_order_and_wait_status_helpers_in_a_tracepoint() {
    let _one = serial();
    let trigger = build("trigger");
    let dir = std::env::temp_dir().join(format!("stap-rs-bits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join("f");
    let path = path.to_str().expect("utf-8 path");
    let mut session = Session::start(&[
        "-e",
        r#"probe kernel.trace("syscalls:sys_enter_openat") {
             if (execname() != "stapBits") next
             printf("%d %d %x %x %x %x %x %x %d %d %d\n", AF_INET(), AF_INET6(),
                    big_endian2(0x1234), big_endian4(0x12345678),
                    htonll(0x0102030405060708), ntohll(htonll(-2)), little_endian2(0x12345),
                    big_endian8(1), WIFEXITED(0x0300), WEXITSTATUS(0x0300), WTERMSIG(0x89))
             exit()
           }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapBits", "open", path]);
    let done = session.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert_success(&done);
    let expected = format!(
        "2 10 {:x} {:x} {:x} {:x} {:x} {:x} 1 3 9\n",
        0x1234u16.swap_bytes(),
        0x1234_5678u32.swap_bytes(),
        0x0102_0304_0506_0708u64.swap_bytes(),
        (-2i64) as u64,
        0x12345 & 0xffff,
        1u64.swap_bytes(),
    );
    assert_eq!(done.stdout, expected, "stderr: {}", done.stderr);
}
