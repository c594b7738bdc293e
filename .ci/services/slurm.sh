#!/usr/bin/env bash
# CI service: a two-node Slurm cluster (n1, n2) on this one machine, for tests/test_slurm.py.
# Installs nothing (slurm-wlm and munge come from .ci/apt-packages.txt, which .ci/run installs
# first); starts munged, slurmctld and one slurmd per node, and waits until sinfo shows both
# nodes idle. Rerunning it restarts the daemons it started before (by their pid files).
set -euo pipefail
cd "$(dirname "$0")/../.."

CONF=/etc/slurm/slurm.conf
MARK="Written by .ci/services/slurm.sh"
RUN=/run/reprokit-slurm
LOG=/var/log/reprokit-slurm
SPOOL=/var/spool/reprokit-slurm
WAIT_S=${SLURM_WAIT_S:-90}
started=$(date +%s)

die() {
  echo "slurm service: $*" >&2
  for log in "$LOG"/*.log /var/log/munge/munged.log; do
    [ -f "$log" ] && { echo "---- tail of $log" >&2; tail -n 20 "$log" >&2; }
  done
  exit 1
}

for tool in munged slurmctld slurmd sinfo sbatch; do
  command -v "$tool" >/dev/null || die "$tool is missing: .ci/apt-packages.txt must list slurm-wlm and munge"
done
# The clients (sbatch, squeue, sinfo) read /etc/slurm/slurm.conf: never overwrite a real cluster's.
if [ -f "$CONF" ] && ! grep -q "$MARK" "$CONF"; then
  die "$CONF exists and is not the CI cluster's; this script only runs on a machine without Slurm"
fi

# ---- munge: the key and the daemon (slurm authenticates every RPC with it) --------------------
if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --keyfile=/etc/munge/munge.key
fi
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  # No systemd here: munged runs as its own user, as its unit file would start it.
  runuser -u munge -- munged || die "munged did not start"
  for _ in $(seq 1 20); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
    sleep 0.5
  done
  munge -n | unmunge >/dev/null || die "munge does not answer"
fi

# ---- slurm: config, then the controller and two node daemons ------------------------------------
host=$(hostname -s)
sed "s/@HOST@/$host/g" .ci/slurm/slurm.conf.in > "$CONF.tmp"
mv "$CONF.tmp" "$CONF"
install -d -m 0755 "$RUN" "$LOG" "$SPOOL" "$SPOOL/ctld" "$SPOOL/n1" "$SPOOL/n2"

# Daemons of an earlier run of this script: stopped by the pids they wrote, then started afresh.
for pidfile in "$RUN"/slurmd-n1.pid "$RUN"/slurmd-n2.pid "$RUN"/slurmctld.pid; do
  pid=$(cat "$pidfile" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -f "$pidfile"
done

# -c: no state from an earlier cluster (stale jobs, nodes left DOWN).
slurmctld -c || die "slurmctld did not start"
for _ in $(seq 1 40); do scontrol ping >/dev/null 2>&1 && break; sleep 0.5; done
scontrol ping | grep -q UP || die "slurmctld does not answer scontrol ping"
slurmd -N n1 || die "slurmd n1 did not start"
slurmd -N n2 || die "slurmd n2 did not start"

deadline=$(( $(date +%s) + WAIT_S ))
until [ "$(sinfo -h -N -t idle -o '%N' | sort -u | tr '\n' ' ')" = "n1 n2 " ]; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    sinfo -N -l >&2 || true
    die "nodes n1 and n2 not idle after ${WAIT_S}s"
  fi
  sleep 1
done
sinfo -N
echo "slurm service: n1 and n2 idle after $(( $(date +%s) - started ))s"
