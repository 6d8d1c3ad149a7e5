# Building the test executable: `cargo test --release --no-run
# shellcheck shell=bash disable=SC2034  # globals are read by the sourcing script
# --message-format=json` names it. The stap-rs binary the live tests start is
# built alongside (integration tests get it through CARGO_BIN_EXE_stap-rs,
# a compile-time absolute path inside the target directory).
# Sets TEST_EXE (absolute path), TEST_CWD (the package's directory, where
# cargo would run the test), WORKSPACE_ROOT and TARGET_DIR.

build_test_exe() {
  local repo=$1 json line
  shift
  local cargo_args=("$@")
  log "cargo test --release ${cargo_args[*]} --no-run"
  json=$(cd "$repo" && cargo test --release --locked "${cargo_args[@]}" --no-run --message-format=json) \
    || die "building the test executable failed"
  # One artifact per test target asked for; the harness runs exactly one.
  line=$(jq -r 'select(.reason == "compiler-artifact" and .executable != null
                       and (.target.kind | index("test")))
                | "\(.executable)\t\(.manifest_path)"' <<<"$json")
  [ -n "$line" ] || die "cargo built no test executable for: ${cargo_args[*]}"
  [ "$(wc -l <<<"$line")" = 1 ] || die "more than one test executable for: ${cargo_args[*]} (name one with --test)"
  TEST_EXE=${line%%$'\t'*}
  TEST_CWD=$(dirname "${line#*$'\t'}")
  read_cargo_dirs "$repo"
}

# WORKSPACE_ROOT and TARGET_DIR from cargo metadata.
read_cargo_dirs() {
  local meta
  meta=$(cd "$1" && cargo metadata --no-deps --format-version 1) || die "cargo metadata failed"
  WORKSPACE_ROOT=$(jq -r .workspace_root <<<"$meta")
  TARGET_DIR=$(jq -r .target_directory <<<"$meta")
}
