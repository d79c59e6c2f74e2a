#!/usr/bin/env bash
# The cluster guide on one machine, as tests/guide.rs runs it: two nodes emulated by network
# namespaces joined by a veth pair (the cable), each with its own /etc/tigon (agent.env and
# agent.json, MTU 9000, af_packet on its end of the cable). Each node is prepared by
# tigon-prestart.sh and its agent started with --config, as the systemd unit does; then
# `tigon doctor` on each node, one MPI job across the nodes with the MTL, and `tigon stats`.
#
# usage: scripts/guide-local.sh [PROGRAM ARGS...]   (default: NPopenmpi -u 1048576 -n 20 -p 0)
#   TIGON_PREFIX   where scripts/install.sh put tigon (default /usr/local)
#   TIGON_MTL_DIR  where it put mca_mtl_tigon.so (default: Open MPI's component directory)
# Needs root (namespaces, af_packet). Removes everything it made when it ends.
set -euo pipefail

PREFIX=${TIGON_PREFIX:-/usr/local}
TIGON=$PREFIX/bin/tigon
PRESTART=$PREFIX/lib/tigon/tigon-prestart.sh
OMPI_DIR=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
MTL_DIR=${TIGON_MTL_DIR:-$OMPI_DIR}
APP=("$@")
[ ${#APP[@]} -gt 0 ] || APP=(NPopenmpi -u 1048576 -n 20 -p 0)

WORK=$(mktemp -d /tmp/tigon-guide.XXXXXX)
TAG=$$
# Names as `make clean-netns` knows them (tgA*, tgB*, with the owner's pid and a dash).
NS=("tgAg$TAG-0" "tgBg$TAG-0")
IF=("tgga$TAG" "tggb$TAG")

cleanup() {
    for n in 1 2; do
        pid=$(cat "$WORK/node$n/agent.pid" 2>/dev/null) || continue
        kill -INT "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    for ns in "${NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
# Namespaces of an earlier run killed before it could clean up (its pid is gone).
for ns in $(ip netns list | awk '/^tg[AB]g[0-9]+-/ {print $1}'); do
    pid=${ns:4}
    kill -0 "${pid%%-*}" 2>/dev/null || ip netns del "$ns" 2>/dev/null || true
done

echo "== two nodes: namespaces ${NS[*]}, joined by veth ${IF[*]}"
ip netns add "${NS[0]}"
ip netns add "${NS[1]}"
ip link add "${IF[0]}" netns "${NS[0]}" type veth peer name "${IF[1]}" netns "${NS[1]}"

for n in 1 2; do
    etc=$WORK/node$n # this node's /etc/tigon
    mkdir -p "$etc"
    # agent.env: an interface name (not a PCI address) means af_packet: nothing to bind.
    cat >"$etc/agent.env" <<EOF
TIGON_NIC=${IF[n - 1]}
TIGON_MTU=9000
TIGON_HUGEPAGES=256
EOF
    # One machine's cores are shared by both agents and both ranks: "idle": "yield", and
    # a descheduled agent gets 30 s before its peer gives up on it.
    cat >"$etc/agent.json" <<EOF
{
  "port": "net_af_packet0,iface=${IF[n - 1]},framecnt=2048",
  "socket": "$etc/agent.sock",
  "lcore": $((n - 1)),
  "mtu": 9000,
  "idle": "yield",
  "peer-timeout-ms": 30000
}
EOF
    echo "== node$n: tigon-prestart.sh, then tigon agent --config $etc/agent.json"
    (
        set -a
        . "$etc/agent.env"
        set +a
        ip netns exec "${NS[n - 1]}" "$PRESTART"
    )
    ip netns exec "${NS[n - 1]}" "$TIGON" agent --config "$etc/agent.json" >"$etc/agent.log" 2>&1 &
    echo $! >"$etc/agent.pid"
done

for n in 1 2; do
    etc=$WORK/node$n
    for _ in $(seq 600); do
        "$TIGON" stats --socket "$etc/agent.sock" >/dev/null 2>&1 && break
        kill -0 "$(cat "$etc/agent.pid")" 2>/dev/null || break
        sleep 0.1
    done
    if ! "$TIGON" stats --socket "$etc/agent.sock" >/dev/null 2>&1; then
        echo "node$n: the agent did not come up:" >&2
        cat "$etc/agent.log" >&2
        exit 1
    fi
    echo "== node$n: tigon doctor"
    ip netns exec "${NS[n - 1]}" "$TIGON" doctor --config "$etc/agent.json" --mtl-dir "$MTL_DIR"
done

echo "== the job: ${APP[*]}, rank 0 on node1, rank 1 on node2"
echo "localhost slots=2" >"$WORK/hosts"
cd "$WORK"
status=0
mpirun --allow-run-as-root --oversubscribe --bind-to none --hostfile "$WORK/hosts" \
    --mca pml cm --mca mtl tigon \
    --mca mca_base_component_path "$MTL_DIR:$OMPI_DIR" --mca mpi_yield_when_idle 1 \
    -np 1 -x TIGON_SOCKET="$WORK/node1/agent.sock" "${APP[@]}" : \
    -np 1 -x TIGON_SOCKET="$WORK/node2/agent.sock" "${APP[@]}" || status=$?

for n in 1 2; do
    echo "== node$n: tigon stats"
    "$TIGON" stats --socket "$WORK/node$n/agent.sock"
done
if [ "$status" != 0 ]; then
    for n in 1 2; do
        echo "== node$n: agent log" >&2
        cat "$WORK/node$n/agent.log" >&2
    done
    echo "== guide-local: the job failed (exit status $status)" >&2
    exit "$status"
fi
echo "== guide-local: done"
