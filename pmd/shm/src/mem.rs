//! Hints about memory the engine's large tables live in: to the processor (load these cache
//! lines now, they are read soon) and to the kernel (back this table with huge pages). Neither
//! changes what memory holds; a table of 65,536 peers (16 MB, read at random, one peer per
//! message) is where they pay: each message's peer is a cache miss and, on 4 KiB pages, a
//! TLB miss too.

/// Bytes of a cache line on the processors tigon runs on.
const LINE: usize = 64;

/// Asks the processor to bring every cache line of `*r` into its caches, without waiting for
/// them: many such requests overlap (a load would hold the loop until its line arrived).
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        let p = r as *const T as *const i8;
        let mut off = 0;
        while off < size_of::<T>() {
            // SAFETY: a prefetch is a hint: it reads nothing into the program, never faults
            // and changes no memory; the addresses lie within the live object `r`. The
            // intrinsic is `unsafe` only for its target feature (SSE, part of x86_64).
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                    p.wrapping_add(off),
                )
            };
            off += LINE;
        }
        // The object's last byte: an object not aligned to a line ends in one more.
        if size_of::<T>() > 0 {
            // SAFETY: as above; the last byte of `r`.
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                    p.wrapping_add(size_of::<T>() - 1),
                )
            };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

/// Asks the processor for the cache lines that hold bytes `range` of `*r` (the part of it
/// about to be read), as [`prefetch`] does for all of `*r`: an object laid out with the fields
/// one path reads together costs that path only their lines, prefetched or not.
///
/// Into the second-level cache (`T1`), not the first: these are the engine's reads of peers
/// several messages ahead, dozens of lines in flight at once (a burst's frames' peers, the
/// delayed acks falling due). Asked into L1 they held its few fill buffers: perf put 16 % of
/// the 65,536-peer poll's samples on a stalled `prefetcht0`, and with `T1` that bench's
/// uniform rate went from 6.0 to 7.1 M msgs/s (`tigon bench scale --peers 2,65536`, medians
/// of 5 interleaved runs; 2 peers unchanged at ~11 M). The loads that follow find the lines
/// in L2, a dozen cycles away. Only the engine's read-aheads use this, and only with
/// thousands of peers (`rx::WARM_PEERS`).
#[inline(always)]
pub fn prefetch_bytes<T>(r: &T, range: core::ops::Range<usize>) {
    let end = range.end.min(size_of::<T>());
    if range.start >= end {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let p = r as *const T as *const i8;
        // With `range` known at compile time (a layout's constant) this is a fixed run of
        // requests, no loop.
        each_request(range.start, end, align_of::<T>() >= LINE, |off| {
            // SAFETY: a prefetch is a hint: it reads nothing into the program, never faults
            // and changes no memory; the addresses lie within the live object `r`.
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T1 }>(
                    p.wrapping_add(off),
                )
            };
        });
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

/// The offsets [`prefetch_bytes`] asks for to cover bytes `start..end` (`start < end`): one
/// a line's length apart from the first byte, and the last byte (a range not aligned to lines
/// ends in one more line). Of an object whose lines start where its offsets' do (`aligned`: a
/// line-aligned type), the last byte only if it lies past the line last asked for: no second
/// request for one line.
#[inline(always)]
fn each_request(start: usize, end: usize, aligned: bool, mut f: impl FnMut(usize)) {
    let mut off = start;
    let mut last = start;
    while off < end {
        f(off);
        last = off;
        off += LINE;
    }
    if !aligned || (end - 1) / LINE != last / LINE {
        f(end - 1);
    }
}

/// Tables smaller than this gain nothing from huge pages (2 MiB on x86_64).
pub const HUGE_MIN: usize = 2 << 20;

/// Asks the kernel to back the buffer of `v` (its whole capacity) with transparent huge
/// pages, where the system allows them on request (`transparent_hugepage` set to `madvise`
/// or `always`): a table read at random then costs a TLB entry per 2 MiB instead of per
/// 4 KiB. Buffers under [`HUGE_MIN`] are left alone. Advice only: the contents stay as they
/// are, and a refusal (no THP in this kernel) changes nothing but the speed.
pub fn advise_huge<T>(v: &Vec<T>) {
    let bytes = v.capacity() * size_of::<T>();
    if bytes < HUGE_MIN {
        return;
    }
    let page = 4096;
    let start = (v.as_ptr() as usize).next_multiple_of(page);
    let end = (v.as_ptr() as usize + bytes) & !(page - 1);
    if end <= start {
        return;
    }
    // SAFETY: `[start, end)` is page-aligned and lies within the live allocation of `v`;
    // MADV_HUGEPAGE only marks the range as eligible for huge pages: it neither moves nor
    // changes the memory (the kernel may collapse its pages later, contents kept).
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_leave_the_contents_as_they_are() {
        let mut v: Vec<[u64; 31]> = Vec::with_capacity(70_000);
        advise_huge(&v);
        for i in 0..70_000u64 {
            v.push([i; 31]);
        }
        advise_huge(&v);
        for x in &v {
            prefetch(x);
            prefetch_bytes(x, 56..185);
        }
        prefetch(&());
        prefetch_bytes(&(), 0..8);
        prefetch_bytes(&v[0], 300..400);
        assert!(
            v.iter()
                .enumerate()
                .all(|(i, x)| x.iter().all(|&w| w == i as u64))
        );
    }

    /// A range asks for exactly the lines its bytes lie in (no fewer, no other), wherever
    /// the object starts, in at most one request more than it has lines.
    #[test]
    fn a_range_is_the_lines_its_bytes_lie_in() {
        for (start, end) in [
            (56, 185),
            (32, 240),
            (0, 1),
            (0, 64),
            (0, 65),
            (63, 64),
            (5, 300),
        ] {
            for at in 4096..4096 + 64 {
                let mut want: Vec<usize> = (start..end).map(|b| (at + b) / LINE).collect();
                want.dedup();
                let mut got = Vec::new();
                each_request(start, end, false, |o| got.push((at + o) / LINE));
                assert!(got.len() <= want.len() + 1, "{start}..{end} at {at}");
                got.dedup();
                assert_eq!(got, want, "{start}..{end} at {at}");
            }
            // A line-aligned object: each of its lines asked for once.
            let want: Vec<usize> = (start / LINE..=(end - 1) / LINE).collect();
            let mut got = Vec::new();
            each_request(start, end, true, |o| got.push(o / LINE));
            assert_eq!(got, want, "{start}..{end} aligned");
        }
    }
}
