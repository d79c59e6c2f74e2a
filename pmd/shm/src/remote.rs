//! Copies into and out of another process's memory (`process_vm_readv` / `process_vm_writev`),
//! so the engine core moves large messages straight between the wire and a rank's buffers
//! while the rank's own core computes.

use std::io;

/// Reads `out.len()` bytes at address `addr` of process `pid` into `out`.
pub fn read(pid: i32, addr: u64, out: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < out.len() {
        let local = libc::iovec {
            iov_base: out[done..].as_mut_ptr().cast(),
            iov_len: out.len() - done,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize + done) as *mut libc::c_void,
            iov_len: out.len() - done,
        };
        // SAFETY: `local` describes memory of this process that we hold mutably; `remote` is
        // only an address in the other process, checked by the kernel (EFAULT if invalid).
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "remote read made no progress",
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// Writes `src` to address `addr` of process `pid`.
pub fn write(pid: i32, addr: u64, src: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < src.len() {
        let local = libc::iovec {
            iov_base: src[done..].as_ptr() as *mut libc::c_void,
            iov_len: src.len() - done,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize + done) as *mut libc::c_void,
            iov_len: src.len() - done,
        };
        // SAFETY: the kernel only reads `local` (memory we hold); `remote` is checked by it.
        let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "remote write made no progress",
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// Writes each `(bytes, address)` piece into process `pid` with as few system calls as the
/// kernel allows (up to 1024 pieces per call): how the engine delivers a burst of frames
/// straight into a rank's buffer. Pieces that follow each other in the other process (a
/// rendezvous message's frames, in order) are one remote range: the kernel pins and walks
/// the pages of each remote range once, not once per frame (per frame, the page walks and
/// pins of a jumbo frame's two or three pages cost the engine more than its copy).
pub fn write_vectored(pid: i32, pieces: &[(&[u8], u64)]) -> io::Result<()> {
    const IOV_MAX: usize = 1024;
    let mut local: Vec<libc::iovec> = Vec::with_capacity(pieces.len().min(IOV_MAX));
    let mut remote: Vec<libc::iovec> = Vec::with_capacity(pieces.len().min(IOV_MAX));
    for chunk in pieces.chunks(IOV_MAX) {
        local.clear();
        remote.clear();
        for (b, a) in chunk {
            local.push(libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            });
            match remote.last_mut() {
                Some(r) if r.iov_base as usize + r.iov_len == *a as usize => r.iov_len += b.len(),
                _ => remote.push(libc::iovec {
                    iov_base: *a as usize as *mut libc::c_void,
                    iov_len: b.len(),
                }),
            }
        }
        let want: usize = chunk.iter().map(|(b, _)| b.len()).sum();
        // SAFETY: `local` describes slices we hold (only read by the kernel); `remote` holds
        // addresses in the other process, checked by the kernel (EFAULT if invalid).
        let n = unsafe {
            libc::process_vm_writev(
                pid,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != want {
            // A partial transfer stops at the first piece that failed: finish one by one,
            // which reports that piece's error.
            let mut done = n as usize;
            for (b, a) in chunk {
                if done >= b.len() {
                    done -= b.len();
                    continue;
                }
                write(pid, a + done as u64, &b[done..])?;
                done = 0;
            }
        }
    }
    Ok(())
}

/// Reads consecutive bytes of process `pid` from `addr` into each of `outs` in turn: one
/// `process_vm_readv` for up to 1,024 of them (the call's fixed cost, finding the process and
/// checking access, is paid once, not per piece).
pub fn read_vectored(pid: i32, addr: u64, outs: &mut [&mut [u8]]) -> io::Result<()> {
    const IOV_MAX: usize = 1024;
    let mut at = addr;
    for chunk in outs.chunks_mut(IOV_MAX) {
        let mut local: smallvec::SmallVec<[libc::iovec; 32]> = chunk
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let want: usize = chunk.iter().map(|b| b.len()).sum();
        let remote = libc::iovec {
            iov_base: at as usize as *mut libc::c_void,
            iov_len: want,
        };
        // SAFETY: `local` describes slices we hold mutably (the kernel writes only there, at
        // most `want` bytes); `remote` is an address range of the other process, checked by
        // the kernel (EFAULT if invalid).
        let n = unsafe {
            libc::process_vm_readv(
                pid,
                local.as_mut_ptr(),
                local.len() as libc::c_ulong,
                &remote,
                1,
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != want {
            // A partial transfer (a page that went away): the rest piece by piece, which
            // reports the error or finishes.
            let mut done = n as usize;
            let mut piece_at = at;
            for b in chunk.iter_mut() {
                if done >= b.len() {
                    done -= b.len();
                    piece_at += b.len() as u64;
                    continue;
                }
                read(pid, piece_at + done as u64, &mut b[done..])?;
                piece_at += b.len() as u64;
                done = 0;
            }
        }
        at += want as u64;
    }
    Ok(())
}

/// Lets process `pid` (the agent) read and write this process's memory under Yama's
/// restricted ptrace scope.
pub fn allow_ptracer(pid: i32) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_PTRACER) takes plain integers.
    if unsafe { libc::prctl(libc::PR_SET_PTRACER, pid as libc::c_ulong, 0, 0, 0) } != 0 {
        let e = io::Error::last_os_error();
        // EINVAL: Yama is not built in; nothing to allow.
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_process_round_trip_and_bad_address() {
        let pid = std::process::id() as i32;
        let src = vec![7u8; 100_000];
        let mut dst = vec![0u8; 100_000];
        super::read(pid, src.as_ptr() as u64, &mut dst).unwrap();
        assert_eq!(src, dst);
        // Vectored: pieces of different lengths, consecutive in the source.
        let mut parts = [
            vec![0u8; 9000],
            vec![0u8; 1],
            vec![0u8; 40_000],
            vec![0u8; 50_999],
        ];
        let src2: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut outs: Vec<&mut [u8]> = parts.iter_mut().map(|p| p.as_mut_slice()).collect();
        super::read_vectored(pid, src2.as_ptr() as u64, &mut outs).unwrap();
        assert_eq!(parts.concat(), src2);
        let mut outs: Vec<&mut [u8]> = parts.iter_mut().map(|p| p.as_mut_slice()).collect();
        assert!(super::read_vectored(pid, 8, &mut outs).is_err());
        let target = vec![0u8; 10];
        super::write(pid, target.as_ptr() as u64, b"0123456789").unwrap();
        assert_eq!(std::hint::black_box(&target)[..], b"0123456789"[..]);
        assert!(
            super::read(pid, 8, &mut dst[..4]).is_err(),
            "a bad address is an error, not a crash"
        );
    }

    #[test]
    fn vectored_write_and_partial_failure() {
        let pid = std::process::id() as i32;
        let mut t = vec![0u8; 12];
        let base = t.as_mut_ptr() as u64;
        super::write_vectored(
            pid,
            &[(b"abc", base), (b"defg", base + 3), (b"hi", base + 10)],
        )
        .unwrap();
        assert_eq!(&std::hint::black_box(&t)[..], b"abcdefg\0\0\0hi");
        assert!(super::write_vectored(pid, &[(b"abc", base), (b"x", 8)]).is_err());
        // Consecutive pieces (one remote range) and a bad one after them in the same call:
        // the good ones land, the bad one is the error.
        let mut u = vec![0u8; 8];
        let ub = u.as_mut_ptr() as u64;
        assert!(
            super::write_vectored(pid, &[(b"0123", ub), (b"4567", ub + 4), (b"z", 8)]).is_err()
        );
        assert_eq!(&std::hint::black_box(&u)[..], b"01234567");
        // Many consecutive pieces, more than one call's worth, with a gap in the middle.
        let mut w = vec![0u8; 3000];
        let wb = w.as_mut_ptr() as u64;
        let src: Vec<u8> = (0..3000u32).map(|i| (i % 253) as u8).collect();
        let pieces: Vec<(&[u8], u64)> = (0..1500)
            .filter(|&i| i != 700)
            .map(|i| (&src[2 * i..2 * i + 2], wb + 2 * i as u64))
            .collect();
        super::write_vectored(pid, &pieces).unwrap();
        let got = std::hint::black_box(&w);
        assert_eq!(&got[..1400], &src[..1400]);
        assert_eq!(&got[1400..1402], &[0, 0]);
        assert_eq!(&got[1402..], &src[1402..]);
    }
}
