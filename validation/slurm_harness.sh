# A real Slurm for the job-script tests, of one node or of several nodes made of namespaces on this
# machine (sourced; see ../shared/ENVIRONMENT.md, "A real Slurm on one machine", and
# slurm_start_nodes below). Needs root (slurmd runs jobs as their owner) and the Debian packages of
# .ci/deps.sh (slurm-wlm slurmctld slurmd slurm-client munge slurm-wlm-torque; iproute2 and
# util-linux for several nodes). No systemd: the daemons are started here and stopped by the PIDs
# started here.
#
#   slurm_start DIR   writes DIR/slurm.conf (state, spool, logs and PID files under DIR), starts
#                     munged if no munge daemon answers, then slurmctld and slurmd; exports
#                     SLURM_CONF; returns when `sinfo` shows the node idle (0), or prints why and
#                     returns 1 after SLURM_HARNESS_TIMEOUT seconds (default 60).
#   slurm_stop        stops slurmctld and slurmd (and munged if slurm_start started it and no other
#                     harness run still uses it: slurm_munge_start).
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

# The lines both harnesses' slurm.conf share: root, munge, pmi2, processes tracked by their
# parents, cores as the unit, requeue allowed, state under $SLURM_HARNESS_DIR.
slurm_conf_common() {
    cat <<EOF
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
EOF
}

slurm_munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

# munge: the machine's daemon if one answers, else one started here (stopped by slurm_stop). Every
# harness using it registers its shell's PID in SLURM_MUNGE_USERS, and munged is stopped only when
# no other registered shell lives: two tests run at once (make -j2 check) share it.
SLURM_MUNGE_USERS=/run/mindpipe-munge.users
slurm_munge_start() {
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
    mkdir -p "$SLURM_MUNGE_USERS" && : > "$SLURM_MUNGE_USERS/$$"
}

# Stops the munged started here unless another registered harness shell still lives.
slurm_munge_stop() {
    rm -f "$SLURM_MUNGE_USERS/$$"
    [ -n "$slurm_harness_munged" ] || return 0
    for u in "$SLURM_MUNGE_USERS"/*; do
        [ -e "$u" ] || continue
        kill -0 "${u##*/}" 2>/dev/null && return 0 # in use: left running (a later run finds it answering)
        rm -f "$u"
    done
    kill -TERM "$slurm_harness_munged" 2>/dev/null
}

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

    slurm_munge_start || return 1

    host=$(hostname)
    # shellcheck disable=SC2046
    set -- $(slurm_free_ports)
    cat > "$SLURM_HARNESS_DIR/slurm.conf" <<EOF
ClusterName=mindpipe-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$1
SlurmdPort=$2
$(slurm_conf_common)
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

# slurm_harness_ours PID: PID is still one of this harness's daemons (its command line names the
# harness directory, where its slurm.conf is).
slurm_harness_ours() {
    tr '\0' ' ' 2>/dev/null < "/proc/$1/cmdline" | grep -qF -- "$SLURM_HARNESS_DIR"
}

slurm_stop() {
    [ -n "$SLURM_HARNESS_DIR" ] || return 0
    # Jobs still running would outlive slurmd's slurmstepd: cancel them first.
    if [ -n "$slurm_harness_pids" ]; then
        scancel --user="$(id -un)" >/dev/null 2>&1
        # only a daemon that still runs our configuration: a test may have killed one (node loss),
        # and its PID may since belong to another test's process (PIDs wrap under make -j)
        ours=""
        for p in $slurm_harness_pids; do slurm_harness_ours "$p" && ours="$ours $p"; done
        for p in $ours; do kill -TERM "$p" 2>/dev/null; done
        i=0
        for p in $ours; do
            while slurm_harness_ours "$p"; do
                i=$((i + 1)); [ $i -lt 100 ] || { kill -KILL "$p" 2>/dev/null; break; }
                sleep 0.1
            done
        done
    fi
    slurm_munge_stop
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

# slurm_follow JOBID SECONDS: follows a job that requeues itself, releasing each requeue (Slurm holds
# a requeued job for 120 s; a release right after the requeue races slurmctld's cleanup of the
# previous run, "Job credential revoked", so 3 s of pending come first), until it ends or SECONDS
# pass; prints the final state ("still STATE after SECONDS s" when it did not end).
slurm_follow() {
    sf_start=$(date +%s); sf_pending=0
    while [ $(($(date +%s) - sf_start)) -lt "$2" ]; do
        sf_st=$(slurm_job_state "$1")
        case "$sf_st" in
            COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) echo "$sf_st"; return ;;
            PENDING)
                sf_pending=$((sf_pending + 1))
                [ $sf_pending -lt 3 ] || scontrol update JobId="$1" StartTime=now > /dev/null 2>&1 ;;
            *) sf_pending=0 ;;
        esac
        sleep 1
    done
    echo "still $(slurm_job_state "$1") after $2 s"
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

# ---- Several nodes on one machine (slurm_start_nodes) ----
#
#   slurm_start_nodes DIR N   a Slurm of N nodes node1..nodeN on this machine: each node is a network
#                     namespace mpnodeK (its veth "eth0" with 10.77.0.K/24 on the bridge mpbr0 of the
#                     root namespace, which holds 10.77.0.254 and slurmctld) with its own host name
#                     (a UTS namespace: slurmd and everything it starts sees nodeK) and its own
#                     /etc/hosts naming every node (/etc/netns/mpnodeK/hosts, which `ip netns exec`
#                     mounts over /etc/hosts), and one slurmd (spool, PID and log per node: %n).
#                     munge's socket is a file, so one munged serves every namespace. Exports
#                     SLURM_CONF; returns when sinfo shows the N nodes idle (0), or 1 (logs printed).
#                     These are namespaces of one kernel on the same cores, not separate hardware.
#   slurm_stop_nodes  stops the daemons, kills whatever is left in the namespaces and removes them,
#                     the bridge, the veths and /etc/netns/mpnode*; idempotent, and safe after a
#                     failed or half-done start; a slurmctld that outlives its stop (seen once: stuck
#                     after SIGTERM) is killed. slurm_start_nodes calls it first, so the leftovers of
#                     a killed run (its slurmctld too) do not break the next one; but a run whose
#                     owner (the PID on /run/mindpipe-nodes.pid's first line) still lives is refused,
#                     not torn down.
#   slurm_node_ns K   the namespace of node K (mpnodeK); slurm_node_veth K its veth in the root
#                     namespace (mpvK: `ip link set mpvK down` cuts the node off).
#   slurm_node_pids K every process in node K's namespace but its slurmd (a host's workload).
#   slurm_node_restart K SECONDS  node K back after its loss: its slurmd started again, the node
#                     resumed (its state printed; 1 if still down after SECONDS).
#   slurm_node_exec K CMD...  runs CMD in node K's network namespace (e.g. a client of a server that
#                     listens on that node's loopback).

SLURM_NODES_NET=10.77.0
SLURM_NODES_BRIDGE=mpbr0
SLURM_NODES_OWNER=/run/mindpipe-nodes.pid

slurm_node_ns() { echo "mpnode$1"; }
slurm_node_veth() { echo "mpv$1"; }

slurm_node_exec() {
    k=$1; shift
    nsenter --net="/run/netns/mpnode$k" "$@"
}

slurm_node_pids() {
    sd=$(cat "$SLURM_HARNESS_DIR/slurmd-node$1.pid" 2>/dev/null)
    for p in $(ip netns pids "mpnode$1" 2>/dev/null); do [ "$p" = "$sd" ] || echo "$p"; done
}

# Tears down every mpnode* namespace (its processes killed), mpv* veth, the bridge and /etc/netns/mpnode*,
# and the slurmctld named on the owner file's second line if it still runs with that run's slurm.conf.
slurm_nodes_cleanup() {
    ctld=$(sed -n 2p "$SLURM_NODES_OWNER" 2>/dev/null)
    if [ -n "$ctld" ] && tr '\0' ' ' 2>/dev/null < "/proc/${ctld%% *}/cmdline" | grep -qF "slurmctld -i -f ${ctld#* }"; then
        kill -KILL "${ctld%% *}" 2>/dev/null
    fi
    for ns in $(ip netns list 2>/dev/null | awk '/^mpnode[0-9]+/ { print $1 }'); do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
        rm -rf "/etc/netns/$ns"
    done
    for v in $(ip -o link show 2>/dev/null | sed -n 's/^[0-9]*: \(mpv[0-9]*\)[@:].*/\1/p'); do ip link del "$v" 2>/dev/null; done
    ip link del "$SLURM_NODES_BRIDGE" 2>/dev/null
    rm -f "$SLURM_NODES_OWNER"
    return 0
}

slurm_start_nodes() {
    SLURM_HARNESS_DIR=$1; n=$2
    timeout=${SLURM_HARNESS_TIMEOUT:-60}
    if [ "$(id -u)" -ne 0 ]; then slurm_msg "needs root (namespaces; slurmd runs jobs as their owner)"; return 1; fi
    for b in munged munge slurmctld slurmd sbatch sinfo scontrol ip unshare nsenter; do
        command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] ||
            { slurm_msg "$b not found: install the packages of .ci/deps.sh (slurm-wlm slurmctld slurmd slurm-client munge iproute2 util-linux)"; return 1; }
    done
    owner=$(head -n 1 "$SLURM_NODES_OWNER" 2>/dev/null)
    if [ -n "$owner" ] && [ "$owner" != $$ ] && kill -0 "$owner" 2>/dev/null; then
        slurm_msg "the namespaces mpnode* belong to a run still going (pid $owner, $SLURM_NODES_OWNER)"; return 1
    fi
    slurm_nodes_cleanup
    echo $$ > "$SLURM_NODES_OWNER"
    mkdir -p "$SLURM_HARNESS_DIR/state" "$SLURM_HARNESS_DIR/log" || return 1
    spool=$(mktemp -d /tmp/mp-slurmd.XXXXXX) || return 1 # short: slurmd's per-step sockets live here
    SLURM_HARNESS_SPOOL=$spool

    # the network: a bridge in the root namespace, one veth pair per node
    ip link add "$SLURM_NODES_BRIDGE" type bridge &&
        ip addr add "$SLURM_NODES_NET.254/24" dev "$SLURM_NODES_BRIDGE" &&
        ip link set "$SLURM_NODES_BRIDGE" up || { slurm_msg "the bridge $SLURM_NODES_BRIDGE could not be made"; return 1; }
    hosts="127.0.0.1 localhost"
    for k in $(seq 1 "$n"); do hosts="$hosts
$SLURM_NODES_NET.$k node$k"; done
    for k in $(seq 1 "$n"); do
        ns=mpnode$k
        mkdir -p "/etc/netns/$ns" "$spool/node$k" && printf '%s\n' "$hosts" > "/etc/netns/$ns/hosts"
        { ip netns add "$ns" &&
            ip link add "mpv$k" type veth peer name "mpv${k}n" &&
            ip link set "mpv${k}n" netns "$ns" &&
            ip link set "mpv$k" master "$SLURM_NODES_BRIDGE" && ip link set "mpv$k" up &&
            ip -n "$ns" link set "mpv${k}n" name eth0 &&
            ip -n "$ns" addr add "$SLURM_NODES_NET.$k/24" dev eth0 &&
            ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up; } ||
            { slurm_msg "node $k's namespace could not be made"; return 1; }
    done

    slurm_munge_start || return 1

    # slurmctld listens on every address of the root namespace; the nodes reach it on the bridge.
    # Its port and slurmd's are free ones of the root namespace (each node's namespace has its own
    # ports). SlurmdTimeout is long (SLURM_NODES_SLURMD_TIMEOUT, default 300 s, Slurm's default): a
    # test that cuts a node off for seconds must not have its job killed for a node failure. Its job
    # ids start at 50000: the one-node harness's start at 1, and both may run at once under `make -j2
    # check` with every process in one process table, where jobs/slurm/train.sbatch finds its ranks by
    # the binary and SLURM_JOB_ID (seen: test_jobs' job 2 sent its stop signal to this harness's job
    # 2, a serving front end of the same binary, which stopped).
    # shellcheck disable=SC2046
    set -- $(slurm_free_ports)
    cat > "$SLURM_HARNESS_DIR/slurm.conf" <<EOF2
ClusterName=mindpipe-nodes
FirstJobId=50000
SlurmctldHost=$(hostname)($SLURM_NODES_NET.254)
SlurmctldPort=$1
SlurmdPort=$2
$(slurm_conf_common)
SlurmdSpoolDir=$spool/%n
SlurmctldPidFile=$SLURM_HARNESS_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_HARNESS_DIR/slurmd-%n.pid
SlurmctldLogFile=$SLURM_HARNESS_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_HARNESS_DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldTimeout=30
SlurmdTimeout=${SLURM_NODES_SLURMD_TIMEOUT:-300}
InactiveLimit=0
MinJobAge=600
KillWait=10
Waittime=0
NodeName=node[1-$n] NodeAddr=$SLURM_NODES_NET.[1-$n] CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=nodes Nodes=node[1-$n] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF2
    export SLURM_CONF="$SLURM_HARNESS_DIR/slurm.conf"

    slurmctld -i -f "$SLURM_CONF" || { slurm_msg "slurmctld did not start"; slurm_logs; return 1; }
    for k in $(seq 1 "$n"); do
        # nsenter, not `ip netns exec`: that mounts a new /sys without the cgroup file systems
        # slurmd's cgroup plugin initialisation needs; /etc/hosts is bound here instead.
        nsenter --net="/run/netns/mpnode$k" unshare --mount --uts sh -c \
            "mount --bind /etc/netns/mpnode$k/hosts /etc/hosts && hostname node$k && exec slurmd -f '$SLURM_CONF' -N node$k" ||
            { slurm_msg "slurmd of node$k did not start"; slurm_logs; return 1; }
    done
    i=0
    while :; do
        missing=0
        for f in slurmctld $(seq -f 'slurmd-node%g' 1 "$n"); do [ -s "$SLURM_HARNESS_DIR/$f.pid" ] || missing=1; done
        [ $missing = 0 ] && break
        i=$((i + 1)); [ $i -lt 100 ] || break
        sleep 0.1
    done
    slurm_harness_pids=$(cat "$SLURM_HARNESS_DIR"/slurmctld.pid "$SLURM_HARNESS_DIR"/slurmd-node*.pid 2>/dev/null | tr '\n' ' ')
    echo "$(cat "$SLURM_HARNESS_DIR/slurmctld.pid" 2>/dev/null) $SLURM_CONF" >> "$SLURM_NODES_OWNER"

    start=$(date +%s)
    while :; do
        idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
        [ "$idle" -eq "$n" ] && return 0
        if [ $(($(date +%s) - start)) -ge "$timeout" ]; then
            slurm_msg "$idle of $n nodes idle after ${timeout}s ($(sinfo -h -N -o '%N %T' 2>/dev/null | tr '\n' ' ')); logs follow"
            slurm_logs
            return 1
        fi
        sleep 0.5
    done
}

# slurm_node_restart K SECONDS: node K back after its loss (every process of its namespace killed):
# its slurmd started again as slurm_start_nodes starts it, then the node resumed until sinfo no
# longer says down (a node Slurm declared down stays down until resumed, and scontrol refuses that
# while it is not down yet). Prints the node's state; 1 if it is still down after SECONDS.
slurm_node_restart() {
    nsenter --net="/run/netns/mpnode$1" unshare --mount --uts sh -c \
        "mount --bind /etc/netns/mpnode$1/hosts /etc/hosts && hostname node$1 && exec slurmd -f '$SLURM_CONF' -N node$1" ||
        { slurm_msg "slurmd of node$1 did not start again"; return 1; }
    # its new PID, so that slurm_stop ends it too
    sleep 0.5; slurm_harness_pids="$slurm_harness_pids $(cat "$SLURM_HARNESS_DIR/slurmd-node$1.pid" 2>/dev/null)"
    nr_t0=$(date +%s)
    until nr_st=$(sinfo -h -n "node$1" -o %T 2>/dev/null); [ -n "$nr_st" ] && ! echo "$nr_st" | grep -qi down ||
        [ $(($(date +%s) - nr_t0)) -gt "$2" ]; do
        scontrol update NodeName="node$1" State=RESUME > /dev/null 2>&1
        sleep 1
    done
    echo "$nr_st"
    [ -n "$nr_st" ] && ! echo "$nr_st" | grep -qi down
}

slurm_stop_nodes() {
    slurm_stop
    owner=$(head -n 1 "$SLURM_NODES_OWNER" 2>/dev/null)
    if [ -n "$owner" ] && [ "$owner" != $$ ] && kill -0 "$owner" 2>/dev/null; then return 0; fi # not ours
    slurm_nodes_cleanup
}
