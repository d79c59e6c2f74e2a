//! `tigon doctor`: checks that this node can run tigon — hugepages, the NIC (bound to a DPDK
//! driver, or a vdev), IOMMU / vfio, dmadevs, DPDK, Open MPI, the MTL component and the
//! agent — and prints, for each problem, the commands that fix it. Exits non-zero when the
//! node cannot run tigon. Starts no DPDK: it runs next to a live agent.
//!
//! This file reads the configuration and runs the checks; each check lives with its kind:
//! [`hugepages`], [`pci`] (the NIC, the IOMMU, dmadevs), [`software`] (DPDK, Open MPI, the
//! component) and [`agent`] (the running agent).

use crate::agent::AgentArgs;
use clap::Args;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Commands of a fix, as owned strings.
macro_rules! cmds {
    ($($e:expr),* $(,)?) => { [$(String::from($e)),*] };
}

mod agent;
mod hugepages;
mod pci;
mod software;

/// The agent configuration the systemd unit uses; read when `--config` is not given.
pub const DEFAULT_CONFIG: &str = "/etc/tigon/agent.json";

#[derive(Args, Debug, Default)]
pub struct DoctorArgs {
    /// The agent's control socket (default: the config's, else $TIGON_SOCKET, else
    /// /run/tigon/agent.sock).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// The agent's port: a PCI address or vdev devargs (default: the config's).
    #[arg(long)]
    pub port: Option<String>,
    /// The agent's dmadev (default: the config's).
    #[arg(long)]
    pub dma: Option<String>,
    /// Where hugetlbfs should be mounted.
    #[arg(long, default_value = "/dev/hugepages")]
    pub huge_dir: PathBuf,
    /// Where mca_mtl_tigon.so should be (default: $TIGON_MTL_DIR, next to this executable,
    /// its ompi/ subdirectory, or Open MPI's component directory).
    #[arg(long)]
    pub mtl_dir: Option<PathBuf>,
    /// The agent's JSON configuration (default: /etc/tigon/agent.json when it exists).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print the findings as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// One finding: what was checked, how it went, and the commands that fix it.
#[derive(Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Level,
    pub summary: String,
    /// Commands to run, in order (comments start with `#`).
    pub fix: Vec<String>,
}

impl Check {
    fn ok(name: &'static str, summary: impl Into<String>) -> Check {
        Check {
            name,
            status: Level::Ok,
            summary: summary.into(),
            fix: Vec::new(),
        }
    }
    fn warn(name: &'static str, summary: impl Into<String>, fix: &[String]) -> Check {
        Check {
            name,
            status: Level::Warn,
            summary: summary.into(),
            fix: fix.to_vec(),
        }
    }
    fn fail(name: &'static str, summary: impl Into<String>, fix: &[String]) -> Check {
        Check {
            name,
            status: Level::Fail,
            summary: summary.into(),
            fix: fix.to_vec(),
        }
    }
}

/// What the doctor examines: the command line filled in from the agent's configuration.
struct Target {
    socket: PathBuf,
    port: Option<String>,
    dma: Option<String>,
    no_huge: bool,
}

pub fn run(a: DoctorArgs) -> Result<(), String> {
    let checks = diagnose(&a);
    let fails: Vec<&str> = checks
        .iter()
        .filter(|c| c.status == Level::Fail)
        .map(|c| c.name)
        .collect();
    let warns = checks.iter().filter(|c| c.status == Level::Warn).count();
    if a.json {
        let v = serde_json::json!({ "ok": fails.is_empty(), "checks": checks });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print!("{}", render(&checks));
        println!(
            "{}",
            if fails.is_empty() {
                format!("this node can run tigon ({warns} warning(s))")
            } else {
                format!(
                    "this node cannot run tigon: {} problem(s), {warns} warning(s)",
                    fails.len()
                )
            }
        );
    }
    if fails.is_empty() {
        Ok(())
    } else {
        Err(format!("doctor: problems with {}", fails.join(", ")))
    }
}

/// The report as text: one line per check, its fix indented below it.
pub fn render(checks: &[Check]) -> String {
    let mut s = String::new();
    for c in checks {
        let tag = match c.status {
            Level::Ok => "ok  ",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        };
        s.push_str(&format!("{tag}  {:<10} {}\n", c.name, c.summary));
        for (i, f) in c.fix.iter().enumerate() {
            let lead = if i == 0 { "fix:" } else { "    " };
            s.push_str(&format!("            {lead} {f}\n"));
        }
    }
    s
}

/// Runs every check.
pub fn diagnose(a: &DoctorArgs) -> Vec<Check> {
    let mut checks = Vec::new();
    let (t, config_check) = target(a);
    if let Some(c) = config_check {
        checks.push(c);
    }
    checks.push(hugepages::hugepages(
        &a.huge_dir,
        t.no_huge,
        t.port.as_deref(),
    ));
    let agent = agent::agent(&t.socket, t.port.as_deref());
    let agent_up = agent.status != Level::Fail;
    checks.push(pci::port(t.port.as_deref(), agent_up));
    checks.push(pci::iommu(t.port.as_deref()));
    checks.push(pci::dmadev(t.dma.as_deref()));
    checks.push(software::dpdk());
    checks.push(software::openmpi());
    checks.push(software::mtl(a.mtl_dir.as_deref()));
    checks.push(agent);
    checks
}

fn target(a: &DoctorArgs) -> (Target, Option<Check>) {
    let env_no_huge = std::env::var_os(tigon_pmd::NO_HUGE_ENV).is_some_and(|v| v == "1");
    let path = a.config.clone().or_else(|| {
        Path::new(DEFAULT_CONFIG)
            .exists()
            .then(|| PathBuf::from(DEFAULT_CONFIG))
    });
    // A configuration the agent would refuse, with the agent's own words.
    let refused = |p: &Path, e: &str| {
        Check::fail(
            "config",
            format!("{}: {e}", p.display()),
            &cmds![
                format!("${{EDITOR:-vi}} {}", p.display()),
                "tigon agent --help   # the options, their ranges and defaults",
            ],
        )
    };
    let mut cfg = AgentArgs::default();
    let mut check = None;
    if let Some(p) = &path {
        match crate::agent::read_config(p) {
            // The agent's own check of its settings (`tigon agent --config FILE`): a config
            // the agent would refuse is not "ok" here.
            // Several nodes in one agent (an emulation): the agent's check of every node.
            Ok(c) if c.nodes.is_some() => {
                check = Some(match crate::agent::describe_nodes(&c) {
                    Ok(d) => Check::ok(
                        "config",
                        format!("{} parsed; the agent accepts it ({d})", p.display()),
                    ),
                    Err(e) => refused(p, &e),
                });
                cfg = c;
            }
            Ok(c) => {
                check = Some(match c.settings() {
                    Ok(s) => Check::ok(
                        "config",
                        format!(
                            "{} parsed; the agent accepts it (port {}, lcore {}, mtu {}, wire {})",
                            p.display(),
                            s.devargs,
                            s.lcore,
                            s.mtu,
                            match &s.udp {
                                Some(u) => format!(
                                    "udp {}/{} port {}{}",
                                    u.ip,
                                    u.prefix,
                                    u.port,
                                    u.gateway.map(|g| format!(" via {g}")).unwrap_or_default()
                                ),
                                None => "ether".into(),
                            }
                        ),
                    ),
                    Err(e) => refused(p, &e),
                });
                cfg = c;
            }
            Err(e) => {
                check = Some(Check::fail(
                    "config",
                    // `read_config` names the file.
                    e,
                    &cmds![
                        "# the keys are `tigon agent`'s options in kebab-case, e.g. {\"port\": \"0000:3b:00.0\", \"lcore\": 1, \"mtu\": 9000}",
                        "tigon agent --help",
                        format!("${{EDITOR:-vi}} {}", p.display()),
                    ],
                ));
            }
        }
    }
    let t = Target {
        socket: a
            .socket
            .clone()
            .or(cfg.socket)
            .unwrap_or_else(tigon_client::default_socket),
        port: a.port.clone().or(cfg.port),
        dma: a.dma.clone().or(cfg.dma),
        no_huge: env_no_huge || cfg.no_huge.unwrap_or(false),
    };
    (t, check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_puts_fixes_under_their_check() {
        let c = [Check::fail("agent", "no agent", &cmds!["a", "b"])];
        let t = render(&c);
        assert!(t.contains("FAIL  agent      no agent\n"), "{t}");
        assert!(t.contains("fix: a\n"), "{t}");
        assert!(t.contains("     b\n"), "{t}");
    }
}
