//! [`CopyEngine`] of the agent: the CPU for small payloads and for direct copies into client
//! address spaces; the dmadev (when given) for payloads of at least `dma_threshold` bytes
//! into channel buffers, asynchronously, completions polled by the engine loop.

use super::link::RxFrame;
use super::memory::{Clients, Target};
use super::serve::ClientCopy;
use std::collections::VecDeque;
use std::ops::Range;
use tigon_engine::{BufRef, CopyEngine, CopyError};
use tigon_pmd::DmaDev;

pub struct AgentCopy {
    pub clients: Clients,
    pub dma: Option<DmaDev>,
    pub dma_threshold: usize,
    /// Device operations each queued copy took (one per mbuf segment), in order.
    queued: VecDeque<u16>,
    ops_done: u64,
    pub dma_errors: u64,
}

impl AgentCopy {
    pub fn new(dma: Option<DmaDev>, dma_threshold: usize) -> Self {
        AgentCopy {
            clients: Clients::default(),
            dma,
            dma_threshold,
            queued: VecDeque::new(),
            ops_done: 0,
            dma_errors: 0,
        }
    }
}

impl ClientCopy for AgentCopy {
    fn clients(&mut self) -> &mut Clients {
        &mut self.clients
    }
}

impl CopyEngine<RxFrame> for AgentCopy {
    fn copy_from_frame(
        &mut self,
        frame: RxFrame,
        range: Range<usize>,
        dst: &BufRef,
        off: u64,
    ) -> Result<bool, CopyError> {
        let whole_tail = range.end == frame.as_ref().len();
        if let (Some(dev), RxFrame::Mbuf(_)) = (&self.dma, &frame)
            && range.len() >= self.dma_threshold
            && whole_tail
            && let Ok(Target::Channel(m, at)) = self.clients.resolve(dst, off, range.len())
            && let Some(ext) = m.ext.clone()
            && dev.burst_capacity() >= 2
        {
            let RxFrame::Mbuf(mbuf) = frame else {
                unreachable!("matched above")
            };
            let segs = mbuf.nb_segs();
            let dev = self.dma.as_mut().expect("matched above");
            let n = range.len() as u64;
            return match dev.copy_from_mbuf(mbuf, range.start, &ext, at) {
                Ok(_) => {
                    let _ = dev.submit();
                    self.queued.push_back(segs);
                    self.clients.dma_bytes += n;
                    Ok(false)
                }
                Err(e) => Err(CopyError(format!("dmadev: {e}"))),
            };
        }
        let src = frame
            .as_ref()
            .get(range)
            .ok_or_else(|| CopyError("frame range".into()))?;
        self.clients.write(dst, off, src)?;
        Ok(true)
    }

    fn write(&mut self, dst: &BufRef, off: u64, src: &[u8]) -> Result<(), CopyError> {
        self.clients.write(dst, off, src)
    }

    fn read(&mut self, src: &BufRef, off: u64, out: &mut [u8]) -> Result<(), CopyError> {
        self.clients.read(src, off, out)
    }

    fn poll_completed(&mut self) -> Result<usize, CopyError> {
        let Some(dev) = self.dma.as_mut() else {
            return Ok(0);
        };
        if self.queued.is_empty() {
            return Ok(0);
        }
        let c = dev.completed(64);
        if c.has_error {
            self.dma_errors += 1;
            return Err(CopyError("dmadev reported a failed copy".into()));
        }
        self.ops_done += c.count as u64;
        let mut n = 0;
        while let Some(&ops) = self.queued.front() {
            if self.ops_done < ops as u64 {
                break;
            }
            self.ops_done -= ops as u64;
            self.queued.pop_front();
            n += 1;
        }
        Ok(n)
    }

    fn copied_bytes(&self) -> (u64, u64) {
        (self.clients.dma_bytes, self.clients.cpu_bytes)
    }
}
