//! The backing file's driver: each hardware queue hands its requests to a few I/O threads
//! of its own, which `pread`/`pwrite` every segment at its place in the file and end the
//! request; flushes are `fdatasync`, discards punch holes, write-zeroes zero ranges.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use blkmq_core::{
    Driver, HctxCx, Op, Rejected, RequestInit, RequestQueue, Rq, SECTOR_SIZE, Status, StdPlatform,
};

/// Requests handed to one hardware queue's I/O threads.
struct Lane {
    waiting: Mutex<VecDeque<Rq>>,
    ready: Condvar,
}

/// A block device whose medium is a file (or a block device) opened by path.
pub(crate) struct FileDisk {
    file: File,
    lanes: Box<[Lane]>,
    stop: AtomicBool,
}

impl FileDisk {
    /// A driver of `file` with `hw_queues` hardware queues of `depth` requests each.
    pub(crate) fn new(file: File, hw_queues: usize, depth: usize) -> Self {
        let lanes = (0..hw_queues)
            .map(|_| Lane {
                // Room for every request the queue can hand over: no allocation per I/O.
                waiting: Mutex::new(VecDeque::with_capacity(depth)),
                ready: Condvar::new(),
            })
            .collect();
        Self {
            file,
            lanes,
            stop: AtomicBool::new(false),
        }
    }

    /// The backing file.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Starts `per_queue` I/O threads on each hardware queue of `queue`.
    pub(crate) fn start(
        queue: &Arc<RequestQueue<FileDisk>>,
        per_queue: usize,
    ) -> io::Result<Vec<JoinHandle<()>>> {
        let mut threads = Vec::new();
        for hctx in 0..queue.driver().lanes.len() {
            for n in 0..per_queue.max(1) {
                let queue = queue.clone();
                threads.push(
                    std::thread::Builder::new()
                        .name(format!("blkmq-io-{hctx}.{n}"))
                        .spawn(move || queue.driver().serve(&queue, hctx))?,
                );
            }
        }
        Ok(threads)
    }

    /// Stops the I/O threads once what they hold is served; the caller joins them.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for lane in self.lanes.iter() {
            let _guard = lane.waiting.lock().unwrap();
            lane.ready.notify_all();
        }
    }

    /// One I/O thread of hardware queue `hctx`.
    fn serve(&self, queue: &RequestQueue<FileDisk>, hctx: usize) {
        let lane = &self.lanes[hctx];
        loop {
            let rq = {
                let mut waiting = lane.waiting.lock().unwrap();
                loop {
                    if let Some(rq) = waiting.pop_front() {
                        break rq;
                    }
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    waiting = lane.ready.wait(waiting).unwrap();
                }
            };
            let status = self.execute(queue, &rq);
            // Our own request, in flight: never refused.
            let _ = queue.end_request(rq, status);
        }
    }

    fn execute(&self, queue: &RequestQueue<FileDisk>, rq: &Rq) -> Status {
        let Some(io) = queue.io(rq) else {
            return Status::IoErr;
        };
        let (op, offset, len) = (
            io.op(),
            io.sector() * SECTOR_SIZE,
            io.sectors() * SECTOR_SIZE,
        );
        let done = match op {
            Op::Flush => self.file.sync_data(),
            Op::Discard => self.fallocate(libc::FALLOC_FL_PUNCH_HOLE, offset, len),
            Op::WriteZeroes => match self.fallocate(libc::FALLOC_FL_ZERO_RANGE, offset, len) {
                // Not every file system zeroes ranges; a hole reads back zeroes too.
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    self.fallocate(libc::FALLOC_FL_PUNCH_HOLE, offset, len)
                }
                other => other,
            },
            Op::Read | Op::Write => {
                let mut at = offset;
                let mut result = Ok(());
                for seg in queue.segments(rq).into_iter().flatten() {
                    let addr = seg.addr as usize as *mut u8;
                    let n = seg.len as usize;
                    result = if op == Op::Read {
                        // SAFETY: the serving code's read buffer, which it owns and leaves
                        // alone until this request ends; the segments tile it.
                        let buf = unsafe { std::slice::from_raw_parts_mut(addr, n) };
                        self.file.read_exact_at(buf, at)
                    } else {
                        // SAFETY: the write's buffer, alive and unchanged until this
                        // request ends.
                        let buf = unsafe { std::slice::from_raw_parts(addr, n) };
                        self.file.write_all_at(buf, at)
                    };
                    if result.is_err() {
                        break;
                    }
                    at += n as u64;
                }
                result
            }
        };
        match done {
            Ok(()) => Status::Ok,
            Err(e) => match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) => Status::NotSupported,
                Some(libc::ENOSPC) => Status::NoSpace,
                _ => Status::IoErr,
            },
        }
    }

    fn fallocate(&self, mode: i32, offset: u64, len: u64) -> io::Result<()> {
        let mode = mode | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: a plain system call on the open descriptor we own.
        let rc = unsafe { libc::fallocate(self.file.as_raw_fd(), mode, offset as i64, len as i64) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl Driver for FileDisk {
    type Platform = StdPlatform;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        let lane = &self.lanes[cx.hctx()];
        lane.waiting.lock().unwrap().push_back(rq);
        lane.ready.notify_one();
        Ok(())
    }
}
