//! The agent under systemd: the unit is `Type=notify`, and the agent sends `READY=1` to the
//! socket in `$NOTIFY_SOCKET` once it serves (so `systemctl start` returns when `tigon
//! doctor` can succeed), and `STOPPING=1` when told to stop. The service manager is played
//! here by a datagram socket of the test's own, at a path and in the abstract namespace.
//!
//! The agent pins lcore 0: nextest runs this binary in the `dpdk-pinned` group.

mod common;

use common::{TIGON, TestDir};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `tigon agent` on a memif server port, told to notify `notify_socket`.
fn agent(dir: &TestDir, notify_socket: &str) -> (Child, std::path::PathBuf) {
    let socket = dir.join("a.sock");
    let port = format!(
        "net_memif0,role=server,socket={}",
        dir.join("m.sock").display()
    );
    let child = Command::new(TIGON)
        .args(["agent", "--port", &port, "--lcore", "0", "--idle", "yield"])
        .arg("--socket")
        .arg(&socket)
        .env("NOTIFY_SOCKET", notify_socket)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("agent.log")).expect("log"))
        .stderr(std::fs::File::create(dir.join("agent.err")).expect("log"))
        .spawn()
        .expect("spawning tigon agent");
    (child, socket)
}

/// The next datagram, within `timeout`.
fn receive(sock: &UnixDatagram, timeout: Duration, dir: &TestDir) -> String {
    sock.set_read_timeout(Some(timeout)).expect("timeout");
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).unwrap_or_else(|e| {
        panic!(
            "no notification within {timeout:?} ({e}); agent log:\n{}",
            std::fs::read_to_string(dir.join("agent.err")).unwrap_or_default()
        )
    });
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// READY=1 when it serves (its socket answers at that moment), STOPPING=1 on SIGTERM.
fn ready_then_stopping(sock: &UnixDatagram, addr: &str, dir: &TestDir) {
    let (mut child, socket) = agent(dir, addr);
    let msg = receive(sock, Duration::from_secs(60), dir);
    // Serving already: no waiting, no retry.
    let stats = tigon_client::agent_stats(&socket);
    assert!(
        msg.lines().any(|l| l == "READY=1") && msg.contains("STATUS=serving"),
        "{addr}: {msg:?}"
    );
    assert!(
        stats.is_ok(),
        "{addr}: READY=1 came before the agent answered on {}: {stats:?}",
        socket.display()
    );
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(st.success());
    let msg = receive(sock, Duration::from_secs(30), dir);
    assert!(msg.lines().any(|l| l == "STOPPING=1"), "{addr}: {msg:?}");
    let st = child.wait().expect("wait");
    assert!(st.success(), "{addr}: the agent exited {st}");
    assert!(!Path::new(&socket).exists(), "{addr}: socket left");
}

#[test]
fn agent_tells_systemd_when_it_serves() {
    let dir = TestDir::new("sd-notify");
    // A path, as systemd usually passes it.
    let path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&path).expect("bind");
    ready_then_stopping(&sock, path.to_str().unwrap(), &dir);
    // The abstract namespace (`@name`), as systemd also may.
    use std::os::linux::net::SocketAddrExt;
    let name = format!("tigon-sd-notify-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("name");
    let sock = UnixDatagram::bind_addr(&addr).expect("bind abstract");
    ready_then_stopping(&sock, &format!("@{name}"), &dir);
}

#[test]
fn the_unit_waits_for_the_agent() {
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docker/tigon-agent.service"),
    )
    .expect("the unit");
    let directives: Vec<&str> = unit.lines().map(str::trim).collect();
    for d in ["Type=notify", "NotifyAccess=main"] {
        assert!(directives.contains(&d), "the unit lacks {d}:\n{unit}");
    }
}
