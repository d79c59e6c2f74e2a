#!/usr/bin/env bash
# Removes what a killed `tigon run`, demo, benchmark or test left behind, and only what a dead
# process left: their network namespaces (tgA<pid>-<n>, tgB..., tgM..., tgN...; the guide's
# tgAg<pid>-<n>), veths left in the root namespace (tva<pid>-<n>, tvb...) and scratch entries
# in the temporary directory (tigon-run-<pid>-<n>, tigon-demo-<pid>-<n>.sock). The pid in
# each name is its owner's; what a running process owns is kept, and so is any name without
# an owner in it (it is listed, for removal by hand). `make clean-netns` runs this; the next
# `tigon run` does the same by itself (src/leftovers.rs).
set -uo pipefail
shopt -s extglob

# The owner pid of NAME after PREFIX (letters, then <pid>-<n>), or nothing.
owner() {
    local rest=${1#"$2"}
    rest=${rest##+([a-z])}
    [[ $rest =~ ^([0-9]+)- ]] && echo "${BASH_REMATCH[1]}"
}

# A dead owner: no such process (kill -0 fails with "no such process", not "not permitted").
dead() {
    [ "$1" != "$$" ] && ! kill -0 "$1" 2>/dev/null && ! [ -d "/proc/$1" ]
}

removed=0 kept=0
for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    prefix=${ns:0:3}
    case $prefix in tgA | tgB | tgM | tgN) ;; *) continue ;; esac
    pid=$(owner "$ns" "$prefix")
    if [ -z "$pid" ]; then
        echo "kept netns $ns: no owner pid in its name (ip netns del $ns if it is yours)"
        kept=$((kept + 1))
    elif dead "$pid"; then
        ip netns del "$ns" && echo "deleted netns $ns (owner pid $pid is gone)" && removed=$((removed + 1))
    else
        echo "kept netns $ns: its owner, pid $pid, runs"
        kept=$((kept + 1))
    fi
done
for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    prefix=${link:0:3}
    case $prefix in tva | tvb) ;; *) continue ;; esac
    pid=$(owner "$link" "$prefix")
    if [ -n "$pid" ] && dead "$pid"; then
        ip link del "$link" 2>/dev/null && echo "deleted veth $link (owner pid $pid is gone)" && removed=$((removed + 1))
    fi
done
tmp=${TMPDIR:-/tmp}
for path in "$tmp"/tigon-run-* "$tmp"/tigon-demo-* /dev/shm/tigon-run-*; do
    [ -e "$path" ] || continue
    name=$(basename "$path")
    case $name in tigon-run-*) prefix=tigon-run- ;; *) prefix=tigon-demo- ;; esac
    pid=$(owner "$name" "$prefix")
    if [ -n "$pid" ] && dead "$pid"; then
        rm -rf -- "$path" && echo "removed $path (owner pid $pid is gone)" && removed=$((removed + 1))
    fi
done
echo "clean-leftovers: removed $removed, kept $kept namespace(s) of running processes or unknown owners"
