#!/usr/bin/env bash
# Runs one ShardPS job under Open MPI's mpirun: the first P ranks are
# pservers, the other N ranks trainers (trainer id = rank - P).
#
#   mpirun -np 4 --bind-to none -x SHARDPS_MPI_PSERVERS=2 \
#       -x SHARDPS_MPI_DIR=/shared/job1 configs/mpi/shardps_mpi.sh --mode=sync
#
# or, to say where the pservers run, two app contexts (the first is the
# pservers, P its process count; -x and --host are per app context):
#
#   mpirun --bind-to none \
#       -np 2 --host ps1,ps2 -x SHARDPS_MPI_DIR=/shared/job1 \
#           configs/mpi/shardps_mpi.sh : \
#       -np 8 --host w1:4,w2:4 -x SHARDPS_MPI_DIR=/shared/job1 \
#           configs/mpi/shardps_mpi.sh --mode=sync
#
# or, with a pserver beside each trainer (docs/performance.md, "Across
# hosts": each machine's link then carries what a ring all-reduce would,
# and a trainer moves its local pserver's share through shared memory), N
# machines and 2N ranks placed round-robin over them, so that pserver rank
# r and trainer r (rank N + r) share machine r:
#
#   mpirun -np 2N --map-by node --bind-to none --host w1,w2,...,wN \
#       -x SHARDPS_MPI_PSERVERS=N -x SHARDPS_MPI_DIR=/shared/job1 \
#       configs/mpi/shardps_mpi.sh --mode=sync
#
# Pserver rank r starts `pserver --port=PORT --port_file=...
# --num_gradient_servers=N`, and once it serves writes HOST:port into a
# folder all ranks share. Trainer rank k waits for the P addresses, then
# runs `trainer --pservers=<the P addresses, in rank order> --trainer_id=k
# --num_gradient_servers=N --config=... --metrics_file=...` and, when it
# exits, leaves a marker. A pserver rank stops its pserver (SIGTERM) once
# every trainer has left its marker, and exits with the pserver's status.
# So mpirun exits 0 when every trainer succeeded, and when a trainer fails,
# or a pserver exits before the trainers are done (or cannot start), that
# rank exits non-zero, mpirun stops the whole job, and mpirun's exit status
# is that rank's (the first that failed). Each rank says why on stderr
# (mpirun shows it), with the last lines of its log.
#
# Variables (in mpirun's environment, which the ranks on mpirun's machine
# inherit; mpirun forwards to other machines only those named with
# `-x NAME` or `-x NAME=value`, in every app context):
#
#   SHARDPS_MPI_PSERVERS      P, the number of pserver ranks (ranks 0..P-1).
#                             Default: the first app context's size when
#                             mpirun has two (MPMD form above), else 1.
#   SHARDPS_MPI_DIR           folder for logs, metrics and the ranks'
#                             rendezvous; every rank must see the same
#                             folder (a shared file system when the ranks
#                             run on several machines). Default:
#                             ./shardps-mpi in each rank's working folder
#                             (mpirun's by default). Holds pserver-R.log,
#                             trainer-K.log, trainer-K.jsonl (metrics),
#                             pservers (the address list) and, while the job
#                             runs, .mpi-<job id>/ (removed at a clean end).
#                             Files from an earlier run are overwritten.
#   SHARDPS_MPI_BIN_DIR       build folder holding pserver/pserver and
#                             trainer/trainer. Default: build/ of this
#                             repository.
#   SHARDPS_MPI_PSERVER_BIN   the pserver binary (default BIN_DIR/pserver/pserver)
#   SHARDPS_MPI_TRAINER_BIN   the trainer binary (default BIN_DIR/trainer/trainer)
#   SHARDPS_MPI_CONFIG        model config. Default: configs/fmnist_mlp.pbtxt
#                             of this repository.
#   SHARDPS_MPI_PSERVER_FLAGS extra pserver flags, split on white space (no
#                             quoting; use --flagfile=PATH for values with
#                             spaces); {r} becomes the pserver's rank, e.g.
#                             "--checkpoint_dir=/data/shardps/ps{r}
#                             --trainer_timeout=30". Not --port, --port_file
#                             or --num_gradient_servers: this script sets them.
#   SHARDPS_MPI_TRAINER_FLAGS extra trainer flags, split the same way, {k}
#                             becoming the trainer id; the script's own
#                             arguments are appended after them (with {k}
#                             too). Not --pservers, --trainer_id or
#                             --num_gradient_servers. --config and
#                             --metrics_file here replace the script's.
#   SHARDPS_MPI_PORT          0 (default): each pserver binds a free port.
#                             Otherwise pserver rank r listens on PORT + r.
#   SHARDPS_MPI_HOST          the name or address trainers dial for a pserver
#                             on this machine; iface:NAME: the IPv4 address
#                             of interface NAME on each machine (`ip addr`),
#                             e.g. iface:eth0. Default: the pserver's --host
#                             when SHARDPS_MPI_PSERVER_FLAGS gives one (other
#                             than 0.0.0.0), else `hostname`.
#   SHARDPS_MPI_START_TIMEOUT_S  how long a trainer rank waits for the
#                             pservers' addresses (default 120; a pserver
#                             writes its address once serving, after loading
#                             its checkpoints).
#
# The script unsets these variables before it starts a binary (which would
# otherwise report each SHARDPS_ variable that names no flag of its own).
# Any other SHARDPS_<FLAG> variable reaches both binaries as usual.
#
# Under mpirun's abort (a rank failed, Ctrl-C), Open MPI sends SIGTERM to
# every rank's process group, this script and its binary alike, and SIGKILL
# one second later (--mca odls_base_sigkill_timeout S gives more, e.g. for a
# pserver's final checkpoint). Open MPI only; tested with Open MPI 4.1.

set -u
shopt -s nullglob

rank=${OMPI_COMM_WORLD_RANK:-}
size=${OMPI_COMM_WORLD_SIZE:-}
if [[ -z $rank || -z $size ]]; then
  echo "shardps_mpi.sh: OMPI_COMM_WORLD_RANK/SIZE are not set: start me" \
       "with Open MPI's mpirun (see the top of $0)" >&2
  exit 2
fi

say() { echo "shardps_mpi.sh: rank $rank on $(hostname): $*" >&2; }
usage_error() { say "$*"; exit 2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin_dir=${SHARDPS_MPI_BIN_DIR:-$repo/build}
pserver_bin=${SHARDPS_MPI_PSERVER_BIN:-$bin_dir/pserver/pserver}
trainer_bin=${SHARDPS_MPI_TRAINER_BIN:-$bin_dir/trainer/trainer}
config=${SHARDPS_MPI_CONFIG:-$repo/configs/fmnist_mlp.pbtxt}
dir=${SHARDPS_MPI_DIR:-$PWD/shardps-mpi}
base_port=${SHARDPS_MPI_PORT:-0}
start_timeout=${SHARDPS_MPI_START_TIMEOUT_S:-120}
read -r -a pserver_flags <<< "${SHARDPS_MPI_PSERVER_FLAGS:-}"
read -r -a trainer_flags <<< "${SHARDPS_MPI_TRAINER_FLAGS:-}"
trainer_flags+=("$@")
host=${SHARDPS_MPI_HOST:-}
p=${SHARDPS_MPI_PSERVERS:-}

# P: the variable, else the first of two app contexts, else 1.
read -r -a app_sizes <<< "${OMPI_APP_CTX_NUM_PROCS:-}"
if [[ -z $p ]]; then
  if [[ ${OMPI_NUM_APP_CTX:-1} == 2 ]]; then p=${app_sizes[0]}; else p=1; fi
fi
for v in "SHARDPS_MPI_PSERVERS=$p" "SHARDPS_MPI_PORT=$base_port" \
         "SHARDPS_MPI_START_TIMEOUT_S=$start_timeout"; do
  [[ ${v#*=} =~ ^[0-9]+$ ]] || usage_error "$v is not a non-negative integer"
done
[[ $p -ge 1 && $p -lt $size ]] ||
  usage_error "SHARDPS_MPI_PSERVERS=$p: need 1 <= P < $size (mpirun's" \
              "process count), so that there is at least one trainer"
if [[ ${OMPI_NUM_APP_CTX:-1} == 2 && ${app_sizes[0]} != "$p" ]]; then
  usage_error "SHARDPS_MPI_PSERVERS=$p but mpirun's first app context" \
              "(the pservers) has ${app_sizes[0]} processes"
fi
n=$((size - p))

# has_flag NAME ARGS...: whether ARGS set --NAME (or -NAME).
has_flag() {
  local name=$1 a
  shift
  for a in "$@"; do
    [[ $a =~ ^--?$name(=|$) ]] && return 0
  done
  return 1
}
for f in port port_file num_gradient_servers; do
  ! has_flag "$f" "${pserver_flags[@]}" ||
    usage_error "SHARDPS_MPI_PSERVER_FLAGS may not set --$f (this script" \
                "does; see SHARDPS_MPI_PORT)"
done
for f in pservers trainer_id num_gradient_servers; do
  ! has_flag "$f" "${trainer_flags[@]}" ||
    usage_error "trainer flags may not set --$f: this script sets it from" \
                "the rank"
done

# The binaries must not see our variables.
unset "${!SHARDPS_MPI_@}"

job=${OMPI_MCA_ess_base_jobid:-${PMIX_NAMESPACE:-0}}
coord=$dir/.mpi-$job
mkdir -p "$coord" || usage_error "cannot create $coord"

# The binary this rank runs; signals that reach this script go to it too.
child=
# shellcheck disable=SC2317  # (called by the traps below)
on_signal() {
  local sig=$1 num=$2
  if [[ -n $child ]] && kill -0 "$child" 2>/dev/null; then
    kill -s "$sig" "$child" 2>/dev/null
    wait "$child"
  fi
  exit $((128 + num))
}
trap 'on_signal TERM 15' TERM
trap 'on_signal INT 2' INT
trap 'on_signal HUP 1' HUP

# start LOG BINARY ARGS...: runs the binary in the background, its output
# in LOG after one line saying what runs.
start() {
  local log=$1
  shift
  {
    printf 'shardps_mpi.sh: rank %s of %s on %s (Open MPI job %s):' \
      "$rank" "$size" "$(hostname)" "$job"
    printf ' %q' "$@"
    printf '\n'
  } > "$log"
  "$@" < /dev/null >> "$log" 2>&1 {nap_fd}<&- &
  child=$!
}

# fail STATUS LOG MESSAGE...: says why this rank fails, with the end of its
# log, and exits with STATUS (1 when STATUS is 0).
fail() {
  local st=$1 log=$2
  shift 2
  say "$*; the end of $log:"
  tail -n 5 "$log" | sed 's/^/    /' >&2
  echo "shardps_mpi.sh: $*" >> "$log"
  [[ $st -ne 0 ]] || st=1
  exit "$st"
}

# nap SECONDS: sleeps without a child process (`read -t` on a FIFO that
# nobody writes), so that a signal is handled at once and no `sleep` dies
# of mpirun's SIGTERM with bash's "Terminated" on mpirun's output.
fifo=$(mktemp -u "${TMPDIR:-/tmp}/shardps_mpi.XXXXXX")
mkfifo -m 600 "$fifo" || usage_error "cannot create a FIFO $fifo"
exec {nap_fd}<> "$fifo"
rm -f "$fifo"
nap() { read -r -t "$1" -u "$nap_fd" _ || true; }

# write_atomically PATH TEXT
write_atomically() {
  printf '%s\n' "$2" > "$1.tmp.$rank" && mv -f "$1.tmp.$rank" "$1"
}

# orphaned: whether the process that started this script (mpirun, or its
# orted on another machine) is gone, e.g. killed with SIGKILL.
launcher=$PPID
orphaned() {
  local stat
  stat=$(< /proc/$$/stat) 2>/dev/null || return 1
  stat=${stat##*) }
  read -r _ stat _ <<< "$stat"
  [[ $stat != "$launcher" ]]
}

# stop_orphan WHAT: when mpirun is gone, stops the binary (SIGTERM), notes
# it in the rank's log ($log), and exits. Its stderr, a pipe to mpirun, is
# closed: SIGPIPE is ignored from here on.
stop_orphan() {
  trap '' PIPE
  echo "shardps_mpi.sh: mpirun is gone: stopping $1" >> "$log"
  on_signal TERM 15
}

run_pserver() {
  local r=$rank log=$dir/pserver-$rank.log port_file=$coord/pserver-$rank.port
  local port=0 st done_markers a addr
  [[ $base_port -eq 0 ]] || port=$((base_port + r))
  if [[ -z $host ]]; then
    for a in "${pserver_flags[@]}"; do
      [[ $a =~ ^--?host=(.+)$ ]] && host=${BASH_REMATCH[1]}
    done
    [[ -n $host && $host != 0.0.0.0 && $host != "::" ]] || host=$(hostname)
  elif [[ $host == iface:* ]]; then
    a=$(ip -4 -o addr show dev "${host#iface:}" 2>&1) ||
      usage_error "SHARDPS_MPI_HOST=$host: $a"
    [[ $a =~ inet\ ([0-9.]+) ]] ||
      usage_error "SHARDPS_MPI_HOST=$host: no IPv4 address on ${host#iface:}"
    host=${BASH_REMATCH[1]}
  fi
  start "$log" "$pserver_bin" --port="$port" --port_file="$port_file" \
    --num_gradient_servers="$n" "${pserver_flags[@]//\{r\}/$r}"
  until [[ -s $port_file ]]; do
    if ! kill -0 "$child" 2>/dev/null; then
      wait "$child"
      st=$?
      fail "$st" "$log" "pserver $r exited with status $st before serving"
    fi
    ! orphaned || stop_orphan "pserver $r"
    nap 0.1
  done
  addr=$host:$(< "$port_file")
  write_atomically "$coord/pserver-$r.addr" "$addr"
  # Serve until every trainer has left its marker.
  while :; do
    done_markers=("$coord"/trainer-*.done)
    [[ ${#done_markers[@]} -lt $n ]] || break
    if ! kill -0 "$child" 2>/dev/null; then
      wait "$child"
      st=$?
      fail "$st" "$log" "pserver $r ($addr) exited with status $st while" \
           "the trainers ran"
    fi
    ! orphaned || stop_orphan "pserver $r"
    nap 0.2
  done
  kill -TERM "$child" 2>/dev/null
  wait "$child"
  st=$?
  child=
  [[ $st -eq 0 ]] || fail "$st" "$log" "pserver $r exited with status $st" \
                          "after SIGTERM at the end of the job"
  write_atomically "$coord/pserver-$r.stopped" 0
  if [[ $r -eq 0 ]]; then
    # Once every pserver has stopped, remove the rendezvous (waiting 30 s
    # at most).
    local deadline=$((SECONDS + 30)) stopped
    while :; do
      stopped=("$coord"/pserver-*.stopped)
      [[ ${#stopped[@]} -lt $p && $SECONDS -lt $deadline ]] || break
      nap 0.2
    done
    [[ ${#stopped[@]} -lt $p ]] || rm -rf "$coord"
  fi
  exit 0
}

run_trainer() {
  local k=$((rank - p)) log=$dir/trainer-$((rank - p)).log
  local deadline=$((SECONDS + start_timeout)) addrs i st missing list
  local own=() stopping=
  # The pservers' addresses, in rank order.
  while :; do
    addrs=()
    missing=
    for ((i = 0; i < p; i++)); do
      if [[ -s $coord/pserver-$i.addr ]]; then
        addrs+=("$(< "$coord/pserver-$i.addr")")
      else
        missing+=" $i"
      fi
    done
    [[ -n $missing ]] || break
    if [[ $SECONDS -ge $deadline ]]; then
      : > "$log"
      fail 1 "$log" "trainer $k: no address from pserver rank(s)$missing in" \
           "$coord after ${start_timeout}s (SHARDPS_MPI_START_TIMEOUT_S). Is" \
           "SHARDPS_MPI_DIR one folder that every machine sees, and the same" \
           "in every app context (mpirun's -x is per app context)?"
    fi
    ! orphaned || stop_orphan "trainer $k"
    nap 0.1
  done
  list=$(IFS=,; echo "${addrs[*]}")
  write_atomically "$dir/pservers" "$list"
  has_flag config "${trainer_flags[@]}" || own+=(--config="$config")
  if ! has_flag metrics_file "${trainer_flags[@]}"; then
    rm -f "$dir/trainer-$k.jsonl"
    own+=(--metrics_file="$dir/trainer-$k.jsonl")
  fi
  start "$log" "$trainer_bin" --pservers="$list" --trainer_id="$k" \
    --num_gradient_servers="$n" "${own[@]}" "${trainer_flags[@]//\{k\}/$k}"
  while kill -0 "$child" 2>/dev/null; do
    if [[ -z $stopping ]] && orphaned; then
      trap '' PIPE
      echo "shardps_mpi.sh: mpirun is gone: stopping trainer $k" >> "$log"
      kill -TERM "$child" 2>/dev/null
      stopping=1
    fi
    nap 0.2
  done
  wait "$child"
  st=$?
  child=
  write_atomically "$coord/trainer-$k.done" "$st"
  [[ $st -eq 0 ]] || fail "$st" "$log" "trainer $k exited with status $st"
  exit 0
}

if [[ $rank -lt $p ]]; then run_pserver; else run_trainer; fi
