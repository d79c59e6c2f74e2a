//! `tigon agent`'s options (command line, or a JSON file), and the settings checked from them.

use clap::Args;
use serde::Deserialize;
use std::path::PathBuf;
use tigon_engine::Config;
use tigon_engine::channel::Geometry;

#[derive(Args, Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct AgentArgs {
    /// The NIC: a PCI address, or a vdev such as `net_memif0,role=server,socket=/run/x.sock`,
    /// `net_af_packet0,iface=eth1`, `net_af_xdp0,iface=eth1`.
    #[arg(long)]
    pub port: Option<String>,
    /// The lcore (CPU) the engine's poll loop owns.
    #[arg(long)]
    pub lcore: Option<u32>,
    /// Control socket clients attach to.
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// MTU of the port: 1500 or 9000.
    #[arg(long)]
    pub mtu: Option<u16>,
    /// A dmadev for copy offload, e.g. `dma_skeleton0` (ioat / idxd PCI addresses on real nodes).
    #[arg(long)]
    pub dma: Option<String>,
    /// Received payloads at least this long go through the dmadev (default from `tigon bench dma`).
    #[arg(long)]
    pub dma_threshold: Option<usize>,
    /// When there is no work: `spin` (busy-poll, for a dedicated core) or `yield` (shared machines).
    #[arg(long)]
    pub idle: Option<String>,
    /// Uids allowed to attach (comma-separated); default: the agent's own uid.
    #[arg(long, value_delimiter = ',')]
    pub allow_uid: Option<Vec<u32>>,
    /// Messages longer than this go by rendezvous (bytes).
    #[arg(long)]
    pub rndv_threshold: Option<usize>,
    /// An unreachable peer fails operations after this long (milliseconds).
    #[arg(long)]
    pub peer_timeout_ms: Option<u64>,
    /// With `--idle yield`: keep polling this long after the last work before sleeping
    /// (microseconds; default 0: the polling is charged to the ranks sharing the core).
    #[arg(long)]
    pub idle_spin_us: Option<u64>,
    /// With `--idle yield`, on a link that cannot wake a sleeping engine (memif): the longest
    /// sleep while operations are in flight or within a second of the last work
    /// (microseconds). af_packet and client requests wake it at once.
    #[arg(long)]
    pub idle_poll_us: Option<u64>,
    /// CPU-latency QoS request held while the agent runs, in microseconds, or `off`
    /// (/dev/cpu_dma_latency; `0` keeps idle cores polling so wake-ups take microseconds).
    /// Default: 0 with `--idle yield`, off with `spin`.
    #[arg(long)]
    pub cpu_latency: Option<String>,
    /// Nice value of the engine thread with `--idle yield` (default -10: the engine makes
    /// progress for every rank sharing its core).
    #[arg(long, allow_hyphen_values = true)]
    pub nice: Option<i32>,
    /// Run DPDK without hugepages (also when TIGON_NO_HUGE=1).
    #[arg(long)]
    pub no_huge: Option<bool>,
    /// Extra EAL arguments, passed through.
    #[arg(long, allow_hyphen_values = true)]
    pub eal: Option<Vec<String>>,
    /// A JSON file with any of these options (command-line options win).
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
}

impl AgentArgs {
    /// Fills what the command line left out from the `--config` file.
    pub fn merge(mut self) -> Result<AgentArgs, String> {
        let Some(path) = self.config.clone() else {
            return Ok(self);
        };
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let f: AgentArgs =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        macro_rules! fill {
            ($($f:ident),*) => { $( if self.$f.is_none() { self.$f = f.$f; } )* };
        }
        fill!(
            port,
            lcore,
            socket,
            mtu,
            dma,
            dma_threshold,
            idle,
            allow_uid,
            rndv_threshold,
            peer_timeout_ms,
            idle_spin_us,
            idle_poll_us,
            cpu_latency,
            nice,
            no_huge,
            eal
        );
        Ok(self)
    }
}

/// The agent's settings, checked, with their defaults.
pub struct Settings {
    /// The port's devargs.
    pub devargs: String,
    pub socket: PathBuf,
    pub mtu: u16,
    /// `--idle spin` (else `yield`).
    pub spin: bool,
    pub allow_uids: Vec<u32>,
    pub no_huge: bool,
    pub engine: Config,
    /// Of every client's channel.
    pub geometry: Geometry,
}

impl Settings {
    /// The longest frame: the MTU plus the Ethernet header.
    pub fn max_frame(&self) -> usize {
        self.mtu as usize + 14
    }
}

impl AgentArgs {
    /// The settings these options make, or what is wrong with them.
    pub fn settings(&self) -> Result<Settings, String> {
        let a = self;
        let devargs = a
            .port
            .clone()
            .ok_or("--port is required (a PCI address or a vdev's devargs)")?;
        let socket = a
            .socket
            .clone()
            .unwrap_or_else(tigon_client::default_socket);
        let mtu = a.mtu.unwrap_or(1500);
        if mtu != 1500 && mtu != 9000 {
            return Err(format!("--mtu {mtu}: use 1500 or 9000"));
        }
        let spin = match a.idle.as_deref().unwrap_or("spin") {
            "spin" => true,
            "yield" => false,
            o => return Err(format!("--idle {o}: use spin or yield")),
        };
        let allow = a.allow_uid.clone().unwrap_or_else(|| {
            vec![
                std::fs::metadata("/proc/self")
                    .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
                    .unwrap_or(0),
            ]
        });
        let no_huge = a.no_huge.unwrap_or(false)
            || std::env::var_os(tigon_pmd::NO_HUGE_ENV).is_some_and(|v| v == "1");
        let mut cfg = Config {
            max_frame: mtu as usize + 14,
            ..Config::default()
        };
        if let Some(t) = a.rndv_threshold {
            cfg.rndv_threshold = t;
        }
        if !spin {
            // Sharing cores means being descheduled for a tick now and then: do not mistake
            // that for loss.
            cfg.rto_min_ns = cfg.rto_min_ns.max(1_000_000);
        }
        if let Some(ms) = a.peer_timeout_ms {
            cfg.peer_timeout_ns = ms * 1_000_000;
        }
        cfg.validate()?;
        let geometry = Geometry {
            n_desc: 4096,
            n_data: 256,
            data_size: cfg.rndv_threshold.max(16 * 1024) as u32,
        };
        Ok(Settings {
            devargs,
            socket,
            mtu,
            spin,
            allow_uids: allow,
            no_huge,
            engine: cfg,
            geometry,
        })
    }
}
