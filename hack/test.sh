#!/usr/bin/env bash
# `make test`: every test layer (lint, unit, integration, node, e2e) and every build they need,
# scheduled side by side instead of one after another. Nothing is skipped: each job below runs the
# Makefile target a developer runs alone, and the run fails if any of them fails.
#
# On 2 cores a cold run is mostly compiling, and the compiles only fill both cores where something
# else waits: apt and module downloads, single-threaded links, the e2e suite's waits on a real
# cluster. So the critical path — the Kubernetes binaries, the node tests, the e2e suite — runs at
# normal priority, and everything that no later layer waits for (lint, unit, -race, integration,
# the builds of tools the e2e suite needs later) runs beside it at a lower priority (nice), taking
# the CPU the critical path leaves idle. Node tests and the e2e suite both own the machine's loop
# devices, mounts and kubelet paths: they run one after the other, never beside each other.
#
# Each job's lines are prefixed with its name; "== job ..." lines say when each started and ended.
# PVRESCUE_FRESH_DEVICES=1 (CI) brings the loop devices back to a fresh boot's (make
# fresh-devices) before the first layer that uses them (node).
set -uo pipefail
cd "$(dirname "$0")/.."

MAKE="${MAKE:-make}"
# Lower priority of the jobs beside the critical path (nice 10: weight 110 against 1024).
BESIDE_NICE="${BESIDE_NICE:-10}"
# The tools the e2e suite waits for (Helm CLIs) run between the two (nice 5: weight 335).
TOOLS_NICE="${TOOLS_NICE:-5}"
state="$(mktemp -d)"
trap 'rm -rf "$state"' EXIT
# Each job runs in a process group of its own (set -m); interrupted (Ctrl-C, CI's timeout), the
# script ends every job's group with it, as one make would end its recipes.
set -m
job_pids=()
trap 'trap - INT TERM; for p in "${job_pids[@]}"; do kill -TERM -- -"$p" 2>/dev/null; done; exit 130' INT TERM
t0=$SECONDS

say() { printf '== %s (at %ds)\n' "$*" $((SECONDS - t0)); }

# after JOB...: waits until each job ended; returns 99 (not run) if one of them did not pass.
after() {
  local j
  for j in "$@"; do
    until [ -e "$state/$j.rc" ]; do sleep 1; done
    if [ "$(cat "$state/$j.rc")" != 0 ]; then
      echo "not run: job $j did not pass"
      return 99
    fi
  done
  say "$JOB: $* done"
}

# job NAME NICE FUNCTION: runs FUNCTION in the background at niceness NICE, its output prefixed
# with [NAME]; its exit code lands in $state/NAME.rc.
jobs_started=()
job() {
  local name=$1 nice=$2 fn=$3
  jobs_started+=("$name")
  (
    renice -n "$nice" -p "$BASHPID" >/dev/null
    JOB=$name
    s=$SECONDS
    say "$name started (nice $nice)"
    "$fn" 2>&1 | tee "$state/$name.log" | sed -u "s/^/[$name] /"
    rc=${PIPESTATUS[0]}
    echo "$rc $((SECONDS - s)) $((s - t0))" >"$state/$name.time"
    echo "$rc" >"$state/$name.rc"
    say "$name ended rc=$rc after $((SECONDS - s))s"
  ) &
  job_pids+=($!)
}

# --- the jobs -------------------------------------------------------------------------------

# Host packages (apt) and kernel modules: everything that runs node, e2e or promtool waits for it;
# every Go build runs beside it. The one job that may call apt-get.
j_deps() { $MAKE deps; }

# Critical path: the Kubernetes binaries into the version cache, then into bin/ (with etcd, which
# comes from apt). kube-apiserver first — integration and node tests need only it (with etcd) and
# start on it — then the other four in one go build (most of their packages compiled by then),
# beside the node tests, for the e2e suite.
j_kube_api() {
  $MAKE kube-binaries-together KUBE_TEST_BINARIES=kube-apiserver && after deps && $MAKE kube-binaries
}
j_kube() { after kube_api && $MAKE kube-binaries-together && $MAKE kube-binaries-all kubectl; }

# The S3 server of the node tests and the e2e suite (its own module; on the way to the node tests).
j_versitygw() { $MAKE versitygw; }

# What only the e2e suite needs: the Helm CLIs (it waits for them: between the critical path and
# the rest in priority).
j_tools() { $MAKE helm-clis; }

# The e2e suite's own compiles done ahead (e2e-prebuild), so its image builds find them in the
# cache; nothing waits for it.
j_prewarm() { $MAKE e2e-prebuild; }

# Everything no other layer waits for: lint's vet first (it compiles most packages every later
# layer needs), then golangci-lint beside unit (its promtool check needs apt) with -race.
j_vet() { $MAKE vet; }
j_golangci_build() { $MAKE golangci-lint; }
j_golangci() { after vet golangci_build && $MAKE lint-golangci; }
j_unit() { after vet deps && $MAKE unit; }

j_integration() { after kube_api && $MAKE integration; }

# The images as make images builds them: two builds, one digest; the arm64 binaries under
# qemu-user-static, the amd64 ones in a chroot (apt's arm64 index and qemu come with deps).
j_images() { after deps && $MAKE image-check; }

# Node tests, then the e2e suite: one after the other (one machine's loop devices, mounts and
# kubelet paths). With PVRESCUE_FRESH_DEVICES=1 (CI) the loop devices are first brought back to a
# fresh boot's, so a test relying on devices an earlier run left fails here.
j_node() {
  after deps kube_api versitygw || return 1
  if [ "${PVRESCUE_FRESH_DEVICES:-}" = 1 ]; then $MAKE fresh-devices || return 1; fi
  $MAKE node
}
j_e2e() { after node kube tools && $MAKE e2e; }

job deps 0 j_deps
job kube_api 0 j_kube_api
job kube 0 j_kube
job versitygw 0 j_versitygw
job vet "$BESIDE_NICE" j_vet
job golangci_build "$BESIDE_NICE" j_golangci_build
job golangci "$BESIDE_NICE" j_golangci
job unit "$BESIDE_NICE" j_unit
job tools "$TOOLS_NICE" j_tools
job prewarm "$BESIDE_NICE" j_prewarm
job integration "$BESIDE_NICE" j_integration
job images "$BESIDE_NICE" j_images
job node 0 j_node
job e2e 0 j_e2e
wait

echo
echo "== make test: job, result, ended at (s since start)"
failed=0
for j in "${jobs_started[@]}"; do
  read -r rc secs start <"$state/$j.time" || rc=?
  case "$rc" in 0) r=passed ;; 99) r="not run" ;; *) r="FAILED (rc $rc)" ;; esac
  printf '   %-15s %-16s %6ss\n' "$j" "$r" "$((start + secs))"
  [ "$rc" = 0 ] || failed=1
done
# What failed, last: a CI system that keeps only the end of the output still names the failed
# tests and their last complaints (a failed layer's whole log is above, prefixed with its name).
for j in "${jobs_started[@]}"; do
  read -r rc _ <"$state/$j.time" 2>/dev/null || continue
  case "$rc" in 0 | 99) continue ;; esac
  echo "== $j failed; its failed tests, then its last test complaints:"
  grep -E -e '--- FAIL: ' -e '^(FAIL|panic:)' "$state/$j.log" | sed 's/^ *//' | head -n 8 | sed "s/^/   [$j] /"
  grep -E '_test\.go:[0-9]+: .*([Ff]ail|[Ee]rror|want|should|expected|timed out|not reached|refused)' "$state/$j.log" |
    tail -n 6 | cut -c1-300 | sed "s/^/   [$j] /"
done
echo "== make test: $((SECONDS - t0))s, $([ $failed = 0 ] && echo passed || echo FAILED)"
exit $failed
