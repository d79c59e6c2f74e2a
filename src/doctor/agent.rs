//! The running agent: does it answer on its socket, and what its counters say.

use super::Check;
use serde_json::Value;
use std::path::Path;

fn count(v: &Value, path: &[&str]) -> u64 {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

pub(super) fn agent(socket: &Path, port: Option<&str>) -> Check {
    let s = socket.display();
    let start = cmds![
        "systemctl start tigon-agent   # then: systemctl status tigon-agent; journalctl -u tigon-agent -n 50",
        format!(
            "# or by hand: tigon agent --port {} --socket {s}",
            port.unwrap_or("<PCI address or devargs>")
        ),
    ];
    let stats = match tigon_client::agent_stats(socket) {
        Ok(v) => v,
        Err(e) => {
            let what = if !socket.exists() {
                format!("no agent: nothing at {s}")
            } else if e.contains("refused") {
                format!(
                    "no agent: {s} is left over from an agent that is gone (connection refused)"
                )
            } else if e.contains("ermission") {
                let uid = std::fs::metadata("/proc/self")
                    .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
                    .unwrap_or(0);
                return Check::fail(
                    "agent",
                    format!("{s}: permission denied"),
                    &cmds![format!(
                        "# run as the agent's user, or let this uid attach: tigon agent --allow-uid {uid} ..."
                    )],
                );
            } else {
                format!("the agent at {s} does not answer: {e}")
            };
            return Check::fail("agent", what, &start);
        }
    };
    let drops: u64 = stats
        .get("drops")
        .and_then(Value::as_object)
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
    let failed = count(&stats, &["messages", "failed"]);
    let timeouts = count(&stats, &["peer_events", "timeouts"]);
    let summary = format!(
        "{s}: {} client(s), {} peer(s), {} frames rx / {} tx, {drops} dropped, {} retransmits, {failed} failed operation(s)",
        count(&stats, &["clients"]),
        count(&stats, &["peers"]),
        count(&stats, &["frames", "rx"]),
        count(&stats, &["frames", "tx"]),
        count(&stats, &["retransmits"]),
    );
    // A port whose link is down reaches no peer: said first, with what to do for each kind,
    // once anyone wants to talk (clients, peers, failures); before that, a memif server
    // waiting for its client or a fresh agent is only told of it.
    let link_down = stats.pointer("/port_link/up") == Some(&Value::Bool(false));
    let in_use = count(&stats, &["clients"]) > 0 || count(&stats, &["peers"]) > 0;
    if link_down && !in_use && failed == 0 && timeouts == 0 {
        return Check::ok(
            "agent",
            format!("{summary}; its port's link is down (no peer connected yet)"),
        );
    }
    if link_down {
        return Check::warn(
            "agent",
            format!("{summary}; its port's link is DOWN: no peer can be reached"),
            &cmds![
                "# a NIC: check the cable and the switch port (ethtool / ip -s link on a kernel-bound twin)",
                "# af_packet / AF_XDP: ip link set IFACE up (in the agent's namespace)",
                "# memif client: its server agent went away; this agent reconnects within a second of its return (its log says so)",
            ],
        );
    }
    if failed > 0 || timeouts > 0 {
        return Check::warn(
            "agent",
            format!("{summary}, {timeouts} peer timeout(s)"),
            &cmds![
                format!("tigon stats --socket {s}   # peer_events, drops, port.imissed"),
                "# unreachable peers: check the link (ip -s link, the switch's MTU) and that every node's agent runs",
            ],
        );
    }
    Check::ok("agent", summary)
}
