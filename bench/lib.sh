# Helpers shared by bench/run and bench/streaming (sourced, not run). Never part of CI.
#
# Sourcing it checks for nginx, wrk, redis-server, redis-cli and python3, finds (or builds) sluice,
# prints what is measured (the command, the build, the peers' versions), makes a temp dir
# $work and a trap that kills every pid in $pids and removes $work on exit. It then offers:
#   raise_fd_limit N OPTION  the soft descriptor limit raised to the hard one; exits unless it
#                         leaves room for N connections (+ 100), naming OPTION
#   stop PID [SIGNAL]     stops a process of $pids (SIGTERM by default), waits for it, untracks it
#   untrack PID           takes an ended process out of $pids
#   free_port             a free TCP port on 127.0.0.1
#   wait_port PORT        wait (up to 5 s) until something listens on PORT
#   cpu_ticks PID         utime + stime of PID and its threads, plus its children's, in ticks
#   cpu_sys_ticks PID     the stime (time in the kernel) alone of the same
#   $hz                   ticks per second
#   cpu_ns PID            the same in nanoseconds (the scheduler's run time of its live threads)
#   start_redis           redis-server on a free port: sets $redis_port, $redis_pid, $redis_ports
#   start_cluster N       a Redis Cluster of N primaries: sets $cluster_seeds, adds to $redis_ports
#   redis_cpu_us          Redis's CPU time (INFO cpu), in microseconds
#   script_calls          FCALL + EVALSHA + EVAL calls since Redis's last `config resetstat` (every Redis)
#   reset_redis_stats     `config resetstat` on every Redis
#   start_syscall_count PID SECONDS
#                         counts the system calls of PID, its threads and its children for
#                         SECONDS in the background (perf stat on raw_syscalls:sys_enter)
#   finish_syscall_count  waits for that count to end and sets $syscalls to its rate per second
#                         ("-" without a working perf)
#   count_syscalls PORT PID NAME
#                         a short wrk run of its own under that count: sets $syscalls_per_request
#   start_upstream        the upstream, nginx on $upstream_port (see below)
#   nginx_reference_config, sluice_config, start_sluice: the proxies under test (see below)
#   paths_script KEYS     sets wrk_script to a wrk script spreading requests over KEYS paths
#   check_wrk NAME OUTPUT exits if a wrk run had socket errors or non-2xx answers
#   measure NAME PORT PID one wrk run against a proxy (see below)
# Env: SLUICE_BIN=path/to/sluice (default build/release/sluice, built if missing).

for tool in nginx wrk redis-server redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "bench: $tool not found (apt-get install nginx-light wrk redis-server redis-tools python3)" >&2; exit 1; }
done
sluice=${SLUICE_BIN:-build/release/sluice}
if [ ! -x "$sluice" ]; then
  [ -z "${SLUICE_BIN:-}" ] || { echo "bench: $sluice is not an executable" >&2; exit 1; }
  scripts/build release >/dev/null
fi

# What every figure below measured: the command as given (each script sets $BENCH_COMMAND before
# parsing its options; bench/run passes its own on to the script it runs), the sluice binary and
# the commit of the tree it was run from (-dirty: with uncommitted changes; a SLUICE_BIN built
# elsewhere is not necessarily that commit's), and the versions of the peers.
bench_rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ "$bench_rev" = unknown ] || git diff --quiet HEAD || bench_rev+=-dirty
bench_command=${BENCH_COMMAND:-$0}
echo "command: ${bench_command% }"
echo "sluice:  $(realpath "$sluice") (tree at $bench_rev)"
echo "peers:   $(nginx -v 2>&1 | sed 's/^nginx version: //'), $(wrk -v 2>&1 | awk 'NR == 1 {print $1, $2}' || true)," \
  "redis-server $(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')"

# With $pin set (bench/run --pin): the proxies under test run on CPU 1, and wrk, the upstream and
# Redis on CPU 0, so that a proxy at one worker has a core to itself and its requests/s is what
# that core gives it, not its share of two cores taken with the load it is measured under.
load_cpu=() proxy_cpu=()
if [ -n "${pin:-}" ]; then
  [ "$(nproc)" -ge 2 ] || { echo "bench: --pin needs two CPUs" >&2; exit 2; }
  load_cpu=(taskset -c 0) proxy_cpu=(taskset -c 1)
fi

work=$(mktemp -d /tmp/sluice-bench.XXXXXX)
# mktemp makes it 0700: nginx's workers (nobody, when started as root) must reach their temp dirs
# and the files in it.
chmod 755 "$work"
pids=()
# Waits for the tracked pids alone: a bare `wait` would also wait for children that never end by
# themselves (bench/memory's coproc, reading its stdin until this shell exits).
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ ${#pids[@]} -eq 0 ] || wait "${pids[@]}" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
# Takes an ended process out of $pids, so that the cleanup cannot kill another that got its pid.
untrack() { # pid
  local p kept=()
  for p in "${pids[@]}"; do [ "$p" = "$1" ] || kept+=("$p"); done
  pids=("${kept[@]}")
}
# Stops a tracked process (SIGTERM, or SIGNAL), waits for it and untracks it.
stop() { # pid [signal]
  kill -"${2:-TERM}" "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  untrack "$1"
}

# The processes started after it (the proxies, wrk) inherit the raised limit. A hard limit of
# "unlimited" cannot be the soft one: the kernel's ceiling (fs.nr_open) is.
raise_fd_limit() { # connections option
  local hard
  hard=$(ulimit -Hn)
  [ "$hard" != unlimited ] || hard=$(cat /proc/sys/fs/nr_open)
  ulimit -n "$hard"
  if [ "$(ulimit -n)" -lt $(($1 + 100)) ]; then
    echo "bench: the descriptor limit $(ulimit -n) is below $2 $1 + 100" >&2; exit 1
  fi
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "bench: nothing listens on $1" >&2; exit 1
}

# utime + stime of a process and its threads, plus its children's (nginx's work is in its worker).
cpu_ticks() { stat_ticks "$1" '$14 + $15'; }
# Sums an awk expression of /proc/<pid>/stat's fields over a process, its threads and children.
stat_ticks() { # pid expression
  local total=0 pid
  for pid in "$1" $(pgrep -P "$1"); do
    total=$(( total + $(awk "{print $2}" "/proc/$pid/stat") ))
  done
  echo "$total"
}
# Voluntary context switches of a process's threads and its children's, summed: each is a thread
# that blocked, for a proxy mostly its event loop asleep in epoll_wait with nothing ready (and
# woken again, the scheduler's work on its CPU time). Read from /proc, so counted in the measured
# run itself at no cost to it.
sleeps() { # pid
  local pid
  for pid in "$1" $(pgrep -P "$1"); do cat /proc/"$pid"/task/*/status; done 2>/dev/null |
    awk '/^voluntary_ctxt_switches/ {n += $2} END {print n + 0}'
}
# The part of it spent in the kernel (system calls and the network stack's work done in the
# process's time): on loopback most of either proxy's time.
cpu_sys_ticks() { stat_ticks "$1" '$15'; }
hz=$(getconf CLK_TCK)
# The same in nanoseconds, from the scheduler's count of each live thread's run time
# (/proc/<pid>/task/<tid>/schedstat): precise where a few ticks would be all cpu_ticks sees.
cpu_ns() {
  local pid
  for pid in "$1" $(pgrep -P "$1"); do cat /proc/"$pid"/task/*/schedstat; done | awk '{n += $1} END {printf "%.0f\n", n}'
}

# perf needs the kernel's tracepoints (root, or perf_event_paranoid <= -1 for another user).
perf stat -e raw_syscalls:sys_enter true >/dev/null 2>&1 && have_perf=1 || have_perf=
start_syscall_count() { # pid seconds
  rm -f "$work/syscalls"
  [ -n "$have_perf" ] || return 0
  local children
  children=$(pgrep -d, -P "$1" || true)
  perf stat -x, -e raw_syscalls:sys_enter -p "$1${children:+,$children}" -o "$work/syscalls" -- sleep "$2" \
    >/dev/null 2>&1 & syscall_counter=$!; pids+=("$syscall_counter")
  syscall_seconds=$2
}
# Sets $syscalls to that rate (not a function to call in $(...): the subshell could not wait).
finish_syscall_count() {
  syscalls=-
  [ -n "$have_perf" ] || return 0
  wait "$syscall_counter" 2>/dev/null || true
  untrack "$syscall_counter"
  syscalls=$(awk -F, -v s="$syscall_seconds" '$3 == "raw_syscalls:sys_enter" && $1 ~ /^[0-9]+$/ {
    printf "%.0f\n", $1 / s; found = 1 } END { if (!found) print "-" }' "$work/syscalls" 2>/dev/null || echo -)
}

start_redis() {
  redis_port=$(free_port)
  "${load_cpu[@]}" redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
    >"$work/redis.log" 2>&1 & redis_pid=$!; pids+=($redis_pid)
  redis_ports=("$redis_port")
}

# A Redis Cluster of $1 primaries (no replicas) on free ports: sets $cluster_seeds ("[h:p, ...]")
# and adds its ports to $redis_ports, whose CPU and script calls are summed with the single one's.
start_cluster() { # primaries
  local i port nodes=() seeds=
  for i in $(seq "$1"); do
    port=$(free_port)
    mkdir -p "$work/cluster-$port"
    "${load_cpu[@]}" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/cluster-$port" \
      --cluster-enabled yes --cluster-port "$(free_port)" --cluster-config-file "$work/cluster-$port/nodes.conf" \
      >"$work/cluster-$port.log" 2>&1 & pids+=($!)
    redis_ports+=("$port") nodes+=("127.0.0.1:$port") seeds+="${seeds:+, }127.0.0.1:$port"
  done
  for port in "${redis_ports[@]}"; do wait_port "$port"; done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$work/cluster-create.log" 2>&1
  for _ in $(seq 100); do
    local ok=0
    for i in "${nodes[@]}"; do
      redis-cli -p "${i##*:}" cluster info | grep -q 'cluster_state:ok' && ok=$((ok + 1))
    done
    [ "$ok" -lt "${#nodes[@]}" ] || break
    sleep 0.1
  done
  cluster_seeds="[$seeds]"
}

# Redis's own CPU time (INFO cpu: used_cpu_sys + used_cpu_user, every thread) in microseconds,
# summed over every Redis started (the single one, and the cluster's nodes).
redis_cpu_us() {
  local port
  for port in "${redis_ports[@]}"; do redis-cli -p "$port" info cpu; done |
    awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.0f\n", s * 1000000}'
}

script_calls() {
  local port
  for port in "${redis_ports[@]}"; do redis-cli -p "$port" info commandstats; done |
    awk -F'[=,]' '/cmdstat_(eval|evalsha|fcall):/ {n += $2} END {print n + 0}'
}

reset_redis_stats() {
  local port
  for port in "${redis_ports[@]}"; do redis-cli -p "$port" config resetstat >/dev/null; done
}

# The upstream: nginx (1 worker process) on $upstream_port answering every request 200 with the
# body $2 (default "ok\n"); $1: more directives for its location (e.g. `add_header X-Usage 3;`).
start_upstream() { # [directives] [body]
  local body='"ok\n"'
  [ -z "${2:-}" ] || body=$2
  cat > "$work/upstream.conf" <<CONF
worker_processes 1; daemon off; pid $work/upstream.pid; error_log $work/upstream.err;
events { worker_connections 4096; }
http { access_log off;
  server { listen 127.0.0.1:$upstream_port; keepalive_requests 1000000;
    location / { ${1:-} return 200 $body; } } }
CONF
  "${load_cpu[@]}" nginx -c "$work/upstream.conf" -p "$work" & pids+=($!)
}

# The configurations of the proxies under test read $workers, $upstream_port, $redis_port and
# (nginx) $nginx_port.
#
# nginx proxying to the upstream with `limit_req` at a rate that limits nothing, keep-alive to the
# upstream; $1: more directives for its location (e.g. `proxy_buffering off;`). Its key is the
# client's address and the path, as sluice's `rate-limit:<ip>:<endpoint>`, so that --keys N makes
# N keys in both (a zone of 256 MB holds a million; nginx touches only what it uses).
# Its upstream connections are kept as sluice keeps its own: 64 idle per worker (sluice's
# upstream.max-idle-connections), for as many requests as they carry (nginx's default of 1000
# would reconnect every 1000 requests, work sluice never does), closed after 60 s idle (sluice's
# upstream.idle-timeout). `proxy_request_buffering off`: nginx streams a request body to the
# upstream as it comes, as sluice does past its 16 KiB server.request-buffer-size, instead of
# reading it whole first (into a temp file beyond client_body_buffer_size).
nginx_reference_config() {
  cat <<CONF
worker_processes $workers; daemon off; pid $work/nginx.pid; error_log $work/nginx.err;
events { worker_connections 4096; }
http { access_log off;
  limit_req_zone \$binary_remote_addr\$uri zone=bench:256m rate=10000000r/s;
  upstream backend { server 127.0.0.1:$upstream_port;
    keepalive 64; keepalive_requests 1000000; keepalive_timeout 60s; }
  server { listen 127.0.0.1:$nginx_port; keepalive_requests 1000000;
    location / { limit_req zone=bench burst=1000000 nodelay; ${1:-}
      proxy_http_version 1.1; proxy_set_header Connection ""; proxy_request_buffering off;
      proxy_pass http://backend; } } }
CONF
}

# sluice on the given port and store (memory, redis, or cluster: the Redis store on the cluster
# start_cluster made). With a limit, one rule on /* with that limit alone;
# without, every request gets the fallback (a LEAKY_BUCKET that limits nothing).
sluice_config() { # port store [limit]
  cat <<CONF
server: { listen: "127.0.0.1:$1", workers: $workers }
upstream: { url: "http://127.0.0.1:$upstream_port" }
rate-limit:
  store: ${2/cluster/redis}
  fallback: { algorithm: LEAKY_BUCKET, capacity: 100000000, flowRate: 10000000, mode: police }
CONF
  # failure-mode closed: a request Redis failed to decide (down, timed out) is answered 503, which
  # fails the run (measure), where the default (open) would forward it and flatter the Redis store.
  if [ "$2" = cluster ]; then
    echo "  redis: { cluster: $cluster_seeds, ttl: 60s, timeout: 200ms, failure-mode: closed }"
  else
    echo "  redis: { host: 127.0.0.1, port: $redis_port, ttl: 60s, timeout: 200ms, failure-mode: closed }"
  fi
  [ -z "${3:-}" ] || printf '  rules:\n    - name: bench\n      match: { path: /* }\n      limits:\n        - %s\n' "$3"
  cat <<CONF
logging: { level: warn, access-log: false }
admin: { enabled: false }
CONF
}
# Writes $work/NAME.yaml, checks it with --check-config, starts sluice (or BINARY) on it and sets
# NAME_pid.
start_sluice() { # name port store [limit] [binary]
  local bin=${5:-$sluice}
  sluice_config "$2" "$3" "${4:-}" > "$work/$1.yaml"
  "$bin" --check-config --config "$work/$1.yaml" >/dev/null
  "${proxy_cpu[@]}" "$bin" --config "$work/$1.yaml" >"$work/$1.log" 2>&1 & printf -v "$1_pid" %s $!; pids+=($!)
}

# The requests wrk sends: GET / (no script: wrk's fastest path), or GET /k<i> over $1 paths,
# formatted once up front so that the script costs wrk as little as possible per request.
paths_script() { # keys
  wrk_script=()
  [ "$1" -gt 1 ] || return 0
  cat > "$work/paths-$1.lua" <<LUA
local requests, n, i = {}, $1, 0
-- In init, where wrk has set the Host header that wrk.format adds.
init = function() for k = 1, n do requests[k] = wrk.format("GET", "/k" .. k) end end
request = function() i = i % n + 1; return requests[i] end
LUA
  wrk_script=(-s "$work/paths-$1.lua")
}

# Exits, naming the proxy and the counts, when a wrk run (its output $2) had a socket error
# (connect, read, write, timeout) or an answer other than 2xx or 3xx: that round measured refusals
# or failures, not the proxy's work, and must not enter a median.
check_wrk() { # name output
  local socket errors non2xx
  # wrk prints "Socket errors: connect 0, read 0, write 0, timeout 0" when any is not 0.
  socket=$(sed -n 's/^ *Socket errors: //p' <<<"$2")
  errors=$(awk -F'[ ,]+' '{print $2 + $4 + $6 + $8}' <<<"${socket:-x 0}")
  non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$2")
  if [ "$errors" != 0 ] || [ "${non2xx:-0}" != 0 ]; then
    echo "bench: $1${round:+ in round $round}: ${non2xx:-0} non-2xx answers, socket errors:" \
      "${socket:-none}; stopping, the round is not a measure" >&2
    exit 1
  fi
}

# The system calls per request of a proxy, in a wrk run of 3 s of their own, after the measured
# one: perf's tracepoint on every system call slows each a little and moved sluice's two-worker
# p99 from 1.6-3.5 ms to 4.5-4.7 (wrk --latency, 4 and 3 rounds), so the measured run goes
# untraced. Sets $syscalls_per_request ("-" without a working perf, or with $skip_syscall_count
# set, for a script that prints no system calls).
count_syscalls() { # port pid name
  syscalls_per_request=-
  [ -n "$have_perf" ] && [ -z "${skip_syscall_count:-}" ] || return 0
  local seconds=3 out rps
  start_syscall_count "$2" "$seconds"
  out=$("${load_cpu[@]}" wrk -t"$threads" -c"$connections" -d"${seconds}s" "${wrk_script[@]}" "http://127.0.0.1:$1/")
  finish_syscall_count
  check_wrk "$3 (its system call count)" "$out"
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  # perf counted for wrk's duration: its rate over wrk's is the count per request.
  syscalls_per_request=$(awk -v s="$syscalls" -v r="$rps" 'BEGIN {
    if (s == "-" || r + 0 <= 0) print "-"; else printf "%.3f\n", s / r }')
}

# One wrk run against a proxy (after a 1 s warm-up), with $threads, $connections, $duration and
# the options in the array $wrk_script, then count_syscalls; appends "name rps p50 p99 cpu_us
# redis_cpu_us reqs non2xx calls syscalls_per_request sys_cpu_us sleeps" to $work/results
# (sys_cpu_us: the kernel's part of cpu_us; sleeps: the proxy's voluntary context switches).
# A run with a socket error or a non-2xx answer stops the script (check_wrk): non2xx is 0 in
# every line written.
# Redis's CPU (its own count, INFO cpu: microseconds where /proc has 10 ms ticks) is counted for
# every proxy: it is part of what the Redis store costs.
measure() { # name port pid
  local before after sys_before sys_after redis_before redis_after sleeps_before sleeps_after
  local out rps reqs p50 p99
  "${load_cpu[@]}" wrk -t"$threads" -c"$connections" -d1s "${wrk_script[@]}" "http://127.0.0.1:$2/" >/dev/null 2>&1 # warm-up
  reset_redis_stats
  before=$(cpu_ticks "$3") sys_before=$(cpu_sys_ticks "$3") redis_before=$(redis_cpu_us)
  sleeps_before=$(sleeps "$3")
  out=$("${load_cpu[@]}" wrk -t"$threads" -c"$connections" -d"${duration}s" --latency "${wrk_script[@]}" "http://127.0.0.1:$2/")
  after=$(cpu_ticks "$3") sys_after=$(cpu_sys_ticks "$3") redis_after=$(redis_cpu_us)
  sleeps_after=$(sleeps "$3")
  check_wrk "$1" "$out"
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
  calls=$(script_calls)
  count_syscalls "$2" "$3" "$1"
  echo "$1 $rps $p50 $p99 $(( (after - before) * 1000000 / hz )) $(( redis_after - redis_before )) $reqs ${non2xx:-0} $calls $syscalls_per_request $(( (sys_after - sys_before) * 1000000 / hz )) $(( sleeps_after - sleeps_before ))" >> "$work/results"
}
