//! What to run: the transports, the message sizes, the program's arguments.

use serde::Serialize;

/// Message sizes of LogP and bandwidth when `--sizes` is not given (the program's own lists).
pub const QUICK_SIZES: [usize; 7] = [0, 64, 1024, 16384, 65536, 1 << 20, 4 << 20];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// pml cm + mtl tigon over two agents.
    Tigon,
    /// pml ob1 + btl tcp,self over loopback.
    Tcp,
    /// pml ob1 + btl vader,self: shared memory on one host, the bound.
    Vader,
}

impl Transport {
    pub const ALL: [Transport; 3] = [Transport::Tigon, Transport::Tcp, Transport::Vader];

    pub fn label(self) -> &'static str {
        match self {
            Transport::Tigon => "tigon",
            Transport::Tcp => "ob1/tcp",
            Transport::Vader => "ob1/vader",
        }
    }

    pub fn parse(s: &str) -> Result<Transport, String> {
        match s.trim() {
            "tigon" => Ok(Transport::Tigon),
            "tcp" | "ob1/tcp" => Ok(Transport::Tcp),
            "vader" | "ob1/vader" | "sm" => Ok(Transport::Vader),
            o => Err(format!("unknown transport {o:?} (use tigon, tcp, vader)")),
        }
    }
}

/// `--only tigon,tcp`: the transports in the fixed order tigon, tcp, vader.
pub fn parse_only(s: &str) -> Result<Vec<Transport>, String> {
    let want = s
        .split(',')
        .filter(|x| !x.trim().is_empty())
        .map(Transport::parse)
        .collect::<Result<Vec<_>, _>>()?;
    if want.is_empty() {
        return Err("--only: name at least one of tigon, tcp, vader".into());
    }
    Ok(Transport::ALL
        .into_iter()
        .filter(|t| want.contains(t))
        .collect())
}

/// `--sizes 0,64,1K,4M`: bytes, with K (KiB) and M (MiB) suffixes; sorted, deduplicated.
pub fn parse_sizes(s: &str) -> Result<Vec<usize>, String> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (num, mul) = match part.as_bytes()[part.len() - 1] {
            b'k' | b'K' => (&part[..part.len() - 1], 1usize << 10),
            b'm' | b'M' => (&part[..part.len() - 1], 1 << 20),
            _ => (part, 1),
        };
        let n: usize = num
            .parse()
            .map_err(|_| format!("--sizes: {part:?} is not a size (e.g. 0,64,1K,4M)"))?;
        let b = n
            .checked_mul(mul)
            .filter(|b| *b <= 64 << 20)
            .ok_or(format!("--sizes: {part} is above 64 MiB"))?;
        v.push(b);
    }
    if v.is_empty() {
        return Err("--sizes: no sizes".into());
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

#[derive(Debug, Clone)]
pub struct Opts {
    pub quick: bool,
    pub sizes: Option<Vec<usize>>,
    /// Subset of logp,bw,avail,dbuf,emp (all when None).
    pub tests: Option<String>,
    /// Wall time per measurement (ms); the program's default when None.
    pub budget_ms: Option<u64>,
}

/// The program's arguments for `o`.
pub fn program_args(o: &Opts) -> Vec<String> {
    let mut a = Vec::new();
    if o.quick {
        a.push("--quick".to_string());
    }
    if let Some(s) = &o.sizes {
        a.push("--sizes".into());
        a.push(s.iter().map(usize::to_string).collect::<Vec<_>>().join(","));
    }
    if let Some(t) = &o.tests {
        a.push("--tests".into());
        a.push(t.clone());
    }
    if let Some(b) = o.budget_ms {
        a.push("--budget-ms".into());
        a.push(b.to_string());
    }
    a
}

impl Transport {
    /// The name in table headings.
    pub fn label_short(self) -> &'static str {
        match self {
            Transport::Tigon => "tigon",
            Transport::Tcp => "tcp",
            Transport::Vader => "vader",
        }
    }
}

/// `b` bytes as people write them: 4 MiB, 64 KiB, 100 B.
pub fn human_size(b: usize) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_transports_parse() {
        assert_eq!(
            parse_sizes("4M,0,64,1K,64").unwrap(),
            vec![0, 64, 1024, 4 << 20]
        );
        assert!(parse_sizes("12x").is_err());
        assert!(parse_sizes("128M").is_err());
        assert_eq!(
            parse_only("vader,tigon").unwrap(),
            vec![Transport::Tigon, Transport::Vader]
        );
        assert!(parse_only("ib").is_err());
    }
}
