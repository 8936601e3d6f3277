# A real one-node Slurm for the job-script tests (sourced; see ../shared/ENVIRONMENT.md, "A real
# Slurm on one machine"). Needs root (slurmd runs jobs as their owner) and the Debian packages of
# .ci/deps.sh (slurm-wlm slurmctld slurmd slurm-client munge slurm-wlm-torque). No systemd: the
# daemons are started here and stopped by the PIDs started here.
#
#   slurm_start DIR   writes DIR/slurm.conf (state, spool, logs and PID files under DIR), starts
#                     munged if no munge daemon answers, then slurmctld and slurmd; exports
#                     SLURM_CONF; returns when `sinfo` shows the node idle (0), or prints why and
#                     returns 1 after SLURM_HARNESS_TIMEOUT seconds (default 60).
#   slurm_stop        stops slurmctld and slurmd (and munged if slurm_start started it).
#   slurm_logs        prints the daemons' logs with a "# " prefix (for a failing test).
#   slurm_wait_state JOBID SECONDS STATE...   waits until the job is in one of the states (1 on timeout).
#
# The ports are free ones picked at start, so a harness never meets another Slurm on the machine.

slurm_harness_pids=""
slurm_harness_munged=""

slurm_msg() { echo "# slurm_harness: $*"; }

# Two free TCP ports on 127.0.0.1 (asked from the kernel, then released).
slurm_free_ports() {
    /usr/bin/python3 - <<'EOF'
import socket
s = [socket.socket() for _ in range(2)]
for x in s:
    x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))
EOF
}

slurm_munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

slurm_start() {
    SLURM_HARNESS_DIR=$1
    timeout=${SLURM_HARNESS_TIMEOUT:-60}
    if [ "$(id -u)" -ne 0 ]; then slurm_msg "needs root (slurmd runs jobs as their owner)"; return 1; fi
    for b in munged munge slurmctld slurmd sbatch sinfo scontrol qsub; do
        command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] ||
            { slurm_msg "$b not found: install the packages of .ci/deps.sh (slurm-wlm slurmctld slurmd slurm-client munge slurm-wlm-torque)"; return 1; }
    done
    mkdir -p "$SLURM_HARNESS_DIR/state" "$SLURM_HARNESS_DIR/log" || return 1
    # slurmd makes a UNIX socket per job step under its spool directory: keep that path short.
    spool="$SLURM_HARNESS_DIR/spool"
    if [ ${#spool} -gt 60 ]; then
        spool=$(mktemp -d /tmp/mp-slurmd.XXXXXX) || return 1
        ln -s "$spool" "$SLURM_HARNESS_DIR/spool"
    fi
    mkdir -p "$spool"
    SLURM_HARNESS_SPOOL=$spool

    # munge: use the machine's daemon if one answers, else start one (and stop it in slurm_stop).
    if ! slurm_munge_ok; then
        if [ ! -s /etc/munge/munge.key ]; then
            mkdir -p /etc/munge
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2>/dev/null
            chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
        fi
        mkdir -p /run/munge /var/log/munge /var/lib/munge
        chown munge:munge /run/munge /var/log/munge /var/lib/munge
        runuser -u munge -- /usr/sbin/munged --force || { slurm_msg "munged did not start"; return 1; }
        slurm_harness_munged=$(cat /run/munge/munged.pid 2>/dev/null)
        i=0
        until slurm_munge_ok; do
            i=$((i + 1)); [ $i -lt 50 ] || { slurm_msg "munged started but does not answer"; return 1; }
            sleep 0.1
        done
    fi

    host=$(hostname)
    # shellcheck disable=SC2046
    set -- $(slurm_free_ports)
    cat > "$SLURM_HARNESS_DIR/slurm.conf" <<EOF
ClusterName=mindpipe-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$1
SlurmdPort=$2
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=pmi2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
SchedulerType=sched/backfill
StateSaveLocation=$SLURM_HARNESS_DIR/state
SlurmdSpoolDir=$spool
SlurmctldPidFile=$SLURM_HARNESS_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_HARNESS_DIR/slurmd.pid
SlurmctldLogFile=$SLURM_HARNESS_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_HARNESS_DIR/log/slurmd.log
SlurmctldDebug=debug2
SlurmdDebug=info
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=600
KillWait=10
Waittime=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    export SLURM_CONF="$SLURM_HARNESS_DIR/slurm.conf"

    slurmctld -i -f "$SLURM_CONF" || { slurm_msg "slurmctld did not start"; slurm_logs; return 1; }
    slurmd -f "$SLURM_CONF" || { slurm_msg "slurmd did not start"; slurm_logs; return 1; }
    # Both daemonize; their PIDs come from their PID files.
    i=0
    while [ ! -s "$SLURM_HARNESS_DIR/slurmctld.pid" ] || [ ! -s "$SLURM_HARNESS_DIR/slurmd.pid" ]; do
        i=$((i + 1)); [ $i -lt 100 ] || break
        sleep 0.1
    done
    slurm_harness_pids="$(cat "$SLURM_HARNESS_DIR/slurmctld.pid" 2>/dev/null) $(cat "$SLURM_HARNESS_DIR/slurmd.pid" 2>/dev/null)"

    start=$(date +%s)
    while :; do
        st=$(sinfo -h -n "$host" -o %T 2>/dev/null)
        [ "$st" = idle ] && return 0
        if [ $(($(date +%s) - start)) -ge "$timeout" ]; then
            slurm_msg "node $host not idle after ${timeout}s (sinfo says '${st:-nothing}'); logs follow"
            slurm_logs
            return 1
        fi
        sleep 0.5
    done
}

slurm_logs() {
    for f in "$SLURM_HARNESS_DIR"/log/*.log; do
        [ -f "$f" ] || continue
        echo "# --- $f (last 30 lines)"
        tail -n 30 "$f" | sed 's/^/#   /'
    done
}

slurm_stop() {
    [ -n "$SLURM_HARNESS_DIR" ] || return 0
    # Jobs still running would outlive slurmd's slurmstepd: cancel them first.
    if [ -n "$slurm_harness_pids" ]; then
        scancel --user="$(id -un)" >/dev/null 2>&1
        for p in $slurm_harness_pids; do kill -TERM "$p" 2>/dev/null; done
        i=0
        for p in $slurm_harness_pids; do
            while kill -0 "$p" 2>/dev/null; do
                i=$((i + 1)); [ $i -lt 100 ] || { kill -KILL "$p" 2>/dev/null; break; }
                sleep 0.1
            done
        done
    fi
    if [ -n "$slurm_harness_munged" ]; then
        kill -TERM "$slurm_harness_munged" 2>/dev/null
    fi
    if [ -n "$SLURM_HARNESS_SPOOL" ] && [ "$SLURM_HARNESS_SPOOL" != "$SLURM_HARNESS_DIR/spool" ]; then
        rm -rf "$SLURM_HARNESS_SPOOL"
    fi
    slurm_harness_pids=""
    slurm_harness_munged=""
    SLURM_HARNESS_DIR=""
}

# slurmctld checks time limits (and sends --signal warnings) every 30 s from its start, not at the
# second: slurm_next_tick prints the seconds until its next check, from the last "Testing job time
# limits" line of its log (SlurmctldDebug=debug2), or its start line before the first check.
slurm_next_tick() {
    f="$SLURM_HARNESS_DIR/log/slurmctld.log"
    last=$(grep 'Testing job time limits' "$f" | tail -n 1 | sed -n 's/^\[\([^]]*\)\].*/\1/p')
    [ -n "$last" ] || last=$(grep 'slurmctld version .* started' "$f" | tail -n 1 | sed -n 's/^\[\([^]]*\)\].*/\1/p')
    [ -n "$last" ] || { echo 0; return 1; }
    t=$(date -d "$last" +%s.%N) || { echo 0; return 1; }
    awk -v t="$t" -v now="$(date +%s.%N)" 'BEGIN { d = 30 - (now - t) % 30; if (d < 0) d = 0; printf "%.1f\n", d }'
}

# slurm_align_tick LEAD: sleeps until slurmctld's next time-limit check is LEAD seconds away
# (so a job submitted now is running, past its start-up, when the check signals it).
slurm_align_tick() {
    ttn=$(slurm_next_tick)
    s=$(awk -v d="$ttn" -v l="$1" 'BEGIN { s = d - l; if (s < 0) s += 30; printf "%.1f\n", s }')
    sleep "$s"
}

# slurm_job_state JOBID: the job's state word (PENDING, RUNNING, COMPLETED, ...), empty if unknown.
slurm_job_state() {
    scontrol -o show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'
}

# slurm_wait_state JOBID TIMEOUT STATE...: waits until the job is in one of the states; 1 on timeout.
slurm_wait_state() {
    jid=$1; tmo=$2; shift 2
    start=$(date +%s)
    while :; do
        st=$(slurm_job_state "$jid")
        for w in "$@"; do [ "$st" = "$w" ] && return 0; done
        [ $(($(date +%s) - start)) -lt "$tmo" ] || return 1
        sleep 0.5
    done
}
