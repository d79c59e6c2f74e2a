//! Copy offload through a DPDK dmadev (`dma_skeleton` here; IOAT / DSA on real nodes).
//!
//! One MEM_TO_MEM virtual channel. Each enqueued copy gets a ring index (u16, wrapping);
//! completions come back in order as "the last completed index and how many". The safe
//! copy methods keep their source and destination alive until the copy completes.

use std::collections::VecDeque;
use std::ffi::{CStr, CString};
use std::sync::Arc;

use tigon_dpdk_sys as sys;

use crate::eal::Eal;
use crate::error::{Error, Result, strerror};
use crate::extmem::ExtMem;
use crate::mbuf::Mbuf;

/// dmadev counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DmaStats {
    /// Operations submitted to the hardware.
    pub submitted: u64,
    /// Operations completed.
    pub completed: u64,
    /// Operations that failed.
    pub errors: u64,
}

/// Result of a completion poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completed {
    /// Number of operations completed successfully by this poll.
    pub count: u16,
    /// Ring index of the last of them (meaningless when `count` is 0).
    pub last_idx: u16,
    /// An operation failed: call `DmaDev::completed_status` to learn which and why.
    pub has_error: bool,
}

/// Status of one completed operation (`rte_dma_status_code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaStatus(pub u32);

impl DmaStatus {
    /// The copy succeeded.
    pub fn is_success(self) -> bool {
        self.0 == sys::RTE_DMA_STATUS_SUCCESSFUL
    }
}

impl std::fmt::Display for DmaStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self.0 {
            sys::RTE_DMA_STATUS_SUCCESSFUL => "successful",
            sys::RTE_DMA_STATUS_USER_ABORT => "aborted",
            sys::RTE_DMA_STATUS_NOT_ATTEMPTED => "not attempted",
            sys::RTE_DMA_STATUS_INVALID_SRC_ADDR => "invalid source address",
            sys::RTE_DMA_STATUS_INVALID_DST_ADDR => "invalid destination address",
            sys::RTE_DMA_STATUS_INVALID_ADDR => "invalid address",
            sys::RTE_DMA_STATUS_INVALID_LENGTH => "invalid length",
            sys::RTE_DMA_STATUS_BUS_ERROR
            | sys::RTE_DMA_STATUS_BUS_READ_ERROR
            | sys::RTE_DMA_STATUS_BUS_WRITE_ERROR => "bus error",
            sys::RTE_DMA_STATUS_PAGE_FAULT => "page fault",
            _ => return write!(f, "status {}", self.0),
        };
        f.write_str(s)
    }
}

/// What an in-flight copy keeps alive until it completes (held only for its Drop).
#[allow(dead_code)]
enum Keep {
    Mem(Arc<ExtMem>, Arc<ExtMem>),
    Mbuf(Mbuf, Arc<ExtMem>),
    Nothing,
}

/// A started dmadev with one MEM_TO_MEM virtual channel.
pub struct DmaDev {
    id: i16,
    name: String,
    nb_desc: u16,
    /// One entry per enqueued, not yet completed operation, oldest first.
    inflight: VecDeque<Keep>,
    _eal: Eal,
}

// SAFETY: a dmadev channel may be driven from any thread, one at a time (&mut self).
unsafe impl Send for DmaDev {}

impl std::fmt::Debug for DmaDev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaDev")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish()
    }
}

const VCHAN: u16 = 0;

fn dev_by_name(name: &str) -> Option<i16> {
    let c = CString::new(name).ok()?;
    // SAFETY: valid C string.
    let id = unsafe { sys::rte_dma_get_dev_id_by_name(c.as_ptr()) };
    i16::try_from(id).ok().filter(|&i| i >= 0)
}

impl DmaDev {
    /// Opens the dmadev named by `devargs` (`dma_skeleton`, `dma_skeleton,lcore=1`, or the
    /// name of a probed IOAT/DSA device), creating the vdev if needed, with one MEM_TO_MEM
    /// channel of `nb_desc` descriptors (clamped to the device's range).
    pub fn open(eal: &Eal, devargs: &str, nb_desc: u16) -> Result<DmaDev> {
        let mut parts = devargs.splitn(2, ',');
        let name = parts.next().unwrap_or("").trim().to_string();
        let args = parts.next().unwrap_or("");
        if name.is_empty() {
            return Err(Error::DmaNotFound {
                name: devargs.into(),
                reason: "empty device name".into(),
            });
        }
        let id = match dev_by_name(&name) {
            Some(id) => id,
            None => {
                let (cn, ca) = (CString::new(name.as_str()), CString::new(args));
                let (Ok(cn), Ok(ca)) = (cn, ca) else {
                    return Err(Error::InvalidArgument(format!(
                        "dmadev `{devargs}` contains a NUL byte"
                    )));
                };
                // SAFETY: valid C strings; EAL initialised.
                let ret = unsafe { sys::rte_vdev_init(cn.as_ptr(), ca.as_ptr()) };
                if ret != 0 {
                    return Err(Error::DmaNotFound {
                        name: devargs.into(),
                        reason: format!("creating the vdev failed: {}", strerror(-ret)),
                    });
                }
                dev_by_name(&name).ok_or_else(|| Error::DmaNotFound {
                    name: devargs.into(),
                    reason: "the vdev was created but registered no dmadev of that name".into(),
                })?
            }
        };
        let mut dev = DmaDev {
            id,
            name,
            nb_desc: 0,
            inflight: VecDeque::new(),
            _eal: eal.clone(),
        };
        dev.setup(eal, nb_desc)?;
        Ok(dev)
    }

    fn setup(&mut self, eal: &Eal, nb_desc: u16) -> Result<()> {
        let mut info = sys::rte_dma_info::default();
        // SAFETY: valid device id, valid out pointer.
        let ret = unsafe { sys::rte_dma_info_get(self.id, &mut info) };
        if ret != 0 {
            return Err(Error::dpdk(format!("dmadev {}: info", self.name), ret));
        }
        if info.dev_capa & sys::TIGON_DMA_CAPA_MEM_TO_MEM == 0 {
            return Err(Error::InvalidArgument(format!(
                "dmadev {} cannot copy memory to memory",
                self.name
            )));
        }
        if eal.iova_mode() == crate::eal::IovaMode::Pa
            && info.dev_capa & sys::TIGON_DMA_CAPA_SVA == 0
            && self.name.starts_with("dma_skeleton")
        {
            return Err(Error::InvalidArgument(format!(
                "dmadev {} copies by virtual address: start the EAL with --iova-mode=va",
                self.name
            )));
        }
        let conf = sys::rte_dma_conf {
            nb_vchans: 1,
            enable_silent: false,
        };
        // SAFETY: valid device id and config.
        let ret = unsafe { sys::rte_dma_configure(self.id, &conf) };
        if ret != 0 {
            return Err(Error::dpdk(format!("dmadev {}: configure", self.name), ret));
        }
        let nb = nb_desc.clamp(info.min_desc.max(1), info.max_desc.max(1));
        let vconf = sys::rte_dma_vchan_conf {
            direction: sys::RTE_DMA_DIR_MEM_TO_MEM,
            nb_desc: nb,
            ..Default::default()
        };
        // SAFETY: configured device, valid vchan config.
        let ret = unsafe { sys::rte_dma_vchan_setup(self.id, VCHAN, &vconf) };
        if ret != 0 {
            return Err(Error::dpdk(
                format!("dmadev {}: channel setup ({nb} descriptors)", self.name),
                ret,
            ));
        }
        // SAFETY: configured device.
        let ret = unsafe { sys::rte_dma_start(self.id) };
        if ret != 0 {
            return Err(Error::dpdk(format!("dmadev {}: start", self.name), ret));
        }
        self.nb_desc = nb;
        Ok(())
    }

    /// DPDK's device id.
    pub fn id(&self) -> i16 {
        self.id
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Descriptors in the channel's ring.
    pub fn nb_desc(&self) -> u16 {
        self.nb_desc
    }

    /// Operations enqueued and not yet reported complete.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// How many more operations the ring accepts now.
    pub fn burst_capacity(&self) -> u16 {
        // SAFETY: started device, valid vchan.
        unsafe { sys::tigon_dma_burst_capacity(self.id, VCHAN) }
    }

    /// Enqueues a copy of `len` bytes between raw IO addresses; returns its ring index.
    ///
    /// # Safety
    /// Both ranges must be valid device-reachable memory that stays allocated, and that
    /// nothing else writes (destination: nothing else reads or writes), until this operation
    /// is reported complete.
    pub unsafe fn copy_raw(&mut self, src: u64, dst: u64, len: u32, submit: bool) -> Result<u16> {
        // SAFETY: forwarded to the caller's contract.
        unsafe { self.enqueue(src, dst, len, submit, Keep::Nothing) }
    }

    /// Safety: as `copy_raw`, with `keep` owning what must stay alive.
    unsafe fn enqueue(
        &mut self,
        src: u64,
        dst: u64,
        len: u32,
        submit: bool,
        keep: Keep,
    ) -> Result<u16> {
        let flags = if submit {
            sys::TIGON_DMA_OP_FLAG_SUBMIT
        } else {
            0
        };
        // SAFETY: started device; address validity is the caller's contract.
        let ret = unsafe { sys::tigon_dma_copy(self.id, VCHAN, src, dst, len, flags) };
        if ret < 0 {
            return Err(Error::dpdk(
                format!("dmadev {}: enqueue copy of {len} B", self.name),
                ret,
            ));
        }
        self.inflight.push_back(keep);
        Ok(ret as u16)
    }

    /// Copies `len` bytes from `src` at `src_off` to `dst` at `dst_off`; both regions stay
    /// alive until completion. Returns the ring index. Overlapping ranges of one region, or
    /// reading the destination before completion, give unspecified bytes (no UB: the
    /// regions are only ever accessed by copies).
    pub fn copy(
        &mut self,
        src: &Arc<ExtMem>,
        src_off: usize,
        dst: &Arc<ExtMem>,
        dst_off: usize,
        len: u32,
        submit: bool,
    ) -> Result<u16> {
        let s = src.iova_range(src_off, len as usize)?;
        let d = dst.iova_range(dst_off, len as usize)?;
        let keep = Keep::Mem(Arc::clone(src), Arc::clone(dst));
        // SAFETY: both ranges are inside registered regions kept alive by `keep` until the
        // operation completes; ExtMem is never accessed through Rust references.
        unsafe { self.enqueue(s, d, len, submit, keep) }
    }

    /// Copies the bytes of frame `m` starting at `offset` (to its end) into `dst` at
    /// `dst_off`, one operation per segment; `m` is freed once the copies complete. Returns
    /// the ring index of the last operation. Fails without enqueuing anything when the ring
    /// lacks room.
    pub fn copy_from_mbuf(
        &mut self,
        m: Mbuf,
        offset: usize,
        dst: &Arc<ExtMem>,
        dst_off: usize,
    ) -> Result<u16> {
        if offset > m.len() {
            return Err(Error::InvalidArgument(format!(
                "offset {offset} beyond a {}-byte frame",
                m.len()
            )));
        }
        let total = m.len() - offset;
        dst.iova_range(dst_off, total.max(1))?;
        // Collect (src iova, dst iova, len) for each piece first, so that a failure enqueues
        // nothing.
        let mut ops: Vec<(u64, u64, u32)> = Vec::new();
        let mut skip = offset;
        let mut at = dst_off;
        let mut seg = m.as_ptr();
        while !seg.is_null() {
            // SAFETY: seg is a valid segment of m's chain.
            let (len, iova, next) = unsafe {
                (
                    (*seg).data_len as usize,
                    sys::tigon_pktmbuf_data_iova(seg),
                    (*seg).next,
                )
            };
            if skip >= len {
                skip -= len;
            } else {
                let n = len - skip;
                ops.push((iova + skip as u64, dst.iova_range(at, n)?, n as u32));
                at += n;
                skip = 0;
            }
            seg = next;
        }
        if ops.len() > self.burst_capacity() as usize {
            return Err(Error::dpdk(
                format!("dmadev {}: ring full", self.name),
                -libc::ENOSPC,
            ));
        }
        let last = ops.len().saturating_sub(1);
        let mut keep_m = Some(m);
        let mut idx = 0;
        for (i, (s, d, n)) in ops.into_iter().enumerate() {
            let keep = if i == last {
                match keep_m.take() {
                    Some(m) => Keep::Mbuf(m, Arc::clone(dst)),
                    None => Keep::Nothing,
                }
            } else {
                Keep::Nothing
            };
            // SAFETY: source pieces are the mbuf's segments, kept alive (and unmodified: we
            // own it) by the last operation's `keep`; completions are in order, so the mbuf
            // outlives every piece. Destination pieces are inside `dst`, kept alive likewise.
            idx = unsafe { self.enqueue(s, d, n, false, keep)? };
        }
        Ok(idx)
    }

    /// Rings the doorbell for everything enqueued without `submit`.
    pub fn submit(&mut self) -> Result<()> {
        // SAFETY: started device, valid vchan.
        let ret = unsafe { sys::tigon_dma_submit(self.id, VCHAN) };
        if ret != 0 {
            return Err(Error::dpdk(format!("dmadev {}: submit", self.name), ret));
        }
        Ok(())
    }

    fn retire(&mut self, n: usize) {
        for _ in 0..n.min(self.inflight.len()) {
            self.inflight.pop_front();
        }
    }

    /// Polls for up to `max` completions. On `has_error`, the failed operation is still
    /// pending: `completed_status` reports it.
    pub fn completed(&mut self, max: u16) -> Completed {
        let mut last = 0u16;
        let mut err = false;
        // SAFETY: started device, valid out pointers.
        let n = unsafe { sys::tigon_dma_completed(self.id, VCHAN, max, &mut last, &mut err) };
        self.retire(n as usize);
        Completed {
            count: n,
            last_idx: last,
            has_error: err,
        }
    }

    /// Polls for up to `max` completions, successful or not, appending each status to
    /// `statuses`; returns (count, last ring index).
    pub fn completed_status(&mut self, max: u16, statuses: &mut Vec<DmaStatus>) -> (u16, u16) {
        let mut last = 0u16;
        let mut raw = vec![0 as sys::rte_dma_status_code; max as usize];
        // SAFETY: raw has room for max statuses.
        let n = unsafe {
            sys::tigon_dma_completed_status(self.id, VCHAN, max, &mut last, raw.as_mut_ptr())
        };
        statuses.extend(raw[..n as usize].iter().map(|&s| DmaStatus(s)));
        self.retire(n as usize);
        (n, last)
    }

    /// Device counters.
    pub fn stats(&self) -> Result<DmaStats> {
        let mut s = sys::rte_dma_stats::default();
        // SAFETY: valid device and vchan, valid out pointer.
        let ret = unsafe { sys::rte_dma_stats_get(self.id, VCHAN, &mut s) };
        if ret != 0 {
            return Err(Error::dpdk(format!("dmadev {}: stats", self.name), ret));
        }
        Ok(DmaStats {
            submitted: s.submitted,
            completed: s.completed,
            errors: s.errors,
        })
    }

    /// The driver's name for the device.
    pub fn driver_name(&self) -> String {
        let mut info = sys::rte_dma_info::default();
        // SAFETY: valid device, valid out pointer; dev_name is a C string owned by DPDK.
        unsafe {
            if sys::rte_dma_info_get(self.id, &mut info) != 0 || info.dev_name.is_null() {
                return String::new();
            }
            CStr::from_ptr(info.dev_name).to_string_lossy().into_owned()
        }
    }
}

impl Drop for DmaDev {
    fn drop(&mut self) {
        // SAFETY: our device. Stopping ends all device activity, after which the memory kept
        // alive for in-flight copies can be released.
        unsafe {
            let ret = sys::rte_dma_stop(self.id);
            if ret != 0 {
                log::debug!("dmadev {}: stop: {}", self.name, strerror(-ret));
            }
            let ret = sys::rte_dma_close(self.id);
            if ret != 0 {
                log::debug!("dmadev {}: close: {}", self.name, strerror(-ret));
            }
        }
        self.inflight.clear();
    }
}
