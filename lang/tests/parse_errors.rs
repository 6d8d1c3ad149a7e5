//! Error snapshots: each broken input with its rendered diagnostics.

use stap_lang::diag::render_plain;
use stap_lang::kernel::KernelVersion;
use stap_lang::parse::parse_file;
use stap_lang::preprocess::PreprocessEnv;
use stap_lang::source::SourceMap;

fn no_config(_: &str) -> Option<String> {
    None
}

/// Parses `text` (with script arguments `args`) and renders every
/// diagnostic; panics if the input unexpectedly parses cleanly.
fn errors_with_args(text: &str, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let env = PreprocessEnv {
        kernel: KernelVersion {
            major: 6,
            minor: 12,
            patch: 48,
            release: "6.12.48+deb12-amd64".into(),
        },
        arch: "x86_64".into(),
        config: &no_config,
        args: &args,
    };
    let mut map = SourceMap::new();
    let file = map.add("bad.stp", text);
    let parsed = parse_file(&map, file, &env);
    assert!(!parsed.diags.is_empty(), "expected an error for:\n{text}");
    render_plain(&map, &parsed.diags)
}

macro_rules! error_snapshot {
    ($name:ident, $text:expr) => {
        error_snapshot!($name, $text, &[]);
    };
    ($name:ident, $text:expr, $args:expr) => {
        #[test]
        fn $name() {
            let text: &str = $text;
            insta::with_settings!({ description => text, omit_expression => true }, {
                insta::assert_snapshot!(errors_with_args(text, $args));
            });
        }
    };
}

// Syntax errors.
error_snapshot!(missing_close_paren, "probe begin { printf(\"%d\\n\", x }");
error_snapshot!(missing_close_brace, "probe begin { x = 1\n");
error_snapshot!(unterminated_string, "probe begin { s = \"abc\n}");
error_snapshot!(
    unterminated_comment,
    "probe begin { } /* never closed\nprobe end {}"
);
error_snapshot!(bad_token, "probe begin { x = 1 ` 2 }");
error_snapshot!(missing_probe_body, "probe begin\nprobe end { }");
error_snapshot!(bad_probe_point, "probe kernel..function(\"f\") { }");
error_snapshot!(foreach_without_in, "probe end { foreach (x arr) print(x) }");
error_snapshot!(stray_else, "probe begin { else x = 1 }");
error_snapshot!(unexpected_eof, "function f(a, b");
error_snapshot!(bad_number_literal, "probe begin { x = 0x + 09 }");
error_snapshot!(number_too_large, "global big = 99999999999999999999");
error_snapshot!(unknown_type, "function f:float(x) { return x }");
error_snapshot!(
    several_errors_recovered,
    "probe begin { x = ; y = 1 }\nprobe end { z = (1 + }\nglobal ok"
);
error_snapshot!(unknown_bulk_context, "probe begin { print($$all) }");

// Preprocessor errors.
error_snapshot!(
    unknown_condition,
    "probe begin { %( kernel_version >= \"5.0\" %? x = 1 %) }"
);
error_snapshot!(
    missing_pp_close,
    "probe begin { %( arch == \"x86_64\" %? x = 1 }"
);
error_snapshot!(bad_dollar_argument, "probe begin { x = $1 }", &["\"eth0"]);
error_snapshot!(missing_argument, "probe begin { x = $2 y = @3 }", &["1"]);
error_snapshot!(
    recursive_macro,
    "@define a %( @b + 1 %)\n@define b %( @a %)\nprobe begin { x = @a }"
);
error_snapshot!(
    undefined_macro,
    "@define limit %( 10 %)\nprobe begin { x = @limt }"
);
error_snapshot!(
    defined_in_condition,
    "probe begin { %( @defined($x) %? y = 1 %) }"
);
error_snapshot!(
    macro_argument_count,
    "@define bigger(a, b) %( (@a > @b ? @a : @b) %)\nprobe begin { x = @bigger(1) }"
);
error_snapshot!(stray_pp_else, "probe begin { x = 1 %: y = 2 }");
error_snapshot!(
    uncomparable_condition,
    "probe begin { %( $# == \"two\" %? x = 1 %) }"
);
error_snapshot!(
    macro_named_like_builtin,
    "@define max(a, b) %( @a %)\nprobe begin { }"
);
error_snapshot!(modulo_looks_like_conditional, "probe begin { y = a%(b) }");

// A reserved word where a name is expected says why it cannot be used.
error_snapshot!(
    reserved_word_as_name,
    "global limit\nprobe begin { limit = 5 }\n"
);
