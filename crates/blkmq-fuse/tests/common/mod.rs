//! What the mount tests share: a RAM disk driver that moves each request's bytes through
//! its segments, a reason to skip where FUSE cannot be mounted, and bounded waits; for the
//! real-stack tests, `blkmq-disk` as a child process (`daemon`) and a reader of fio's JSON
//! report (`json`).

#![allow(dead_code)] // each test file uses part of it

pub(crate) mod daemon;
pub(crate) mod json;

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use blkmq_core::{
    BioFlags, Driver, HctxCx, Op, Rejected, RequestInit, Rq, SECTOR_SIZE, Status, StdPlatform,
};

/// A RAM disk: reads and writes copy between the medium and the segments' addresses
/// (pointers in this process), discards and write-zeroes zero, flushes are counted.
pub(crate) struct RamDisk {
    pub(crate) medium: Mutex<Vec<u8>>,
    pub(crate) flushes: AtomicU64,
    pub(crate) discards: AtomicU64,
    /// Writes that came with FUA (forced unit access).
    pub(crate) fua_writes: AtomicU64,
    /// Writes, FUA or not.
    pub(crate) writes: AtomicU64,
    /// The issuer of the last read or write.
    pub(crate) last_issuer: AtomicU64,
}

impl RamDisk {
    pub(crate) fn new(bytes: usize) -> Self {
        Self {
            medium: Mutex::new(vec![0; bytes]),
            flushes: AtomicU64::new(0),
            discards: AtomicU64::new(0),
            fua_writes: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            last_issuer: AtomicU64::new(u64::MAX),
        }
    }
}

impl Driver for RamDisk {
    type Platform = StdPlatform;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        let queue = cx.queue();
        let io = queue.io(&rq).expect("our own request");
        let (op, start, len) = (
            io.op(),
            (io.sector() * SECTOR_SIZE) as usize,
            (io.sectors() * SECTOR_SIZE) as usize,
        );
        let mut medium = self.medium.lock().unwrap();
        let status = match op {
            Op::Flush => {
                self.flushes.fetch_add(1, Ordering::Relaxed);
                Status::Ok
            }
            Op::Discard | Op::WriteZeroes => {
                self.discards.fetch_add(1, Ordering::Relaxed);
                medium[start..start + len].fill(0);
                Status::Ok
            }
            Op::Read | Op::Write => {
                if let Some(bio) = io.first_bio() {
                    let issuer = u64::from(bio.issuer.0);
                    self.last_issuer.store(issuer, Ordering::Relaxed);
                }
                if op == Op::Write {
                    self.writes.fetch_add(1, Ordering::Relaxed);
                    if io.flags().contains(BioFlags::FUA) {
                        self.fua_writes.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let mut at = start;
                for seg in queue.segments(&rq).expect("our own request") {
                    let n = seg.len as usize;
                    let addr = seg.addr as usize as *mut u8;
                    // SAFETY: the serving code hands the queue buffers of its own (the
                    // FUSE request's or its thread's), alive and untouched until the
                    // request ends, below; the segments tile `len` bytes of them.
                    unsafe {
                        if op == Op::Read {
                            std::ptr::copy_nonoverlapping(medium[at..].as_ptr(), addr, n);
                        } else {
                            std::ptr::copy_nonoverlapping(addr, medium[at..].as_mut_ptr(), n);
                        }
                    }
                    at += n;
                }
                assert_eq!(at, start + len, "the segments cover the request");
                Status::Ok
            }
        };
        drop(medium);
        queue.end_request(rq, status).expect("our own request");
        Ok(())
    }
}

/// Why FUSE cannot be mounted here, if it cannot: the tests skip with it.
pub(crate) fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    if let Err(e) = blkmq_fuse::check_fuse() {
        return Some(e.to_string());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if !std::env::split_paths(&path).any(|dir| dir.join("fusermount3").is_file()) {
        return Some("no fusermount3 (install fuse3)".into());
    }
    None
}

/// Waits, at most `limit`, for `what` to hold; whether it did.
pub(crate) fn wait_for(limit: Duration, mut what: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if what() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `dir` is a FUSE mount of ours now (its line in /proc/self/mounts).
pub(crate) fn is_mounted(dir: &Path) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts.lines().any(|line| {
        let mut fields = line.split(' ');
        let (source, target) = (fields.next(), fields.next());
        source == Some("blkmq") && target == dir.to_str()
    })
}

/// A fresh directory under the target's temporary folder.
pub(crate) fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("blkmq-fuse-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A buffer of `len` bytes aligned to 4096, as O_DIRECT wants.
pub(crate) struct Aligned {
    bytes: Vec<u8>,
    skip: usize,
    len: usize,
}

impl Aligned {
    pub(crate) fn new(len: usize) -> Self {
        let bytes = vec![0u8; len + 4096];
        let skip = bytes.as_ptr().align_offset(4096);
        Self { bytes, skip, len }
    }
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.bytes[self.skip..self.skip + self.len]
    }
    pub(crate) fn as_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[self.skip..self.skip + self.len]
    }
}

/// Fills `buf` with pseudo-random bytes drawn from `seed` (xorshift64*): the same seed,
/// the same bytes.
pub(crate) fn fill_pattern(seed: u64, buf: &mut [u8]) {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in buf.chunks_mut(8) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let word = state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

/// A 64-bit hash of `bytes` (each 8-byte word mixed in by a multiply and a shift, then
/// the length), to tell contents apart.
pub(crate) fn hash64(bytes: &[u8]) -> u64 {
    fn mix(hash: u64, word: u64) -> u64 {
        let hash = (hash ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        hash ^ (hash >> 29)
    }
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        hash = mix(hash, u64::from_le_bytes(word.try_into().unwrap()));
    }
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    mix(mix(hash, u64::from_le_bytes(tail)), bytes.len() as u64)
}
