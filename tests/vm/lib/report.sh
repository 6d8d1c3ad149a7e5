# Reading results.tsv files back and printing the per-target summary.
# shellcheck shell=bash disable=SC2034  # globals are read by the sourcing script
# results.tsv columns: name, status (passed|failed|skipped), seconds, log file, reason.

TOTAL_PASSED=0 TOTAL_FAILED=0 TOTAL_SKIPPED=0
SUMMARY_ROWS=()

# Tests run-tests listed but never reported (the guest died or timed out):
# appended to results.tsv as failures, pointing at $3 (the log that tells
# why), so nothing goes missing silently.
mark_missing_results() {
  local out=$1 why=$2 logfile=$3 name
  [ -f "$out/list" ] || {
    printf '%s\t%s\t%s\t%s\t%s\n' "(whole run)" failed 0 "$logfile" "$why" >"$out/results.tsv"
    return
  }
  local n=0 log
  touch "$out/results.tsv"
  while IFS= read -r name; do
    n=$((n + 1))
    cut -f1 "$out/results.tsv" | grep -qxF -- "$name" && continue
    # The test that was running when the run ended has its own partial log.
    log=$(printf '%03d.log' "$n")
    [ -f "$out/$log" ] || log=$logfile
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" failed 0 "$log" "no result: $why" >>"$out/results.tsv"
  done <"$out/list"
}

# Prints one target's table (failures with the end of their output) and adds
# its counts to the totals. $1 label, $2 kernel, $3 results dir, $4 boot s, $5 wall s.
report_target() {
  local label=$1 kernel=$2 out=$3 boot=$4 wall=$5
  local name status secs logfile reason passed=0 failed=0 skipped=0
  echo
  echo "== $label: kernel $kernel, boot ${boot}s, wall ${wall}s, logs in $out"
  while IFS=$'\t' read -r name status secs logfile reason; do
    case $status in
      passed) passed=$((passed + 1)); printf '  PASS  %6ss  %s\n' "$secs" "$name" ;;
      skipped) skipped=$((skipped + 1)); printf '  SKIP  %6ss  %s: %s\n' "$secs" "$name" "$reason" ;;
      *) failed=$((failed + 1)); printf '  FAIL  %6ss  %s: %s\n' "$secs" "$name" "$reason" ;;
    esac
  done <"$out/results.tsv"
  # Failures again, each with the end of its output (a log shared by
  # several, the guest's console, only once).
  local -A shown=()
  while IFS=$'\t' read -r name status secs logfile reason; do
    [ "$status" = failed ] || continue
    if [ -n "${shown[$logfile]:-}" ]; then
      echo "  ---- $label: $name: see $logfile above"
      continue
    fi
    shown[$logfile]=1
    echo "  ---- $label: $name ($out/$logfile, last 40 lines)"
    if [ -f "$out/$logfile" ]; then tail -n 40 "$out/$logfile" | awk '{ print "  | " $0 }'; fi
  done <"$out/results.tsv"
  echo "$label: $passed passed, $failed failed, $skipped skipped"
  TOTAL_PASSED=$((TOTAL_PASSED + passed))
  TOTAL_FAILED=$((TOTAL_FAILED + failed))
  TOTAL_SKIPPED=$((TOTAL_SKIPPED + skipped))
  SUMMARY_ROWS+=("$(printf '%-6s %-26s %6s %7s %6s %6s %7s' "$label" "$kernel" "$boot" "$wall" "$passed" "$failed" "$skipped")")
}

print_summary() {
  local row
  echo
  printf '%-6s %-26s %6s %7s %6s %6s %7s\n' target kernel boot-s wall-s passed failed skipped
  for row in "${SUMMARY_ROWS[@]}"; do echo "$row"; done
}

# A test skipped on every target of a full run (host, 6.1, 6.12) runs
# nowhere: that is a failure. Prints each such test; returns non-zero if any.
check_skipped_everywhere() {
  local dirs=("$@") name d bad=0 everywhere
  while IFS= read -r name; do
    everywhere=1
    for d in "${dirs[@]}"; do
      awk -F'\t' -v n="$name" '$1 == n && $2 == "skipped" { found = 1 } END { exit !found }' \
        "$d/results.tsv" || everywhere=0
    done
    if [ "$everywhere" = 1 ]; then
      echo "FAIL  $name: skipped on every target (host, 6.1, 6.12)"
      TOTAL_FAILED=$((TOTAL_FAILED + 1))
      bad=1
    fi
  done < <(cut -f1 "${dirs[0]}/results.tsv")
  return "$bad"
}
