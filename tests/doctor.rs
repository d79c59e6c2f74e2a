//! `tigon doctor` on this machine: a healthy node (an agent running, the component in its
//! directory) passes with exit status 0; then one thing is broken on purpose per test — no
//! hugepages (`--huge-dir` at a directory that is not hugetlbfs), no agent (nothing at the
//! socket, or a socket left behind by a dead agent), the component missing (an empty
//! `--mtl-dir`, or a file Open MPI cannot load) — and the doctor must name exactly that
//! problem, print the commands that fix it, and exit non-zero. A configuration the agent
//! would refuse fails the doctor's `config` check with the agent's own words. Last, the sample
//! output in the README's cluster guide is checked against what the doctor really prints.
//!
//! Every run passes `--config` (a file written here), so an `/etc/tigon/agent.json` on the
//! machine changes nothing.

mod common;
use common::{Agent, TIGON, TestDir};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Open MPI's own component directory (Debian 12).
const OMPI_DIR: &str = "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3";

/// Every check the doctor runs, in its order (`config` only when a config is read).
const CHECKS: &[&str] = &[
    "config",
    "hugepages",
    "port",
    "iommu",
    "dmadev",
    "dpdk",
    "open-mpi",
    "mtl",
    "agent",
];

/// `target/<profile>`, where cargo put `tigon` and `libmca_mtl_tigon.so`.
fn profile_dir() -> PathBuf {
    Path::new(TIGON)
        .parent()
        .expect("tigon lives in target/<profile>")
        .to_path_buf()
}

/// The built component (`cargo nextest run --workspace` builds it; built here when only this
/// package's tests were built).
fn built_mtl() -> PathBuf {
    let so = profile_dir().join("libmca_mtl_tigon.so");
    if !so.exists() {
        let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        c.args(["build", "-j2", "-p", "tigon-ompi-mtl", "--lib"]);
        if profile_dir().file_name().is_some_and(|n| n == "release") {
            c.arg("--release");
        }
        c.env(
            "CARGO_TARGET_DIR",
            profile_dir().parent().expect("target dir"),
        );
        let st = c.status().expect("running cargo build -p tigon-ompi-mtl");
        assert!(st.success(), "cargo build -p tigon-ompi-mtl failed");
    }
    assert!(so.exists(), "{} missing", so.display());
    so
}

/// A component directory as Open MPI wants it: `mca_mtl_tigon.so` and its help file.
fn component_dir(dir: &TestDir) -> PathBuf {
    let d = dir.join("ompi");
    std::fs::create_dir_all(&d).expect("mkdir ompi");
    std::fs::copy(built_mtl(), d.join("mca_mtl_tigon.so")).expect("copying the component");
    let help = Path::new(env!("CARGO_MANIFEST_DIR")).join("ompi-mtl/help-mtl-tigon.txt");
    std::fs::copy(help, d.join("help-mtl-tigon.txt")).expect("copying the help file");
    d
}

/// One line of the report and the fix lines under it.
#[derive(Debug)]
struct Finding {
    status: String,
    name: String,
    summary: String,
    fix: Vec<String>,
}

/// A finished `tigon doctor`.
struct Report {
    ok: bool,
    stdout: String,
    stderr: String,
    findings: Vec<Finding>,
}

impl Report {
    fn get(&self, name: &str) -> &Finding {
        self.findings
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no `{name}` line in the report:\n{}", self.stdout))
    }
    fn failed(&self) -> Vec<&str> {
        self.findings
            .iter()
            .filter(|f| f.status == "FAIL")
            .map(|f| f.name.as_str())
            .collect()
    }
    /// The fix of `name` as one text (its commands, one per line).
    fn fix(&self, name: &str) -> String {
        self.get(name).fix.join("\n")
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stdout:\n{}stderr:\n{}", self.stdout, self.stderr)
    }
}

/// Parses the text report: `TAG  name  summary`, then fix lines indented by 12 spaces.
fn parse(stdout: &str) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("            ") {
            let cmd = rest
                .strip_prefix("fix: ")
                .or_else(|| rest.strip_prefix("     "))
                .unwrap_or_else(|| panic!("fix line without `fix:` or its indent: `{line}`"));
            out.last_mut()
                .unwrap_or_else(|| panic!("fix line before any check: `{line}`"))
                .fix
                .push(cmd.to_string());
            continue;
        }
        let tag = &line[..line.len().min(4)];
        let status = match tag {
            "ok  " => "ok",
            "WARN" => "WARN",
            "FAIL" => "FAIL",
            _ => continue, // the summary line
        };
        let rest = line[4..].trim_start();
        let (name, summary) = rest.split_once(' ').unwrap_or((rest, ""));
        out.push(Finding {
            status: status.into(),
            name: name.into(),
            summary: summary.trim().into(),
            fix: Vec::new(),
        });
    }
    out
}

/// `tigon doctor ARGS`, with `env` set (`None`: removed).
fn doctor(args: &[&str], env: &[(&str, Option<&str>)]) -> Report {
    let mut c = Command::new(TIGON);
    c.arg("doctor").args(args);
    for (k, v) in env {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let o = c.output().expect("running tigon doctor");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let r = Report {
        ok: o.status.success(),
        findings: parse(&stdout),
        stdout,
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    println!("$ tigon doctor {}\n{r}", args.join(" "));
    let names: Vec<&str> = r.findings.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, CHECKS, "every check, in order\n{r}");
    r
}

/// A node as the guide sets it up, on a memif port: its config (`agent.json`), the
/// component directory, and (when started) its agent.
struct Node {
    dir: TestDir,
    config: PathBuf,
    socket: PathBuf,
    port: String,
    mtl: PathBuf,
    agent: Option<Agent>,
}

impl Node {
    fn new(name: &str) -> Node {
        let dir = TestDir::new(name);
        let port = format!(
            "net_memif0,role=server,socket={}",
            dir.join("m.sock").display()
        );
        // Agent::start names the socket after the agent.
        let socket = dir.join("a.sock");
        let config = dir.join("agent.json");
        let cfg = serde_json::json!({
            "port": port, "socket": socket, "lcore": 0, "idle": "yield",
        });
        std::fs::write(&config, cfg.to_string()).expect("writing agent.json");
        let mtl = component_dir(&dir);
        Node {
            dir,
            config,
            socket,
            port,
            mtl,
            agent: None,
        }
    }

    fn start(mut self) -> Node {
        let cfg = self.config.to_str().expect("utf-8 path").to_string();
        let a = Agent::start(&self.dir, "a", &self.port, 0, None, &["--config", &cfg]);
        assert_eq!(a.socket, self.socket);
        self.agent = Some(a);
        self
    }

    /// The doctor's arguments for this node, the component directory `mtl` and `extra`.
    fn args<'a>(&'a self, mtl: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec![
            "--config",
            self.config.to_str().expect("utf-8"),
            "--mtl-dir",
            mtl.to_str().expect("utf-8"),
        ];
        v.extend_from_slice(extra);
        v
    }
}

/// Asserts that only `name` failed, that the summary line counts it, and that the doctor
/// exited non-zero naming it.
fn assert_only_failure(r: &Report, name: &str) {
    assert!(!r.ok, "the doctor must exit non-zero\n{r}");
    assert_eq!(r.failed(), [name], "only {name} fails\n{r}");
    assert!(
        r.stdout
            .contains("this node cannot run tigon: 1 problem(s)"),
        "{r}"
    );
    assert!(
        r.stderr.contains(&format!("problems with {name}")),
        "stderr names the problem\n{r}"
    );
    assert!(!r.get(name).fix.is_empty(), "{name} comes with a fix\n{r}");
}

#[test]
fn healthy_node_passes() {
    let node = Node::new("doctor-ok").start();
    let r = doctor(&node.args(&node.mtl, &[]), &[]);
    assert!(r.ok, "a healthy node passes\n{r}");
    assert!(r.failed().is_empty(), "{r}");
    for name in ["config", "port", "dpdk", "open-mpi", "mtl", "agent"] {
        assert_eq!(r.get(name).status, "ok", "{name}\n{r}");
    }
    let sock = node.socket.display().to_string();
    let agent = &r.get("agent").summary;
    assert!(
        agent.starts_with(&format!("{sock}: 0 client(s), 0 peer(s)")),
        "{r}"
    );
    // Its memif port is a server nobody connected to: said, not warned of.
    assert!(
        agent.ends_with(", 0 failed operation(s); its port's link is down (no peer connected yet)"),
        "{r}"
    );
    let mtl = &r.get("mtl").summary;
    let so = node.mtl.join("mca_mtl_tigon.so").display().to_string();
    assert!(
        mtl.starts_with(&format!(
            "{so} loads; mpirun needs --mca mca_base_component_path {}:{OMPI_DIR}",
            node.mtl.display()
        )),
        "{r}"
    );
    assert!(r.get("port").summary.contains("no binding needed"), "{r}");
    assert!(r.stdout.contains("this node can run tigon ("), "{r}");
    // Each warning (IOMMU, dmadev, hugepages on this machine) still says what to do.
    for f in r.findings.iter().filter(|f| f.status == "WARN") {
        assert!(!f.fix.is_empty(), "warning {} without a fix\n{r}", f.name);
    }

    // --json: the same findings, as data.
    let o = Command::new(TIGON)
        .arg("doctor")
        .args(node.args(&node.mtl, &["--json"]))
        .output()
        .expect("tigon doctor --json");
    assert!(o.status.success(), "{o:?}");
    let v: Value = serde_json::from_slice(&o.stdout).expect("--json prints JSON");
    assert_eq!(v["ok"], true, "{v}");
    let checks = v["checks"].as_array().expect("checks");
    assert_eq!(checks.len(), CHECKS.len(), "{v}");
    for (c, f) in checks.iter().zip(&r.findings) {
        assert_eq!(c["name"], f.name.as_str(), "{v}");
        assert_eq!(c["status"], f.status.to_lowercase(), "{v}");
        assert_eq!(c["fix"].as_array().map(Vec::len), Some(f.fix.len()), "{v}");
    }
}

#[test]
fn no_hugepages_is_named_with_its_fix() {
    let node = Node::new("doctor-huge").start();
    // A directory that is not a hugetlbfs mount: DPDK would find no hugepages there.
    let not_huge = node.dir.join("no-hugetlbfs");
    std::fs::create_dir_all(&not_huge).expect("mkdir");
    let nh = not_huge.to_str().expect("utf-8");
    // The doctor must judge the hugepages, not accept the --no-huge fallback.
    let r = doctor(
        &node.args(&node.mtl, &["--huge-dir", nh]),
        &[("TIGON_NO_HUGE", None)],
    );
    assert_only_failure(&r, "hugepages");
    let h = r.get("hugepages");
    // Where no hugepages are reserved at all, the doctor says that first.
    assert!(
        h.summary
            .starts_with(&format!("{nh} is not a hugetlbfs mount point"))
            || h.summary.starts_with("no hugepages reserved"),
        "{r}"
    );
    let fix = r.fix("hugepages");
    assert!(
        fix.contains(&format!("mkdir -p {nh} && mount -t hugetlbfs nodev {nh}")),
        "{r}"
    );
    assert!(fix.contains("TIGON_NO_HUGE=1"), "{r}");

    // Running without hugepages on purpose (TIGON_NO_HUGE=1, as scripts/setup.sh exports it
    // where hugepages cannot be had) is a warning, not a failure.
    let r = doctor(
        &node.args(&node.mtl, &["--huge-dir", nh]),
        &[("TIGON_NO_HUGE", Some("1"))],
    );
    assert!(r.ok, "{r}");
    let h = r.get("hugepages");
    assert_eq!(h.status, "WARN", "{r}");
    assert!(h.summary.contains("without hugepages"), "{r}");
    assert!(r.fix("hugepages").contains("unset TIGON_NO_HUGE"), "{r}");
}

/// An AF_XDP port's socket serves the interface's queue 0 only: on an interface with more
/// receive queues the doctor warns and says how to make it one; with one it is fine.
#[test]
fn af_xdp_port_on_an_interface_of_several_queues_is_a_warning() {
    let tag = tigon_pmd::testbed::unique_tag();
    let ns = tigon_pmd::testbed::Netns::new(&format!("tgX{tag}")).expect("netns (needs root)");
    let ip = |args: &[&str]| {
        let o = Command::new("ip")
            .args(["-n", ns.name()])
            .args(args)
            .output()
            .expect("ip");
        assert!(o.status.success(), "ip {args:?}: {o:?}");
    };
    ip(&[
        "link",
        "add",
        "xq4",
        "numrxqueues",
        "4",
        "type",
        "veth",
        "peer",
        "name",
        "xq4p",
    ]);
    ip(&["link", "add", "xq1", "type", "veth", "peer", "name", "xq1p"]);
    let port = |iface: &str| {
        let o = Command::new("ip")
            .args(["netns", "exec", ns.name(), TIGON, "doctor", "--port"])
            .arg(format!("net_af_xdp0,iface={iface}"))
            .output()
            .expect("tigon doctor");
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let f = parse(&stdout)
            .into_iter()
            .find(|f| f.name == "port")
            .unwrap_or_else(|| panic!("no port line:\n{stdout}"));
        (f, stdout)
    };
    let (f, out) = port("xq4");
    assert!(
        f.status == "WARN"
            && f.summary.contains("xq4 has 4 receive queues")
            && f.summary.contains("queue 0 only")
            && f.fix
                .iter()
                .any(|c| c.starts_with("ethtool -L xq4 combined 1")),
        "{out}"
    );
    let (f, out) = port("xq1");
    assert!(
        f.status == "ok" && f.summary.contains("no binding needed"),
        "{out}"
    );
}

#[test]
fn no_agent_is_named_with_its_fix() {
    let node = Node::new("doctor-agent"); // no agent started
    let sock = node.socket.display().to_string();
    let expect_fix = |r: &Report| {
        let fix = r.fix("agent");
        assert!(fix.contains("systemctl start tigon-agent"), "{r}");
        assert!(fix.contains("journalctl -u tigon-agent"), "{r}");
        assert!(
            fix.contains(&format!(
                "# or by hand: tigon agent --port {} --socket {sock}",
                node.port
            )),
            "{r}"
        );
    };
    let r = doctor(&node.args(&node.mtl, &[]), &[]);
    assert_only_failure(&r, "agent");
    assert_eq!(
        r.get("agent").summary,
        format!("no agent: nothing at {sock}"),
        "{r}"
    );
    expect_fix(&r);

    // A socket file with nothing listening (what an agent killed by SIGKILL leaves).
    drop(std::os::unix::net::UnixListener::bind(&node.socket).expect("bind"));
    assert!(node.socket.exists());
    let r = doctor(&node.args(&node.mtl, &[]), &[]);
    assert_only_failure(&r, "agent");
    assert_eq!(
        r.get("agent").summary,
        format!("no agent: {sock} is left over from an agent that is gone (connection refused)"),
        "{r}"
    );
    expect_fix(&r);
}

#[test]
fn missing_component_is_named_with_its_fix() {
    let node = Node::new("doctor-mtl").start();
    let empty = node.dir.join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let e = empty.display().to_string();
    let r = doctor(&node.args(&empty, &[]), &[]);
    assert_only_failure(&r, "mtl");
    assert_eq!(
        r.get("mtl").summary,
        format!("mca_mtl_tigon.so not found (looked in {e})"),
        "{r}"
    );
    let fix = r.fix("mtl");
    // This tigon is a cargo build: the component it names is the one built next to it.
    assert!(
        fix.contains(&format!(
            "install -m 0644 {} {e}/mca_mtl_tigon.so",
            built_mtl().display()
        )),
        "{r}"
    );
    assert!(
        fix.contains(&format!("install -m 0644 ompi-mtl/help-mtl-tigon.txt {e}/")),
        "{r}"
    );
    assert!(fix.contains("make release && scripts/install.sh"), "{r}");

    // A file of that name that Open MPI cannot load.
    std::fs::write(empty.join("mca_mtl_tigon.so"), b"not a shared object").expect("write");
    let r = doctor(&node.args(&empty, &[]), &[]);
    assert_only_failure(&r, "mtl");
    assert!(
        r.get("mtl").summary.starts_with(&format!(
            "{e}/mca_mtl_tigon.so present, but Open MPI does not load it"
        )),
        "{r}"
    );
    assert!(
        r.fix("mtl")
            .contains("ompi_info --param mtl tigon   # says why"),
        "{r}"
    );
}

/// The doctor checks a configuration with the agent's own check: what `tigon agent --config`
/// refuses, the doctor does not call "ok" (it used to: it only parsed the JSON), and it says
/// the same thing.
#[test]
fn config_the_agent_refuses_fails_the_check() {
    let node = Node::new("doctor-badcfg");
    for (key, value, says) in [
        ("lcore", serde_json::json!(99), "--lcore 99"),
        ("mtu", serde_json::json!(1400), "--mtu 1400"),
        (
            "peer-timeout-ms",
            serde_json::json!(0),
            "--peer-timeout-ms 0",
        ),
        ("wire", serde_json::json!("udp"), "--wire udp needs --ip"),
    ] {
        let mut cfg: Value =
            serde_json::from_str(&std::fs::read_to_string(&node.config).expect("read config"))
                .expect("json");
        cfg[key] = value;
        let bad = node.dir.join(&format!("bad-{key}.json"));
        std::fs::write(&bad, cfg.to_string()).expect("write config");
        let bad = bad.to_str().expect("utf-8");
        let r = doctor(
            &["--config", bad, "--mtl-dir", node.mtl.to_str().unwrap()],
            &[],
        );
        let c = r.get("config");
        assert!(
            !r.ok && c.status == "FAIL" && c.summary.contains(says) && !c.fix.is_empty(),
            "{key}: {r}"
        );
        let o = Command::new(TIGON)
            .args(["agent", "--config", bad])
            .output()
            .expect("tigon agent");
        let err = String::from_utf8_lossy(&o.stderr);
        let agent_says = err.trim().trim_start_matches("tigon: ");
        assert!(
            !o.status.success() && c.summary.ends_with(agent_says),
            "{key}: the agent says `{agent_says}`, the doctor `{}`",
            c.summary
        );
    }
    // The node's own configuration is accepted, and the doctor says by what.
    let r = doctor(&node.args(&node.mtl, &[]), &[]);
    let c = r.get("config");
    assert!(
        c.status == "ok"
            && c.summary.contains("the agent accepts it")
            && c.summary.contains("wire ether"),
        "{r}"
    );
    // And a --wire udp configuration, with what the agent will be on the IP network.
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&node.config).expect("read config"))
            .expect("json");
    cfg["wire"] = "udp".into();
    cfg["ip"] = "10.1.3.21/24".into();
    cfg["gateway"] = "10.1.3.1".into();
    let udp = node.dir.join("udp.json");
    std::fs::write(&udp, cfg.to_string()).expect("write config");
    let r = doctor(
        &[
            "--config",
            udp.to_str().unwrap(),
            "--mtl-dir",
            node.mtl.to_str().unwrap(),
        ],
        &[],
    );
    let c = r.get("config");
    assert!(
        c.status == "ok"
            && c.summary
                .contains("wire udp 10.1.3.21/24 port 7470 via 10.1.3.1"),
        "{r}"
    );
    // Several nodes in one agent: the agent's check of each node, for better or worse.
    let dir = node.dir.path.display();
    let two = |second: Value| {
        serde_json::json!({ "lcore": 0, "nodes": [
            { "port": "net_memif0,role=server,socket=/tmp/doctor-m.sock", "socket": format!("{dir}/a.sock") },
            second,
        ]})
    };
    for (cfg, status, says) in [
        (
            two(
                serde_json::json!({ "port": "net_memif1,role=client,socket=/tmp/doctor-m.sock", "socket": format!("{dir}/b.sock") }),
            ),
            "ok",
            "2 nodes in one poll loop on lcore 0",
        ),
        (
            two(serde_json::json!({ "port": "net_memif1", "socket": format!("{dir}/a.sock") })),
            "FAIL",
            "nodes 0 and 1 both serve",
        ),
    ] {
        let f = node.dir.join("nodes.json");
        std::fs::write(&f, cfg.to_string()).expect("write config");
        let r = doctor(
            &[
                "--config",
                f.to_str().unwrap(),
                "--mtl-dir",
                node.mtl.to_str().unwrap(),
            ],
            &[],
        );
        let c = r.get("config");
        assert!(c.status == status && c.summary.contains(says), "{r}");
    }
}

/// The README's sample report (the unlabelled block after "with the agent stopped") names
/// real checks, counts its problems right, and shows the agent's failure and fix exactly as
/// the doctor prints them for the example configuration (docker/agent.json).
#[test]
fn readme_sample_output_is_the_doctors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let guide = &readme[readme.find("## Cluster guide").expect("the cluster guide")..];
    let at = guide
        .find("with the agent stopped:\n\n```\n")
        .expect("the sample report");
    let sample = &guide[at..];
    let sample = &sample[sample.find("```\n").expect("fence") + 4..];
    let sample = &sample[..sample.find("```").expect("closing fence")];
    let findings = parse(sample);
    let names: Vec<&str> = findings.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, CHECKS, "the sample shows every check, in order");
    let fails = findings.iter().filter(|f| f.status == "FAIL").count();
    let warns = findings.iter().filter(|f| f.status == "WARN").count();
    assert!(
        sample.ends_with(&format!(
            "this node cannot run tigon: {fails} problem(s), {warns} warning(s)\n"
        )),
        "the sample's summary line counts its own lines:\n{sample}"
    );

    // The example configuration, its agent stopped: the socket is moved to a directory of
    // ours (nothing there) and renamed back in the output.
    let dir = TestDir::new("doctor-sample");
    let sock = dir.join("agent.sock");
    let example = root.join("docker/agent.json");
    let r = doctor(
        &[
            "--config",
            example.to_str().expect("utf-8"),
            "--socket",
            sock.to_str().expect("utf-8"),
            "--mtl-dir",
            component_dir(&dir).to_str().expect("utf-8"),
        ],
        &[],
    );
    assert!(!r.ok, "{r}");
    let real = r
        .stdout
        .replace(sock.to_str().expect("utf-8"), "/run/tigon/agent.sock");
    let block: Vec<&str> = sample
        .lines()
        .skip_while(|l| !l.starts_with("FAIL  agent"))
        .take_while(|l| l.starts_with("FAIL  agent") || l.starts_with("     "))
        .collect();
    assert!(!block.is_empty(), "the sample shows the agent's failure");
    assert!(
        format!("\n{real}").contains(&format!("\n{}\n", block.join("\n"))),
        "the sample's agent lines:\n{}\nthe doctor's report:\n{real}",
        block.join("\n")
    );
}
