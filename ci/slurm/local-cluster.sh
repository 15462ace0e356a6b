#!/usr/bin/env bash
# ci/slurm/local-cluster.sh start|stop|status — a real one-node Slurm cluster on
# localhost, from Debian's packages (munge, slurmctld, slurmd, slurm-client), for
# testing ci/slurm/campaign.sbatch without a cluster.  Runs as root, without
# systemd: the daemons are started directly, and everything they keep (munge key
# and socket, slurm.conf, state, spool, pid and log files) lies under one folder,
# on ports of its own, so it touches neither the system's /etc/slurm nor a Slurm
# or munge service that may already run on the machine.
#
#   start   install the packages when missing (quietly, once), write a munge key
#           and slurm.conf for one node with this machine's CPU count and memory,
#           start munged, slurmctld and slurmd, and wait until the node is idle.
#           Prints `export SLURM_CONF=...` on stdout (and writes it to DIR/env.sh),
#           so `eval "$(bash ci/slurm/local-cluster.sh start)"` points sbatch,
#           squeue and sinfo at this cluster.  Progress goes to stderr.
#   stop    cancel the cluster's jobs, stop slurmd, slurmctld and munged (TERM,
#           then KILL after 10 s), by the pids in their pid files; keeps the logs.
#   status  sinfo and squeue of the cluster.
#
# Variables:
#   SLURM_LOCAL_DIR      the cluster's folder (default /tmp/attncheck-slurm); start
#                        wipes its state, stop keeps DIR/log for reading
#   SLURM_LOCAL_PORT     slurmctld's port; slurmd uses the next (default: the first
#                        pair from 16817 up, in steps of 2, where nothing listens, so
#                        that test runs side by side get clusters of their own)
#   SLURM_LOCAL_TIMEOUT  seconds to wait for the node to become idle (default 60)
#   SLURM_LOCAL_CPUS     CPUs of the node (default: nproc, the CPUs this process may use)
#   SLURM_LOCAL_MEM_MB   memory of the node in MiB (default: MemTotal, or the
#                        cgroup's memory.max when lower, less 5%)
# Exit status: 0 done; 1 a daemon did not start or the node did not become idle
# (the logs' tails are printed); 2 bad usage.
set -euo pipefail
dir=${SLURM_LOCAL_DIR:-/tmp/attncheck-slurm}
port=${SLURM_LOCAL_PORT:-}
timeout_s=${SLURM_LOCAL_TIMEOUT:-60}
node=localhost
conf=$dir/slurm.conf
export SLURM_CONF=$conf

say() { echo "local-cluster: $*" >&2; }

install_packages() { # like ci/install-deps.sh: nothing when all are there
    local packages=(munge slurmctld slurmd slurm-client) missing=() p
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]}"
    # The packages' maintainer scripts would start the system's munge and slurm
    # services; a policy-rc.d that answers 101 stops that (a container has one).
    local policy=/usr/sbin/policy-rc.d made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    local log=/tmp/attncheck-slurm-apt.log rc=0
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1 || rc=$?
    [ "$made_policy" = 1 ] && rm -f "$policy"
    if [ "$rc" -ne 0 ]; then
        cat "$log" >&2
        say "FAILED to install: ${missing[*]}"
        exit 1
    fi
}

listening() { # port: whether something on 127.0.0.1 accepts connections there
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

free_port_pair() { # the first p = 16817, 16819, ... with p and p + 1 both free
    local p
    for ((p = 16817; p < 16917; p += 2)); do
        listening "$p" || listening $((p + 1)) || { echo "$p"; return 0; }
    done
    say "no free port pair in 16817..16916 (set SLURM_LOCAL_PORT)"
    exit 1
}

node_mem_mb() { # MemTotal, or the cgroup limit when lower, less 5% for the daemons
    local mem_kb limit
    mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
    limit=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || echo max)
    if [ "$limit" != max ] && [ $((limit / 1024)) -lt "$mem_kb" ]; then mem_kb=$((limit / 1024)); fi
    echo $((mem_kb * 95 / 100 / 1024))
}

write_conf() {
    local cpus=${SLURM_LOCAL_CPUS:-$(nproc)} mem_mb=${SLURM_LOCAL_MEM_MB:-$(node_mem_mb)}
    # No cgroups (a container may not delegate them), no accounting, no GPUs:
    # jobs are tracked by their process tree; CPUs are the consumable resource.
    # Latency, measured on a 4-task array of short tasks: MinJobAge=4 keeps
    # `sbatch --wait` polling every 2 s (at the default 300 its interval grows
    # 2, 8, 32 s: it returned 7 s after the job had ended); batch_sched_delay=0
    # starts waiting array tasks and the merge job within 1 s of a job's end
    # (3 s with the default).
    cat >"$conf" <<EOF
# Written by ci/slurm/local-cluster.sh: one node on localhost, for tests.
ClusterName=attncheck-local
SlurmctldHost=$node
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/run/munge.socket.2
CredType=cred/munge
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MinJobAge=4
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
    say "node $node: $cpus CPUs, $mem_mb MiB"
}

pid_of() { # daemon: its pid when it runs, else nothing
    local f=$dir/run/$1.pid p
    [ -f "$f" ] || return 1
    p=$(cat "$f")
    [ -n "$p" ] && kill -0 "$p" 2>/dev/null && echo "$p"
}

tail_logs() {
    local f
    for f in "$dir"/log/*.log; do
        [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
    done
}

start_daemons() {
    munged --socket="$dir/run/munge.socket.2" --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
        --seed-file="$dir/munge/munged.seed" ||
        { say "munged did not start"; tail_logs; exit 1; }
    slurmctld -f "$conf" -c -i || { say "slurmctld did not start"; tail_logs; exit 1; }
    slurmd -f "$conf" -N "$node" || { say "slurmd did not start"; tail_logs; exit 1; }
}

wait_idle() {
    local deadline=$((SECONDS + timeout_s)) state=
    while [ $SECONDS -lt $deadline ]; do
        state=$(sinfo -h -N -n "$node" -o %t 2>/dev/null || true)
        [ "$state" = idle ] && return 0
        sleep 0.5
    done
    say "node $node not idle after ${timeout_s} s (state: '${state}')"
    sinfo -N -l >&2 || true
    tail_logs
    exit 1
}

start() {
    install_packages
    if pid_of slurmctld >/dev/null; then
        say "already running (slurmctld pid $(pid_of slurmctld)); stop it first"
        exit 1
    fi
    # munged's socket path must fit a sockaddr_un (108 bytes)
    [ ${#dir} -le 80 ] || { say "SLURM_LOCAL_DIR too long for munge's socket path (${#dir} > 80 characters): $dir"; exit 2; }
    [ -n "$port" ] || port=$(free_port_pair)
    rm -rf "$dir"
    mkdir -p "$dir"
    chmod 0755 "$dir"
    mkdir -m 0755 "$dir/run" "$dir/log" "$dir/ctld" "$dir/spool"
    mkdir -m 0700 "$dir/munge"
    if command -v mungekey >/dev/null; then
        mungekey --create --keyfile="$dir/munge/munge.key"
    else
        dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    fi
    chmod 0400 "$dir/munge/munge.key"
    write_conf
    start_daemons
    wait_idle
    echo "export SLURM_CONF=$conf" >"$dir/env.sh"
    say "up: node $node idle (slurmctld pid $(pid_of slurmctld), slurmd pid $(pid_of slurmd), munged pid $(pid_of munged))"
    echo "export SLURM_CONF=$conf"
}

stop_daemons() { # names: TERM to all at once (each takes ~2 s to exit), wait up to 10 s, then KILL
    local name p pids=() names=() i
    for name in "$@"; do
        p=$(pid_of "$name") || continue
        kill -TERM "$p" 2>/dev/null || true
        pids+=("$p") names+=("$name")
    done
    for i in "${!pids[@]}"; do
        local deadline=$((SECONDS + 10))
        while kill -0 "${pids[$i]}" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
        if kill -0 "${pids[$i]}" 2>/dev/null; then
            say "${names[$i]} (pid ${pids[$i]}) still running after 10 s: KILL"
            kill -KILL "${pids[$i]}" 2>/dev/null || true
        fi
    done
}

stop() {
    local jobs
    jobs=$(pid_of slurmctld >/dev/null && squeue -h -o %i 2>/dev/null | sort -u | tr '\n' ' ') || jobs=
    if [ -n "$jobs" ]; then
        say "cancelling jobs $jobs"
        # shellcheck disable=SC2086 # one job id a word
        scancel --full $jobs 2>/dev/null || true
        local deadline=$((SECONDS + 15))
        while [ $SECONDS -lt $deadline ] && [ -n "$(squeue -h -o %i 2>/dev/null)" ]; do sleep 0.5; done
    fi
    stop_daemons slurmd slurmctld munged
    say "stopped (logs in $dir/log)"
}

case ${1:-} in
start) start ;;
stop) stop ;;
status) sinfo -N -l; squeue ;;
*) echo "usage: ci/slurm/local-cluster.sh start|stop|status" >&2; exit 2 ;;
esac
