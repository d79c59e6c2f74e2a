//! One agent, several nodes: the engines of several emulated nodes in one poll loop on one
//! core (`--node`, or `"nodes"` in the --config file). Each node keeps its own port, node
//! address, control socket, mempools, dmadev and counters; they share the core, the EAL and
//! nothing else (frames between them still cross their wire). This is how a machine with too
//! few cores for one busy core per node still gets a busy engine core (`tigon run --layout`).

use super::args::{AgentArgs, Settings};

/// One node the agent hosts: its options (the top level's filled in) and their settings.
pub struct NodePlan {
    pub args: AgentArgs,
    pub settings: Settings,
}

/// The nodes `top` asks for: the `--node` / `"nodes"` entries, or else the top level alone.
pub fn plan(top: &AgentArgs) -> Result<Vec<NodePlan>, String> {
    let mut entries: Vec<AgentArgs> = top.nodes.clone().unwrap_or_default();
    for text in &top.node {
        let n: AgentArgs = serde_json::from_str(text).map_err(|e| {
            format!("--node {text}: {e} (a JSON object of per-node options, e.g. {{\"port\": ..., \"socket\": ...}})")
        })?;
        entries.push(n);
    }
    if entries.is_empty() {
        let settings = top.settings()?;
        return Ok(vec![NodePlan {
            args: top.clone(),
            settings,
        }]);
    }
    let mut out: Vec<NodePlan> = Vec::with_capacity(entries.len());
    for (i, n) in entries.into_iter().enumerate() {
        if let Some(key) = agent_only(&n) {
            return Err(format!(
                "node {i}: \"{key}\" belongs to the agent, not to a node: set it at the top \
                 level (the nodes share one engine core and one EAL)"
            ));
        }
        let args = n.over(top);
        let settings = args.settings().map_err(|e| format!("node {i}: {e}"))?;
        for (j, o) in out.iter().enumerate() {
            let s = &o.settings;
            if s.socket == settings.socket {
                return Err(format!(
                    "nodes {j} and {i} both serve {}: give each node its own \"socket\"",
                    s.socket.display()
                ));
            }
            if device(&s.devargs) == device(&settings.devargs) {
                return Err(format!(
                    "nodes {j} and {i} both name the port `{}`: give each node its own device \
                     (net_memif0, net_memif1, ...)",
                    device(&s.devargs)
                ));
            }
            if o.args.dma.is_some()
                && o.args.dma.as_deref().map(device) == args.dma.as_deref().map(device)
            {
                return Err(format!(
                    "nodes {j} and {i} both name the dmadev `{}`: a dmadev serves one node",
                    args.dma.as_deref().unwrap_or_default()
                ));
            }
        }
        out.push(NodePlan { args, settings });
    }
    Ok(out)
}

/// What `tigon doctor` says of an agent configuration with `"nodes"`: the agent's own check,
/// and each node's port and socket.
pub fn describe(top: &AgentArgs) -> Result<String, String> {
    let p = plan(top)?;
    let nodes: Vec<String> = p
        .iter()
        .map(|n| format!("{} at {}", n.settings.devargs, n.settings.socket.display()))
        .collect();
    Ok(format!(
        "{} nodes in one poll loop on lcore {}: {}",
        p.len(),
        p[0].settings.lcore,
        nodes.join("; ")
    ))
}

/// The device name of devargs (before the first comma).
fn device(devargs: &str) -> &str {
    devargs.split(',').next().unwrap_or("").trim()
}

/// The first option of `n` that belongs to the whole agent.
fn agent_only(n: &AgentArgs) -> Option<&'static str> {
    [
        ("lcore", n.lcore.is_some()),
        ("idle", n.idle.is_some()),
        ("idle-spin-us", n.idle_spin_us.is_some()),
        ("idle-poll-us", n.idle_poll_us.is_some()),
        ("cpu-latency", n.cpu_latency.is_some()),
        ("nice", n.nice.is_some()),
        ("no-huge", n.no_huge.is_some()),
        ("eal", n.eal.is_some()),
        ("nodes", n.nodes.is_some() || !n.node.is_empty()),
    ]
    .into_iter()
    .find_map(|(k, set)| set.then_some(k))
}

impl AgentArgs {
    /// This node's options with what it leaves unset taken from `top` (never its nodes).
    fn over(mut self, top: &AgentArgs) -> AgentArgs {
        self.fill_from(top);
        self.nodes = None;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn top(nodes: &[&str]) -> AgentArgs {
        AgentArgs {
            mtu: Some(9000),
            idle: Some("spin".into()),
            socket: Some("/tmp/top.sock".into()),
            node: nodes.iter().map(|s| s.to_string()).collect(),
            ..AgentArgs::default()
        }
    }

    #[test]
    fn nodes_inherit_the_top_level_and_keep_their_own() {
        let p = plan(&top(&[
            r#"{"port":"net_null0","socket":"/tmp/a.sock"}"#,
            r#"{"port":"net_null1","socket":"/tmp/b.sock","mtu":1500}"#,
        ]))
        .unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].settings.devargs, "net_null0");
        assert_eq!(p[0].settings.mtu, 9000, "from the top level");
        assert_eq!(p[1].settings.mtu, 1500, "its own");
        assert!(p[0].settings.spin && p[1].settings.spin);
    }

    #[test]
    fn no_nodes_is_the_top_level_alone() {
        let mut a = top(&[]);
        a.port = Some("net_null0".into());
        let p = plan(&a).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].settings.socket, std::path::Path::new("/tmp/top.sock"));
    }

    #[test]
    fn clashes_and_agent_options_in_a_node_are_refused() {
        let e = |nodes: &[&str]| plan(&top(nodes)).err().expect("refused");
        let same_socket = e(&[
            r#"{"port":"net_null0","socket":"/tmp/a.sock"}"#,
            r#"{"port":"net_null1","socket":"/tmp/a.sock"}"#,
        ]);
        assert!(
            same_socket.contains("both serve /tmp/a.sock"),
            "{same_socket}"
        );
        let same_port = e(&[
            r#"{"port":"net_memif0,role=server","socket":"/tmp/a.sock"}"#,
            r#"{"port":"net_memif0,role=client","socket":"/tmp/b.sock"}"#,
        ]);
        assert!(
            same_port.contains("both name the port `net_memif0`"),
            "{same_port}"
        );
        let lcore = e(&[r#"{"port":"net_null0","socket":"/tmp/a.sock","lcore":1}"#]);
        assert!(
            lcore.contains("node 0: \"lcore\" belongs to the agent"),
            "{lcore}"
        );
        let bad_json = e(&["{port:"]);
        assert!(bad_json.contains("--node {port:"), "{bad_json}");
        let bad_value = e(&[r#"{"port":"net_null0","socket":"/tmp/a.sock","mtu":1234}"#]);
        assert!(bad_value.starts_with("node 0: --mtu 1234"), "{bad_value}");
        let unknown = e(&[r#"{"port":"net_null0","sokcet":"/tmp/a.sock"}"#]);
        assert!(unknown.contains("unknown field `sokcet`"), "{unknown}");
    }
}
