//! Bytes under simulation, all opt-in: the host memory the bios of a checked run name
//! ([`SimMemory`]), the data a [`ModelDriver`](crate::ModelDriver) keeps for its device
//! ([`ModelDriver::keep_data`](crate::ModelDriver::keep_data)), and the check that every
//! byte read is the byte last written there ([`DataCheck`],
//! [`Sim::check_data`](crate::Sim::check_data)).
//!
//! Segment addresses in the simulator are not pointers: an address is `(buffer << 32) |
//! offset`, a place in one of the buffers of the [`SimMemory`] every
//! [`SimPlatform`](crate::SimPlatform) holds. Buffers are numbered from 1, one per bio in
//! flight, so no two bios' data is ever contiguous (as for bios with no data named), and
//! a checked run merges and splits exactly as an unchecked one: only the bytes are new.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use blkmq_core::{Bio, Op, SECTOR_SIZE, Segment};

/// Bits of a segment address holding the offset in its buffer.
const OFFSET_BITS: u32 = 32;

/// The simulator's host memory: numbered buffers that segment addresses point into
/// (`(buffer << 32) | offset`). Clones share it; every [`SimPlatform`](crate::SimPlatform)
/// has one ([`SimPlatform::memory`](crate::SimPlatform::memory)), empty until a checked
/// run gives bios buffers in it.
///
/// ```
/// use blkmq_core::Segment;
/// use blkmq_sim::SimMemory;
///
/// let memory = SimMemory::new();
/// let addr = memory.alloc(3, 1024); // buffer 3, 1 KiB
/// assert_eq!(addr, 3 << 32);
/// assert!(memory.write(Segment::new(addr + 512, 4), &[1, 2, 3, 4]));
/// let mut back = [0u8; 4];
/// assert!(memory.read(Segment::new(addr + 512, 4), &mut back));
/// assert_eq!(back, [1, 2, 3, 4]);
/// assert!(!memory.read(Segment::new(addr + 1022, 4), &mut back)); // past the buffer
/// ```
#[derive(Clone, Default)]
pub struct SimMemory {
    buffers: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl SimMemory {
    /// An empty memory.
    ///
    /// ```
    /// use blkmq_sim::SimMemory;
    /// assert_eq!(SimMemory::new().bytes(), 0);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Vec<u8>>> {
        self.buffers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes buffer `buffer` (at least 1) `len` bytes of zeroes, reusing its storage;
    /// returns its first byte's address.
    ///
    /// ```
    /// use blkmq_sim::SimMemory;
    /// let memory = SimMemory::new();
    /// assert_eq!(memory.alloc(1, 8) >> 32, 1);
    /// ```
    pub fn alloc(&self, buffer: u32, len: usize) -> u64 {
        let buffer = buffer.max(1);
        let mut buffers = self.lock();
        let index = buffer as usize;
        if buffers.len() <= index {
            buffers.resize_with(index + 1, Vec::new);
        }
        let buf = &mut buffers[index];
        buf.clear();
        buf.resize(len, 0);
        u64::from(buffer) << OFFSET_BITS
    }

    /// The buffer and the range in it that `seg` names, if it names one.
    fn place(buffers: &[Vec<u8>], seg: Segment) -> Option<(usize, std::ops::Range<usize>)> {
        let buffer = (seg.addr >> OFFSET_BITS) as usize;
        let start = (seg.addr & ((1 << OFFSET_BITS) - 1)) as usize;
        let end = start + seg.len as usize;
        (buffer != 0 && buffers.get(buffer)?.len() >= end).then_some((buffer, start..end))
    }

    /// Copies the bytes `seg` names into `out` (as long as `seg`); `false`, copying
    /// nothing, when `seg` is not inside a buffer.
    ///
    /// ```
    /// use blkmq_core::Segment;
    /// use blkmq_sim::SimMemory;
    /// let memory = SimMemory::new();
    /// let at = memory.alloc(1, 16);
    /// let mut out = [9u8; 16];
    /// assert!(memory.read(Segment::new(at, 16), &mut out));
    /// assert_eq!(out, [0; 16]);
    /// ```
    pub fn read(&self, seg: Segment, out: &mut [u8]) -> bool {
        let buffers = self.lock();
        match Self::place(&buffers, seg) {
            Some((b, range)) if out.len() == range.len() => {
                out.copy_from_slice(&buffers[b][range]);
                true
            }
            _ => false,
        }
    }

    /// Copies `data` into the bytes `seg` names (as long as `seg`); `false`, copying
    /// nothing, when `seg` is not inside a buffer.
    ///
    /// ```
    /// use blkmq_core::Segment;
    /// use blkmq_sim::SimMemory;
    /// let memory = SimMemory::new();
    /// assert!(!memory.write(Segment::new(1 << 32, 1), &[7])); // no buffer 1 yet
    /// ```
    pub fn write(&self, seg: Segment, data: &[u8]) -> bool {
        let mut buffers = self.lock();
        match Self::place(&buffers, seg) {
            Some((b, range)) if data.len() == range.len() => {
                buffers[b][range].copy_from_slice(data);
                true
            }
            _ => false,
        }
    }

    /// Bytes held in all buffers.
    ///
    /// ```
    /// use blkmq_sim::SimMemory;
    /// let memory = SimMemory::new();
    /// memory.alloc(2, 100);
    /// assert_eq!(memory.bytes(), 100);
    /// ```
    pub fn bytes(&self) -> usize {
        self.lock().iter().map(Vec::len).sum()
    }
}

impl fmt::Debug for SimMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimMemory")
            .field("bytes", &self.bytes())
            .finish_non_exhaustive()
    }
}

/// Bytes in a page of a [`Medium`].
const PAGE: u64 = 4096;

/// The data of a device, kept in pages made when first written (Linux's `brd`): a page
/// never written reads as zeroes; discard and write-zeroes drop pages.
#[derive(Debug, Default)]
pub(crate) struct Medium {
    pages: BTreeMap<u64, Box<[u8; PAGE as usize]>>,
}

impl Medium {
    /// Copies the device bytes from `at` into `out`.
    pub(crate) fn read(&self, mut at: u64, out: &mut [u8]) {
        let mut done = 0;
        while done < out.len() {
            let (page, off) = (at / PAGE, (at % PAGE) as usize);
            let n = (PAGE as usize - off).min(out.len() - done);
            match self.pages.get(&page) {
                Some(p) => out[done..done + n].copy_from_slice(&p[off..off + n]),
                None => out[done..done + n].fill(0),
            }
            done += n;
            at += n as u64;
        }
    }

    /// Stores `data` at device byte `at`.
    pub(crate) fn write(&mut self, mut at: u64, data: &[u8]) {
        let mut done = 0;
        while done < data.len() {
            let (page, off) = (at / PAGE, (at % PAGE) as usize);
            let n = (PAGE as usize - off).min(data.len() - done);
            let p = self
                .pages
                .entry(page)
                .or_insert_with(|| Box::new([0; PAGE as usize]));
            p[off..off + n].copy_from_slice(&data[done..done + n]);
            done += n;
            at += n as u64;
        }
    }

    /// Zeroes `len` device bytes from `at`.
    pub(crate) fn zero(&mut self, at: u64, len: u64) {
        let end = at + len;
        let mut at = at;
        while at < end {
            let (page, off) = (at / PAGE, at % PAGE);
            let n = (PAGE - off).min(end - at);
            if n == PAGE {
                self.pages.remove(&page);
            } else if let Some(p) = self.pages.get_mut(&page) {
                p[off as usize..(off + n) as usize].fill(0);
            }
            at += n;
        }
    }

    /// Moves the data of one bio of a request the device started: a write's segments into
    /// the medium, the medium into a read's; zeroes for discard and write-zeroes. A bio
    /// that names no memory moves nothing.
    pub(crate) fn serve(&mut self, memory: &SimMemory, bio: &Bio, scratch: &mut Vec<u8>) {
        let mut at = bio.sector * SECTOR_SIZE;
        match bio.op {
            Op::Read | Op::Write if bio.data.is_mapped() => {
                for seg in bio.segs() {
                    scratch.clear();
                    scratch.resize(seg.len as usize, 0);
                    if bio.op == Op::Read {
                        self.read(at, scratch);
                        memory.write(seg, scratch);
                    } else if memory.read(seg, scratch) {
                        self.write(at, scratch);
                    }
                    at += u64::from(seg.len);
                }
            }
            Op::Discard | Op::WriteZeroes => self.zero(at, bio.bytes()),
            _ => {}
        }
    }
}

/// What the bytes of a checked run came to: every read of a range no write touched while
/// the read was in flight is compared, byte for byte, with what the last write there
/// wrote (zeroes where nothing was, or a discard or write-zeroes was last).
///
/// ```
/// use blkmq_sim::{Dd, Ideal, IdealParams, ModelDriver, Sim, SimPlatform};
///
/// let platform = SimPlatform::new(1);
/// let driver = ModelDriver::new(platform.clone(), Ideal::new(IdealParams::default()).unwrap())
///     .keep_data();
/// let tags = driver.tag_set();
/// let config = driver.queue_config();
/// let mut sim = Sim::new(platform, tags, driver).unwrap();
/// let queue = sim.add_queue(config).unwrap();
/// sim.check_data();
/// sim.add_workload(queue, Dd::write(0, 1 << 20));
/// sim.run().unwrap();
/// sim.add_workload(queue, Dd::read(0, 1 << 20));
/// sim.run().unwrap();
/// let check = sim.data_check().unwrap();
/// assert_eq!((check.bytes_checked, check.bytes_wrong), (1 << 20, 0));
/// assert!(check.is_clean());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataCheck {
    /// Bios that change data the check followed: writes (each with a pattern of its
    /// own), discards and write-zeroes.
    pub writes: u64,
    /// Reads compared.
    pub reads_checked: u64,
    /// Bytes compared.
    pub bytes_checked: u64,
    /// Bytes that were not what was last written.
    pub bytes_wrong: u64,
    /// The first sector found wrong, if any.
    pub first_wrong_sector: Option<u64>,
    /// Reads not compared: a write to some of their sectors was in flight with them, or
    /// two writes there were in flight together, so "the last written" is not one thing.
    pub reads_racing: u64,
}

impl DataCheck {
    /// Whether every byte compared was right.
    ///
    /// ```
    /// use blkmq_sim::DataCheck;
    /// assert!(DataCheck::default().is_clean());
    /// assert!(!DataCheck { bytes_wrong: 1, ..DataCheck::default() }.is_clean());
    /// ```
    pub fn is_clean(&self) -> bool {
        self.bytes_wrong == 0
    }
}

/// What the check knows of one sector.
#[derive(Clone, Copy, Debug, Default)]
struct SectorRef {
    /// The write last there (0: zeroes; `UNKNOWN`: writes raced).
    stamp: u64,
    /// Writes to it in flight.
    in_flight: u32,
    /// The sequence number of the last write to it that ended.
    ended_seq: u64,
}

/// Two writes to a sector were in flight together: what it holds is either's.
const UNKNOWN: u64 = u64::MAX;

/// Fills `out` with the bytes write `stamp` puts from device byte `at` on (zeroes for
/// stamp 0: what is there before any write).
pub(crate) fn pattern(stamp: u64, at: u64, out: &mut [u8]) {
    if stamp == 0 {
        out.fill(0);
        return;
    }
    let mut word = 0;
    for (i, b) in out.iter_mut().enumerate() {
        let byte = at + i as u64;
        if i == 0 || byte % 8 == 0 {
            word = crate::SimRng::new(stamp.rotate_left(40) ^ (byte / 8)).next_u64();
        }
        *b = (word >> ((byte % 8) * 8)) as u8;
    }
}

/// The check of a run that gives its bios data: makes each write's bytes, follows which
/// write was last on each sector, and compares each read's bytes at its end.
#[derive(Debug, Default)]
pub(crate) struct Checker {
    pub(crate) result: DataCheck,
    sectors: BTreeMap<u64, SectorRef>,
    /// Writes ended so far: their sequence numbers.
    ended: u64,
    scratch: Vec<u8>,
}

/// What the checker keeps of one bio of a checked run.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tracked {
    /// The address of its buffer (0: none).
    pub(crate) addr: u64,
    /// Its write's stamp (0 for other operations).
    pub(crate) stamp: u64,
    /// Writes ended when it was submitted.
    pub(crate) seen: u64,
}

impl Checker {
    /// Gives a bio its data: a buffer numbered `buffer` in `memory`, filled with a fresh
    /// pattern for a write; and counts a write in flight on its sectors.
    pub(crate) fn submit(&mut self, memory: &SimMemory, buffer: u32, bio: Bio) -> (Bio, Tracked) {
        let mut tracked = Tracked {
            seen: self.ended,
            ..Tracked::default()
        };
        let bio = if bio.op.has_data() {
            tracked.addr = memory.alloc(buffer, bio.bytes() as usize);
            bio.buffer(tracked.addr)
        } else {
            bio
        };
        if bio.op.is_write() && bio.op != Op::Flush {
            self.result.writes += 1;
            if bio.op == Op::Write {
                tracked.stamp = self.result.writes;
                self.scratch.clear();
                self.scratch.resize(bio.bytes() as usize, 0);
                pattern(tracked.stamp, bio.sector * SECTOR_SIZE, &mut self.scratch);
                memory.write(
                    Segment::new(tracked.addr, bio.bytes() as u32),
                    &self.scratch,
                );
            }
            for s in bio.sector..bio.end_sector() {
                self.sectors.entry(s).or_default().in_flight += 1;
            }
        }
        (bio, tracked)
    }

    /// A bio of the run ended: a write's sectors now hold its bytes (if it ended well); a
    /// read's bytes are compared.
    pub(crate) fn end(
        &mut self,
        memory: &SimMemory,
        op: Op,
        sector: u64,
        bytes: u64,
        ok: bool,
        tracked: Tracked,
    ) {
        let sectors = sector..sector + bytes / SECTOR_SIZE;
        match op {
            Op::Write | Op::Discard | Op::WriteZeroes => {
                self.ended += 1;
                for s in sectors {
                    let r = self.sectors.entry(s).or_default();
                    r.in_flight -= 1;
                    // Another write there ended since this one went in, or is in flight:
                    // which one the device kept last is not known.
                    let raced = r.in_flight > 0 || r.ended_seq > tracked.seen;
                    r.stamp = if raced || !ok { UNKNOWN } else { tracked.stamp };
                    r.ended_seq = self.ended;
                }
            }
            Op::Read if ok => {
                let racing = sectors.clone().any(|s| {
                    self.sectors.get(&s).is_some_and(|r| {
                        r.in_flight > 0 || r.ended_seq > tracked.seen || r.stamp == UNKNOWN
                    })
                });
                if racing {
                    self.result.reads_racing += 1;
                    return;
                }
                self.scratch.clear();
                self.scratch.resize(bytes as usize, 0);
                if !memory.read(Segment::new(tracked.addr, bytes as u32), &mut self.scratch) {
                    self.result.bytes_wrong += bytes;
                    self.result.first_wrong_sector.get_or_insert(sector);
                    return;
                }
                self.result.reads_checked += 1;
                self.result.bytes_checked += bytes;
                let mut want = [0u8; SECTOR_SIZE as usize];
                for (s, got) in sectors.zip(self.scratch.chunks(SECTOR_SIZE as usize)) {
                    let stamp = self.sectors.get(&s).map_or(0, |r| r.stamp);
                    pattern(stamp, s * SECTOR_SIZE, &mut want);
                    let wrong = got.iter().zip(&want).filter(|(g, w)| g != w).count();
                    if wrong > 0 {
                        self.result.bytes_wrong += wrong as u64;
                        self.result.first_wrong_sector.get_or_insert(s);
                    }
                }
            }
            _ => {}
        }
    }
}
