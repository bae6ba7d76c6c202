//! A RAM disk that moves real bytes (Linux's `brd`): the first driver to read.
//!
//! ```text
//! cargo run --release --example ramdisk
//! ```
//!
//! The driver is [`RamDisk`]; `main` below is a submitter that writes a pattern, reads it
//! back and checks every byte. The pieces, in the order a driver writer meets them:
//!
//! 1. **Limits.** [`RamDisk::limits`] says what one request may hold: the disk's size, and
//!    since zeroing memory is cheap, discard and write-zeroes of any length. Everything
//!    else keeps Linux's defaults (128 segments of up to 64 KiB, 1280 KiB per request); the
//!    block layer splits bios that do not fit, so the driver never sees one that does not.
//! 2. **The tag set.** `TagSet::builder(32)`: 32 requests in flight at most, on one
//!    hardware queue. Memory needs no more; a real device's queue depth goes here.
//! 3. **`init_request`** makes the driver's data of every request, once, when the tags are
//!    made: nothing here (`Payload = ()`); a DMA driver keeps its command and its
//!    scatter-gather table there, filled per request with
//!    [`RequestQueue::map_sg`](blkmq::RequestQueue::map_sg).
//! 4. **`queue_rq`** is handed each request by value. It reads the request's place
//!    ([`RqIo`](blkmq::RqIo): operation, first sector, length) and walks its data with
//!    [`RequestQueue::segments`](blkmq::RequestQueue::segments): every bio merged into the
//!    request, front to back, each as the submitter's segments (address and length).
//! 5. **Copying bytes.** A segment's address is a number the block layer never
//!    dereferences; for this driver it is a pointer into the submitter's memory
//!    (`buf.as_ptr() as u64`). The copy is `unsafe`, and its contract is stated once, on
//!    [`RamDisk::new`]: whoever submits to this disk names memory it owns, and keeps it
//!    alive and untouched until the bio ends. `submit_and_wait` makes that easy: it
//!    returns only after the end.
//! 6. **Ending the request.** [`end_request`](blkmq::RequestQueue::end_request) with a
//!    status ends every bio in it (their `end_io`, here the waiting submitter's wake-up)
//!    and frees the tag. Memory is done at once, so the request ends inside `queue_rq`; a
//!    real device ends it later, from its interrupt.
//! 7. **Discard and write-zeroes** carry no data: the range is zeroed (as `brd` frees its
//!    pages). **Flush** is a no-op: RAM has no volatile cache to write back.
//!
//! `tests/ramdisk.rs` runs `main` and checks the driver's edges.

use std::sync::Mutex;

use blkmq::{
    Bio, Driver, HctxCx, Host, Op, QueueConfig, QueueLimits, Rejected, RequestInit, RequestQueue,
    Rq, SECTOR_SIZE, Segment, Status, StdPlatform, TagSet,
};

/// A disk of memory. Its bytes sit behind one lock: every request is served whole under it.
pub(crate) struct RamDisk {
    bytes: Mutex<Vec<u8>>,
}

impl RamDisk {
    /// A disk of `size` bytes, zeroed.
    ///
    /// # Safety
    /// Every bio submitted to a queue of this disk names, as its buffer or its segments,
    /// memory of the submitter's that is valid for reads and writes of each segment's
    /// length, and that nothing else reads or writes until the bio has ended: the driver
    /// copies to (reads) or from (writes) it through those addresses.
    pub(crate) unsafe fn new(size: usize) -> Self {
        Self {
            bytes: Mutex::new(vec![0; size]),
        }
    }

    /// The limits of a queue on this disk.
    pub(crate) fn limits(&self) -> QueueLimits {
        let size = self.bytes.lock().unwrap().len() as u64;
        QueueLimits {
            max_discard_sectors: u32::MAX,
            max_write_zeroes_sectors: u32::MAX,
            ..QueueLimits::new(size / SECTOR_SIZE)
        }
    }

    /// Serves one request: the status to end it with.
    fn serve(&self, queue: &RequestQueue<Self>, rq: &Rq) -> Status {
        let Some(io) = queue.io(rq) else {
            return Status::IoErr;
        };
        let (op, start) = (io.op(), (io.sector() * SECTOR_SIZE) as usize);
        let len = (io.sectors() * SECTOR_SIZE) as usize;
        // A bio that names no memory would walk as device addresses: never copy those.
        let mut mapped = true;
        queue.for_each_bio(rq, |bio| mapped &= bio.data.is_mapped());
        let mut disk = self.bytes.lock().unwrap();
        let Some(range) = disk.get_mut(start..start + len) else {
            return Status::IoErr; // past the end (the queue checks this too)
        };
        match op {
            Op::Read | Op::Write if !mapped => Status::Invalid,
            Op::Read | Op::Write => {
                let mut at = 0;
                for seg in queue.segments(rq).into_iter().flatten() {
                    // The queue checks that a bio's segments add up to its length.
                    let Some(here) = range.get_mut(at..at + seg.len as usize) else {
                        return Status::Invalid;
                    };
                    copy(op, seg, here);
                    at += seg.len as usize;
                }
                debug_assert_eq!(at, len, "the segments cover the request");
                Status::Ok
            }
            Op::Discard | Op::WriteZeroes => {
                range.fill(0);
                Status::Ok
            }
            Op::Flush => Status::Ok, // nothing volatile to write back
        }
    }
}

/// Copies one segment between the submitter's memory and `disk` (as long as the segment):
/// into the segment for a read, out of it for a write.
fn copy(op: Op, seg: Segment, disk: &mut [u8]) {
    let mem = seg.addr as usize as *mut u8;
    // SAFETY: `RamDisk::new`'s contract: `seg` names `seg.len` bytes of the submitter's
    // memory, valid for reads and writes and untouched by anything else until the bio
    // ends, which is after this request ends; `disk` is the disk's own memory, borrowed
    // mutably here, so the two never overlap.
    unsafe {
        if op == Op::Read {
            std::ptr::copy_nonoverlapping(disk.as_ptr(), mem, disk.len());
        } else {
            std::ptr::copy_nonoverlapping(mem.cast_const(), disk.as_mut_ptr(), disk.len());
        }
    }
}

impl Driver for RamDisk {
    type Platform = StdPlatform;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        let queue = cx.queue();
        let status = self.serve(queue, &rq);
        // Our own request, from our own queue: ending it cannot be refused.
        assert!(queue.end_request(rq, status).is_ok());
        Ok(())
    }
}

/// The byte the pattern puts at byte `at` of the disk (every sector different).
pub(crate) fn pattern(at: u64) -> u8 {
    let sector = at / SECTOR_SIZE;
    (sector.wrapping_mul(31) ^ (at % SECTOR_SIZE).wrapping_mul(7) ^ (sector >> 8)) as u8
}

/// Where the pieces of a `len`-byte transfer sit in its buffer, in disk order, as
/// (offset, length): pieces of `sizes` bytes in turn, laid in the buffer from its back
/// towards its front, so that no two are contiguous and none can be joined.
pub(crate) fn layout(len: usize, sizes: &[usize]) -> Vec<(usize, usize)> {
    let mut pieces = Vec::new();
    let mut end = len;
    for &size in sizes.iter().cycle() {
        if end == 0 {
            break;
        }
        let size = size.min(end);
        end -= size;
        pieces.push((end, size));
    }
    pieces
}

/// The segments of `pieces` in `buf`: what a bio names.
pub(crate) fn table(buf: &mut Vec<u8>, pieces: &[(usize, usize)]) -> Vec<Segment> {
    // `Vec::as_mut_ptr` makes no reference to the contents: the pointers stay valid
    // until `buf` is next borrowed.
    let base = buf.as_mut_ptr() as u64;
    pieces
        .iter()
        .map(|&(off, len)| Segment::new(base + off as u64, len as u32))
        .collect()
}

/// A bio of `op` over the `len` bytes at byte `at`.
fn bio(op: Op, at: usize, len: usize) -> Bio {
    Bio::new(
        op,
        at as u64 / SECTOR_SIZE,
        (len as u64 / SECTOR_SIZE) as u32,
    )
}

/// The bytes of `data`, read from byte `at` of the disk, that are not the pattern.
fn wrong(data: &[u8], at: usize) -> u64 {
    let bad = data.iter().enumerate();
    bad.filter(|&(i, &b)| b != pattern((at + i) as u64)).count() as u64
}

/// What `run` did.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) bytes_written: u64,
    pub(crate) bytes_read: u64,
    pub(crate) bios: u64,
    pub(crate) segments: u64,
    pub(crate) mismatches: u64,
}

/// Disk size: 4 MiB.
pub(crate) const DISK: usize = 4 << 20;

/// Writes the whole disk with a pattern through 64 KiB bios of six scattered segments
/// each, reads it back three other ways and checks every byte; then zeroes a range and
/// checks that too.
pub(crate) fn run() -> Report {
    // SAFETY: every bio below names memory `run` owns and does not touch until
    // `submit_and_wait` has returned, i.e. until the bio ended.
    let disk = unsafe { RamDisk::new(DISK) };
    let limits = disk.limits();
    let host = Host::new(TagSet::builder(32), StdPlatform::new(), disk).expect("a valid host");
    let queue = host
        .add_queue(QueueConfig::new(limits))
        .expect("a valid queue");
    let mut report = Report::default();

    // Write: 64 KiB at a time from one buffer, in pieces of 4, 12 and 16 KiB.
    let mut buf = vec![0u8; 64 << 10];
    let pieces = layout(buf.len(), &[4 << 10, 12 << 10, 16 << 10]);
    for start in (0..DISK).step_by(buf.len()) {
        let mut at = start;
        for &(off, len) in &pieces {
            for (i, b) in buf[off..off + len].iter_mut().enumerate() {
                *b = pattern((at + i) as u64);
            }
            at += len;
        }
        let table = table(&mut buf, &pieces);
        let status = queue.submit_and_wait_with(bio(Op::Write, start, buf.len()), &table);
        assert_eq!(status, Status::Ok);
        report.bios += 1;
        report.segments += table.len() as u64;
        report.bytes_written += buf.len() as u64;
    }

    // Read back: a contiguous 1 MiB buffer; then 96 KiB bios (straddling the writes) of
    // 512-byte pieces, and of 24 KiB, 512-byte and 8 KiB ones.
    let mut big = vec![0u8; 1 << 20];
    for start in (0..DISK).step_by(big.len()) {
        let read = bio(Op::Read, start, big.len()).buffer(big.as_mut_ptr() as u64);
        assert_eq!(queue.submit_and_wait(read), Status::Ok);
        report.bios += 1;
        report.segments += 1;
        report.bytes_read += big.len() as u64;
        report.mismatches += wrong(&big, start);
    }
    for sizes in [&[512][..], &[24 << 10, 512, 8 << 10]] {
        let mut buf = vec![0u8; 96 << 10];
        for start in (0..DISK).step_by(buf.len()) {
            let len = buf.len().min(DISK - start);
            let pieces = layout(len, sizes);
            let table = table(&mut buf, &pieces);
            let status = queue.submit_and_wait_with(bio(Op::Read, start, len), &table);
            assert_eq!(status, Status::Ok);
            report.bios += 1;
            report.segments += table.len() as u64;
            // The pieces back in disk order, then checked.
            let flat: Vec<u8> = pieces
                .iter()
                .flat_map(|&(off, len)| buf[off..off + len].iter().copied())
                .collect();
            report.bytes_read += len as u64;
            report.mismatches += wrong(&flat, start);
        }
    }

    // Zero 256 KiB in the middle, flush, and read around it: zeroes there, the pattern
    // on either side.
    let (zero_at, zero_len) = (1 << 20, 256 << 10);
    let zero = bio(Op::WriteZeroes, zero_at, zero_len);
    assert_eq!(queue.submit_and_wait(zero), Status::Ok);
    assert_eq!(queue.submit_and_wait(Bio::new(Op::Flush, 0, 0)), Status::Ok);
    let mut around = vec![0xffu8; 2 * zero_len];
    let first = zero_at - zero_len / 2;
    let read = bio(Op::Read, first, around.len()).buffer(around.as_mut_ptr() as u64);
    assert_eq!(queue.submit_and_wait(read), Status::Ok);
    report.bios += 3;
    report.bytes_read += around.len() as u64;
    for (i, &b) in around.iter().enumerate() {
        let at = first + i;
        let zeroed = (zero_at..zero_at + zero_len).contains(&at);
        report.mismatches += u64::from(b != if zeroed { 0 } else { pattern(at as u64) });
    }
    report
}

pub(crate) fn main() {
    let r = run();
    println!(
        "ramdisk: {} KiB written, {} KiB read back, {} bios of {} segments, {} bytes wrong",
        r.bytes_written >> 10,
        r.bytes_read >> 10,
        r.bios,
        r.segments,
        r.mismatches
    );
    assert_eq!(r.mismatches, 0, "read back what was not written");
}
