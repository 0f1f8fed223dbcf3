#!/usr/bin/env bash
# Real Neo4j 5, RabbitMQ and PostgreSQL on loopback, for development and CI.
#
#   services/services.sh up       start what is not running (idempotent), wait until each
#                                 answers its own protocol, print `export NAME=value` lines
#   services/services.sh down     stop what `up` started, and only that
#   services/services.sh status   one line per service: NAME PID STATE; exit 0 if all are up
#   services/services.sh logs     the tail of every log, to standard error
#
# `make services` runs `up`: eval "$(make -s services)". Standard output carries nothing but
# the export lines; progress goes to standard error and the servers' logs to
# .mce/services/*/ (docs/deployment.md, "The services on one machine").
#
# Inputs (all optional):
#   NEO4J_PASSWORD        password of the Neo4j user neo4j   (default mce-neo4j-dev)
#   MCE_NEO4J_PORT        Bolt port on 127.0.0.1             (default 7687)
#   MCE_NEO4J_HEAP        Neo4j's JVM heap                   (default 1g)
#   MCE_RABBITMQ_PORT     AMQP port on 127.0.0.1             (default 5672; distribution port +20000)
#   MCE_PG_CLUSTER        Debian cluster VERSION/NAME        (default 15/main; its port is the cluster's)
#   DAGSTER_PG_DB, DAGSTER_PG_USER, DAGSTER_PG_PASSWORD      (default dagster, dagster, dagster)
#   MCE_SERVICES          which services                     (default "neo4j rabbitmq postgres")
#   MCE_SERVICES_DIR      state folder                       (default <repo>/.mce/services)
#   MCE_SERVICES_TIMEOUT  seconds to wait for each service   (default 180)
#   MCE_MAVEN_REPO        Maven local repository             (default Maven's, ~/.m2/repository)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${MCE_SERVICES_DIR:-$REPO/.mce/services}"
SERVICES="${MCE_SERVICES:-neo4j rabbitmq postgres}"
TIMEOUT="${MCE_SERVICES_TIMEOUT:-180}"

NEO4J_HOST=127.0.0.1
NEO4J_PORT="${MCE_NEO4J_PORT:-7687}"
NEO4J_USER=neo4j
NEO4J_PW="${NEO4J_PASSWORD:-mce-neo4j-dev}"
NEO4J_HEAP="${MCE_NEO4J_HEAP:-1g}"
NEO4J_HOME="$STATE/neo4j"
LAUNCHER_SRC="$REPO/services/neo4j"
LAUNCHER_OUT="$STATE/neo4j-launcher"
LAUNCHER_CLASS=dev.mce.services.Neo4jLauncher

RMQ_HOST=127.0.0.1
RMQ_PORT="${MCE_RABBITMQ_PORT:-5672}"
RMQ_DIR="$STATE/rabbitmq"
RMQ_BIN=/usr/lib/rabbitmq/bin

PG_CLUSTER="${MCE_PG_CLUSTER:-15/main}"
PG_VERSION="${PG_CLUSTER%%/*}"
PG_NAME="${PG_CLUSTER#*/}"
PG_HOST=127.0.0.1
PG_DB="${DAGSTER_PG_DB:-dagster}"
PG_USER="${DAGSTER_PG_USER:-dagster}"
PG_PW="${DAGSTER_PG_PASSWORD:-dagster}"
PG_DIR="$STATE/postgres"

if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=python3; fi
PROBE="$REPO/services/probe.py"

log() { printf 'services: %s\n' "$*" >&2; }

# The last lines of a log, to standard error.
tail_log() {
    local file=$1 lines=${2:-40}
    if [ -s "$file" ]; then
        printf -- '----- last %s lines of %s -----\n' "$lines" "$file" >&2
        tail -n "$lines" "$file" >&2
        printf -- '----- end of %s -----\n' "$file" >&2
    fi
}

die() {
    local message=$1
    shift
    local file
    for file in "$@"; do tail_log "$file"; done
    printf 'services: FAILED: %s\n' "$message" >&2
    exit 1
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# A live process (a zombie, killed but not yet reaped, is not).
alive() {
    [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 1
    local state
    state=$(sed 's/.*) //' 2>/dev/null <"/proc/$1/stat" | cut -d' ' -f1) || return 1
    [ "$state" != Z ]
}

cmdline() { tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" || true; }

# Listeners on a TCP port, whatever the address: "pid command" lines (or "? ?" when the
# kernel does not say who).
port_users() {
    local port=$1 line pids pid
    ss -Hltnp "sport = :$port" 2>/dev/null | while read -r line; do
        pids=$(grep -o 'pid=[0-9]*' <<<"$line" | cut -d= -f2 | sort -u)
        if [ -z "$pids" ]; then
            echo "? ?"
        fi
        for pid in $pids; do
            echo "$pid $(ps -o args= -p "$pid" 2>/dev/null | cut -c1-160)"
        done
    done | sort -u
}

port_in_use() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }

# Fails with a clear message when something that is not ours holds the port.
require_free_port() {
    local port=$1 what=$2 variable=$3
    if port_in_use "$port"; then
        die "port $port, which $what needs, is taken by something this checkout did not start:
$(port_users "$port" | sed 's/^/    pid /')
  It was left alone. Stop it, or choose another port with $variable=PORT."
    fi
}

need_root() {
    [ "$(id -u)" = 0 ] || die "$1 needs root (apt-get, or running as the postgres user)"
}

APT_UPDATED=
apt_install() {
    need_root "installing $*"
    log "installing $* with apt-get (log: $STATE/apt.log)"
    local t0
    t0=$(now)
    export DEBIAN_FRONTEND=noninteractive
    if [ -z "$APT_UPDATED" ] && ! apt-get install -y -q -o DPkg::Lock::Timeout=300 "$@" >>"$STATE/apt.log" 2>&1; then
        apt-get update -q -o DPkg::Lock::Timeout=300 >>"$STATE/apt.log" 2>&1 ||
            die "apt-get update failed" "$STATE/apt.log"
        APT_UPDATED=1
        apt-get install -y -q -o DPkg::Lock::Timeout=300 "$@" >>"$STATE/apt.log" 2>&1 ||
            die "apt-get install $* failed" "$STATE/apt.log"
    elif [ -n "$APT_UPDATED" ]; then
        apt-get install -y -q -o DPkg::Lock::Timeout=300 "$@" >>"$STATE/apt.log" 2>&1 ||
            die "apt-get install $* failed" "$STATE/apt.log"
    fi
    log "installed $* in $(since "$t0") s"
}

# ------------------------------------------------------------------------------------------
# Neo4j: the project's launcher (services/neo4j) on neo4j-harness.

java_major() {
    java -XshowSettings:properties -version 2>&1 | awk -F' = ' '/java.specification.version/ { print $2 }'
}

launcher_key() {
    {
        cat "$LAUNCHER_SRC/pom.xml"
        find "$LAUNCHER_SRC/src" -type f | LC_ALL=C sort | xargs cat
        java -version 2>&1
        echo "${MCE_MAVEN_REPO:-default}"
    } | sha256sum | cut -c1-32
}

launcher_classpath_ok() {
    local cp="$LAUNCHER_OUT/build/classpath.txt" entry
    [ -s "$cp" ] && [ -f "$LAUNCHER_OUT/build/classes/${LAUNCHER_CLASS//.//}.class" ] || return 1
    while IFS= read -r -d: entry || [ -n "$entry" ]; do
        [ -f "$entry" ] || return 1
    done <"$cp"
}

# Builds the launcher when its sources, the JDK or the Maven repository changed: offline
# first, so a rebuild with the jars already downloaded never touches the network.
build_launcher() {
    command -v java >/dev/null || apt_install openjdk-17-jdk-headless
    command -v mvn >/dev/null || apt_install maven
    local major
    major=$(java_major)
    [ "${major%%.*}" -ge 17 ] 2>/dev/null || die "Neo4j 5.26 needs Java 17 or newer; java on PATH is $major"
    mkdir -p "$LAUNCHER_OUT"
    local key
    key=$(launcher_key)
    if [ "$(cat "$LAUNCHER_OUT/stamp" 2>/dev/null)" = "$key" ] && launcher_classpath_ok; then
        return 0
    fi
    local args=(-B --no-transfer-progress -Dstyle.color=never -f "$LAUNCHER_SRC/pom.xml"
        "-Dlauncher.build.dir=$LAUNCHER_OUT/build")
    [ -n "${MCE_MAVEN_REPO:-}" ] && args+=("-Dmaven.repo.local=$MCE_MAVEN_REPO")
    local t0
    t0=$(now)
    rm -rf "$LAUNCHER_OUT/build" "$LAUNCHER_OUT/stamp"
    : >"$LAUNCHER_OUT/maven.log"
    if mvn -o "${args[@]}" compile >>"$LAUNCHER_OUT/maven.log" 2>&1; then
        log "neo4j: built the launcher offline in $(since "$t0") s"
    else
        log "neo4j: building the launcher; the first build downloads neo4j-harness and its jars (about 150 MB) from Maven Central"
        echo "----- offline build failed; online build -----" >>"$LAUNCHER_OUT/maven.log"
        mvn "${args[@]}" compile >>"$LAUNCHER_OUT/maven.log" 2>&1 ||
            die "the Neo4j launcher did not build" "$LAUNCHER_OUT/maven.log"
        log "neo4j: built the launcher in $(since "$t0") s"
    fi
    launcher_classpath_ok || die "the launcher built but its classpath is incomplete" "$LAUNCHER_OUT/maven.log"
    echo "$key" >"$LAUNCHER_OUT/stamp"
}

# Our launcher's pid: the pid file if it names a live launcher on this home, else a search
# for one (a launcher killed before it wrote its pid file, or a pid file removed by hand).
neo4j_pid() {
    local pid
    pid=$(cat "$NEO4J_HOME/launcher.pid" 2>/dev/null || true)
    if alive "$pid" && [[ "$(cmdline "$pid")" == *"-Dmce.neo4j.home=$NEO4J_HOME "*"$LAUNCHER_CLASS"* ]]; then
        echo "$pid"
        return
    fi
    pgrep -f -- "-Dmce.neo4j.home=$NEO4J_HOME .*$LAUNCHER_CLASS" 2>/dev/null | head -n1 || true
}

neo4j_probe() { "$PY" "$PROBE" bolt "$NEO4J_HOST" "$NEO4J_PORT" "$NEO4J_USER" "$NEO4J_PW"; }

# Waits until the launcher says it is ready (it ran a query over Bolt with these credentials)
# and our own Bolt probe passes.
neo4j_wait() {
    local pid=$1 t0=$2 deadline=$((SECONDS + TIMEOUT)) err
    local uri="bolt://$NEO4J_HOST:$NEO4J_PORT" running
    while :; do
        if [ -f "$NEO4J_HOME/launcher.ready" ]; then
            running=$(cat "$NEO4J_HOME/launcher.ready" 2>/dev/null || true)
            if [ -n "$running" ] && [ "$running" != "$uri" ]; then
                die "Neo4j (pid $pid) of this checkout runs on $running, not $uri (MCE_NEO4J_PORT).
  Run make services-stop first to move it."
            fi
            if err=$(neo4j_probe 2>&1); then
                return 0
            fi
            if [[ "$err" == *Unauthorized* || "$err" == *AuthenticationRateLimit* ]]; then
                die "Neo4j (pid $pid) is running with another password than NEO4J_PASSWORD ($err).
  Run make services-stop, then make services with the password you want."
            fi
        fi
        if ! alive "$pid"; then
            die "the Neo4j launcher (pid $pid) exited during start" "$NEO4J_HOME/launcher.log"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "neo4j: no answer after ${TIMEOUT} s; stopping the launcher we started"
            neo4j_kill "$pid"
            die "Neo4j did not answer on Bolt within ${TIMEOUT} s (MCE_SERVICES_TIMEOUT)" "$NEO4J_HOME/launcher.log"
        fi
        sleep 0.3
    done
}

neo4j_kill() {
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for i in $(seq 300); do
        alive "$pid" || return 0
        sleep 0.2
    done
    log "neo4j: pid $pid still running 60 s after SIGTERM; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

neo4j_up() {
    local pid t0
    t0=$(now)
    pid=$(neo4j_pid)
    if [ -n "$pid" ]; then
        neo4j_wait "$pid" "$t0"
        log "neo4j: running (pid $pid), answers on bolt://$NEO4J_HOST:$NEO4J_PORT"
        return
    fi
    # Nothing of ours runs: pid and ready files are leftovers (the launcher clears the rest).
    rm -f "$NEO4J_HOME/launcher.pid" "$NEO4J_HOME/launcher.ready"
    require_free_port "$NEO4J_PORT" "Neo4j's Bolt connector" MCE_NEO4J_PORT
    build_launcher
    mkdir -p "$NEO4J_HOME"
    log "neo4j: starting (data $NEO4J_HOME/data, log $NEO4J_HOME/launcher.log)"
    echo "===== $(date -Is) services.sh starts the launcher =====" >>"$NEO4J_HOME/launcher.log"
    (
        cd "$NEO4J_HOME"
        export NEO4J_PASSWORD="$NEO4J_PW"
        CLASSPATH="$LAUNCHER_OUT/build/classes:$(cat "$LAUNCHER_OUT/build/classpath.txt")"
        export CLASSPATH
        # setsid: its own session, so a Ctrl-C or hang-up of the caller does not reach it
        exec setsid java -Xms256m "-Xmx$NEO4J_HEAP" -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
            "-Dmce.neo4j.home=$NEO4J_HOME" "-Dmce.neo4j.bolt.host=$NEO4J_HOST" \
            "-Dmce.neo4j.bolt.port=$NEO4J_PORT" "$LAUNCHER_CLASS"
    ) >>"$NEO4J_HOME/launcher.log" 2>&1 </dev/null 9>&- &
    pid=$!
    neo4j_wait "$pid" "$t0"
    log "neo4j: started (pid $pid) in $(since "$t0") s, bolt://$NEO4J_HOST:$NEO4J_PORT"
}

neo4j_down() {
    local pid
    pid=$(neo4j_pid)
    if [ -z "$pid" ]; then
        rm -f "$NEO4J_HOME/launcher.pid" "$NEO4J_HOME/launcher.ready"
        log "neo4j: not running"
        return
    fi
    local t0
    t0=$(now)
    neo4j_kill "$pid"
    rm -f "$NEO4J_HOME/launcher.pid" "$NEO4J_HOME/launcher.ready"
    log "neo4j: stopped (pid $pid) in $(since "$t0") s"
}

neo4j_status() {
    local pid
    pid=$(neo4j_pid)
    if [ -n "$pid" ] && neo4j_probe 2>/dev/null; then echo "neo4j $pid up"; else echo "neo4j ${pid:--} down"; return 1; fi
}

# ------------------------------------------------------------------------------------------
# RabbitMQ: Debian's rabbitmq-server, as a node of its own with its data under $RMQ_DIR.

RMQ_NODE="mce-$(printf %s "$STATE" | sha256sum | cut -c1-8)@localhost"

rmq_env() {
    export RABBITMQ_NODENAME="$RMQ_NODE"
    export RABBITMQ_USE_LONGNAME=false
    export RABBITMQ_NODE_IP_ADDRESS="$RMQ_HOST"
    export RABBITMQ_NODE_PORT="$RMQ_PORT"
    export RABBITMQ_DIST_PORT=$((RMQ_PORT + 20000))
    export RABBITMQ_MNESIA_BASE="$RMQ_DIR/mnesia"
    export RABBITMQ_LOG_BASE="$RMQ_DIR/log"
    export RABBITMQ_PID_FILE="$RMQ_DIR/rabbitmq.pid"
    export RABBITMQ_CONFIG_FILE="$RMQ_DIR/rabbitmq.conf"
    export RABBITMQ_ADVANCED_CONFIG_FILE="$RMQ_DIR/advanced.config"
    export RABBITMQ_CONF_ENV_FILE="$RMQ_DIR/rabbitmq-env.conf"
    export RABBITMQ_ENABLED_PLUGINS_FILE="$RMQ_DIR/enabled_plugins"
    # The distribution listener on loopback too (epmd, when this node starts it, as well).
    export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
    export ERL_EPMD_ADDRESS=127.0.0.1
}

# A beam.smp is our node when its environment names our node (the name is not on its
# command line).
rmq_is_ours() {
    alive "$1" && tr '\0' '\n' 2>/dev/null <"/proc/$1/environ" | grep -qxF "RABBITMQ_NODENAME=$RMQ_NODE"
}

rmq_pid() {
    local pid
    pid=$(cat "$RMQ_DIR/rabbitmq.pid" 2>/dev/null || true)
    if rmq_is_ours "$pid"; then
        echo "$pid"
        return
    fi
    for pid in $(pgrep -x beam.smp 2>/dev/null || true); do
        if rmq_is_ours "$pid"; then
            echo "$pid"
            return
        fi
    done
}

epmd_pid() { ss -Hltnp "sport = :4369" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n1 | cut -d= -f2 || true; }

rmq_probe() { "$PY" "$PROBE" amqp "$RMQ_HOST" "$RMQ_PORT" guest guest /; }

rmq_wait() {
    local t0=$1 deadline=$((SECONDS + TIMEOUT)) pid err=""
    while :; do
        if err=$(rmq_probe 2>&1); then
            return 0
        fi
        pid=$(rmq_pid)
        if [ -z "$pid" ] && [ "$SECONDS" -ge $((deadline - TIMEOUT + 20)) ]; then
            die "RabbitMQ exited during start ($err)" "$RMQ_DIR/startup.log" "$RMQ_DIR/log/$RMQ_NODE.log"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            [ -n "$pid" ] && { log "rabbitmq: no answer after ${TIMEOUT} s; stopping the node we started"; rmq_kill "$pid"; }
            die "RabbitMQ did not answer AMQP within ${TIMEOUT} s ($err)" "$RMQ_DIR/startup.log" "$RMQ_DIR/log/$RMQ_NODE.log"
        fi
        sleep 0.3
    done
}

rmq_kill() {
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for i in $(seq 300); do
        alive "$pid" || return 0
        sleep 0.2
    done
    log "rabbitmq: pid $pid still running 60 s after SIGTERM; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

rmq_up() {
    local pid t0
    t0=$(now)
    pid=$(rmq_pid)
    if [ -n "$pid" ]; then
        local running
        running=$(awk -F' = ' '$1 == "listeners.tcp.1" { print $2 }' "$RMQ_DIR/rabbitmq.conf" 2>/dev/null || true)
        if [ -n "$running" ] && [ "$running" != "$RMQ_HOST:$RMQ_PORT" ]; then
            die "RabbitMQ (pid $pid) of this checkout listens on $running, not $RMQ_HOST:$RMQ_PORT (MCE_RABBITMQ_PORT).
  Run make services-stop first to move it."
        fi
        rmq_wait "$t0"
        log "rabbitmq: running (pid $pid), answers on amqp://$RMQ_HOST:$RMQ_PORT"
        return
    fi
    rm -f "$RMQ_DIR/rabbitmq.pid"
    require_free_port "$RMQ_PORT" "RabbitMQ's AMQP listener" MCE_RABBITMQ_PORT
    require_free_port $((RMQ_PORT + 20000)) "RabbitMQ's distribution listener (AMQP port + 20000)" MCE_RABBITMQ_PORT
    [ -x "$RMQ_BIN/rabbitmq-server" ] || apt_install rabbitmq-server
    mkdir -p "$RMQ_DIR/mnesia" "$RMQ_DIR/log"
    cat >"$RMQ_DIR/rabbitmq.conf" <<EOF
# Written by services/services.sh; rewritten at every start.
listeners.tcp.1 = $RMQ_HOST:$RMQ_PORT
loopback_users.guest = true
EOF
    echo "[]." >"$RMQ_DIR/enabled_plugins"
    : >"$RMQ_DIR/rabbitmq-env.conf"
    # epmd is shared by every Erlang node of the machine: ours only if our node starts it
    # (its pid is kept, so that a node killed and restarted still knows).
    local epmd_before
    epmd_before=$(epmd_pid)
    if [ -n "$epmd_before" ] && [ "$(cat "$RMQ_DIR/epmd.ours" 2>/dev/null)" != "$epmd_before" ]; then
        rm -f "$RMQ_DIR/epmd.ours"
    fi
    log "rabbitmq: starting node $RMQ_NODE (data $RMQ_DIR/mnesia, logs $RMQ_DIR/log)"
    echo "===== $(date -Is) services.sh starts $RMQ_NODE =====" >>"$RMQ_DIR/startup.log"
    (
        cd "$RMQ_DIR"
        rmq_env
        exec "$RMQ_BIN/rabbitmq-server" -detached
    ) >>"$RMQ_DIR/startup.log" 2>&1 </dev/null 9>&- ||
        die "rabbitmq-server -detached failed" "$RMQ_DIR/startup.log"
    rmq_wait "$t0"
    [ -z "$epmd_before" ] && epmd_pid >"$RMQ_DIR/epmd.ours"
    log "rabbitmq: started (pid $(rmq_pid)) in $(since "$t0") s, amqp://$RMQ_HOST:$RMQ_PORT"
}

rmq_down() {
    local pid t0
    t0=$(now)
    pid=$(rmq_pid)
    if [ -z "$pid" ]; then
        log "rabbitmq: not running"
    else
        rmq_kill "$pid"
        log "rabbitmq: stopped (pid $pid) in $(since "$t0") s"
    fi
    rm -f "$RMQ_DIR/rabbitmq.pid"
    # epmd, when our node started it and no node is left on it.
    local epmd
    epmd=$(epmd_pid)
    if [ -n "$epmd" ] && [ "$(cat "$RMQ_DIR/epmd.ours" 2>/dev/null)" = "$epmd" ]; then
        if epmd -names 2>/dev/null | grep '^name ' | grep -qv "^name ${RMQ_NODE%@*} "; then
            log "rabbitmq: epmd (pid $epmd) serves other Erlang nodes now; left running"
        else
            kill -TERM "$epmd" 2>/dev/null || true
            log "rabbitmq: stopped epmd (pid $epmd), which our node had started"
        fi
    fi
    rm -f "$RMQ_DIR/epmd.ours"
}

rmq_status() {
    local pid
    pid=$(rmq_pid)
    if [ -n "$pid" ] && rmq_probe 2>/dev/null; then echo "rabbitmq $pid up"; else echo "rabbitmq ${pid:--} down"; return 1; fi
}

# ------------------------------------------------------------------------------------------
# PostgreSQL: Debian's cluster (15/main by default), with a database and a user for Dagster.

pg_info() { pg_lsclusters -h 2>/dev/null | awk -v v="$PG_VERSION" -v n="$PG_NAME" '$1 == v && $2 == n'; }
pg_port() { pg_info | awk '{ print $3 }'; }
pg_online() { pg_info | awk '{ print $4 }' | grep -q online; }
pg_datadir() { pg_info | awk '{ print $6 }'; }
pg_logfile() { pg_info | awk '{ print $7 }'; }
pg_postmaster() { head -n1 "$(pg_datadir)/postmaster.pid" 2>/dev/null || true; }

pg_check() {
    PGPASSWORD="$PG_PW" PGCONNECT_TIMEOUT=5 psql -X -q -t -A \
        "host=$PG_HOST port=$(pg_port) dbname=$PG_DB user=$PG_USER" -c 'SELECT 1' 2>&1
}

pg_as_postgres() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    elif [ "$(id -un)" = postgres ]; then
        "$@"
    else
        die "creating the Dagster database needs root or the postgres user"
    fi
}

# The Dagster role and database, created when missing; the role's password follows
# DAGSTER_PG_PASSWORD.
pg_ensure_db() {
    pg_as_postgres psql -X -q -v ON_ERROR_STOP=1 -p "$(pg_port)" -d postgres \
        -v u="$PG_USER" -v p="$PG_PW" -v d="$PG_DB" >>"$PG_DIR/setup.log" 2>&1 <<'EOF' ||
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', :'u', :'p')
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'u') \gexec
SELECT format('ALTER ROLE %I LOGIN PASSWORD %L', :'u', :'p') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'d', :'u')
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'d') \gexec
EOF
        die "could not create the role $PG_USER and the database $PG_DB" "$PG_DIR/setup.log"
}

pg_up() {
    local t0 out
    t0=$(now)
    mkdir -p "$PG_DIR"
    command -v pg_lsclusters >/dev/null || apt_install "postgresql-$PG_VERSION"
    if [ -z "$(pg_info)" ]; then
        if [ "$PG_CLUSTER" = 15/main ] && [ ! -d /usr/lib/postgresql/15 ]; then
            apt_install postgresql-15
        fi
        [ -n "$(pg_info)" ] || die "there is no PostgreSQL cluster $PG_CLUSTER (pg_lsclusters); create it with pg_createcluster, or set MCE_PG_CLUSTER"
    fi
    local port
    port=$(pg_port)
    if pg_online; then
        if [ "$(cat "$PG_DIR/started-by-mce" 2>/dev/null)" = "$(pg_postmaster)" ]; then
            log "postgres: running (cluster $PG_CLUSTER, pid $(pg_postmaster), port $port)"
        else
            rm -f "$PG_DIR/started-by-mce"
            log "postgres: cluster $PG_CLUSTER was already running (pid $(pg_postmaster), port $port); using it, services-stop will leave it running"
        fi
    else
        require_free_port "$port" "the PostgreSQL cluster $PG_CLUSTER" "MCE_PG_CLUSTER (a cluster on another port)"
        need_root "starting the PostgreSQL cluster"
        log "postgres: starting cluster $PG_CLUSTER on $PG_HOST:$port (log $(pg_logfile))"
        pg_ctlcluster --skip-systemctl-redirect -o "-c listen_addresses=$PG_HOST" \
            "$PG_VERSION" "$PG_NAME" start >>"$PG_DIR/pg_ctlcluster.log" 2>&1 </dev/null 9>&- ||
            die "pg_ctlcluster $PG_VERSION $PG_NAME start failed" "$PG_DIR/pg_ctlcluster.log" "$(pg_logfile)"
        pg_postmaster >"$PG_DIR/started-by-mce"
    fi
    local deadline=$((SECONDS + TIMEOUT))
    until pg_isready -q -h "$PG_HOST" -p "$port" -t 2; do
        [ "$SECONDS" -lt "$deadline" ] || die "PostgreSQL did not accept connections within ${TIMEOUT} s" "$(pg_logfile)"
        sleep 0.3
    done
    pg_ensure_db
    out=$(pg_check) || die "cannot connect to PostgreSQL as $PG_USER to $PG_DB: $out" "$(pg_logfile)"
    [ "$out" = 1 ] || die "SELECT 1 on PostgreSQL gave '$out'"
    log "postgres: database $PG_DB, user $PG_USER on $PG_HOST:$port answer ($(since "$t0") s)"
}

pg_down() {
    if [ -z "$(pg_info)" ] || ! pg_online; then
        rm -f "$PG_DIR/started-by-mce"
        log "postgres: not running"
        return
    fi
    local pid
    pid=$(pg_postmaster)
    if [ "$(cat "$PG_DIR/started-by-mce" 2>/dev/null)" != "$pid" ]; then
        log "postgres: cluster $PG_CLUSTER (pid $pid) was not started by make services; left running"
        return
    fi
    local t0
    t0=$(now)
    pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" "$PG_NAME" stop -m fast \
        >>"$PG_DIR/pg_ctlcluster.log" 2>&1 </dev/null 9>&- ||
        die "pg_ctlcluster $PG_VERSION $PG_NAME stop failed" "$PG_DIR/pg_ctlcluster.log"
    rm -f "$PG_DIR/started-by-mce"
    log "postgres: stopped cluster $PG_CLUSTER (pid $pid) in $(since "$t0") s"
}

pg_status() {
    local pid
    pid=$(pg_postmaster)
    if [ -n "$(pg_info)" ] && pg_online && [ "$(pg_check 2>/dev/null)" = 1 ]; then echo "postgres $pid up"; else echo "postgres ${pid:--} down"; return 1; fi
}

# ------------------------------------------------------------------------------------------

emit() { printf 'export %s=%q\n' "$1" "$2"; }

exports() {
    local s
    for s in $SERVICES; do
        case $s in
        neo4j)
            emit NEO4J_URI "bolt://$NEO4J_HOST:$NEO4J_PORT"
            emit NEO4J_USERNAME "$NEO4J_USER"
            emit NEO4J_PASSWORD "$NEO4J_PW"
            ;;
        rabbitmq)
            emit RABBITMQ_URL "amqp://guest:guest@$RMQ_HOST:$RMQ_PORT/%2F"
            ;;
        postgres)
            emit DAGSTER_PG_HOST "$PG_HOST"
            emit DAGSTER_PG_PORT "$(pg_port)"
            emit DAGSTER_PG_DB "$PG_DB"
            emit DAGSTER_PG_USER "$PG_USER"
            emit DAGSTER_PG_PASSWORD "$PG_PW"
            ;;
        esac
    done
}

fn_prefix() {
    case $1 in
    neo4j) echo neo4j ;;
    rabbitmq) echo rmq ;;
    postgres) echo pg ;;
    *) die "unknown service '$1' in MCE_SERVICES (known: neo4j rabbitmq postgres)" ;;
    esac
}

# One `up` or `down` at a time per state folder: a second caller waits, then finds the
# services up. The lock is the open file itself, released by the kernel however we exit;
# the servers are started with the descriptor closed (9>&-) so they never hold it.
lock() {
    mkdir -p "$STATE"
    exec 9>"$STATE/services.lock"
    if ! flock -n 9; then
        log "another make services or services-stop is running here; waiting for it"
        flock -w 900 9 || die "still locked after 900 s: $STATE/services.lock"
    fi
}

main() {
    local command=${1:-up} s t0
    case $command in
    up)
        for s in $SERVICES; do fn_prefix "$s" >/dev/null; done
        [ "${#NEO4J_PW}" -ge 8 ] || die "NEO4J_PASSWORD must have at least 8 characters (Neo4j's rule)"
        lock
        t0=$(now)
        for s in $SERVICES; do "$(fn_prefix "$s")_up"; done
        log "all up in $(since "$t0") s: $SERVICES"
        exports
        ;;
    down | stop)
        lock
        local reversed=""
        for s in $SERVICES; do reversed="$s $reversed"; done
        for s in $reversed; do "$(fn_prefix "$s")_down"; done
        ;;
    status)
        local rc=0
        for s in $SERVICES; do "$(fn_prefix "$s")_status" || rc=3; done
        return $rc
        ;;
    logs)
        tail_log "$NEO4J_HOME/launcher.log"
        tail_log "$LAUNCHER_OUT/maven.log" 20
        tail_log "$RMQ_DIR/startup.log" 20
        tail_log "$RMQ_DIR/log/$RMQ_NODE.log"
        tail_log "$PG_DIR/pg_ctlcluster.log" 20
        [ -n "$(pg_info)" ] && tail_log "$(pg_logfile)"
        tail_log "$STATE/apt.log" 20
        ;;
    *)
        echo "usage: $0 up|down|status|logs" >&2
        return 2
        ;;
    esac
}

main "$@"
