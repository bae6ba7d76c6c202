//! What the tests share: a disk over a temporary file, elevators, a bounded wait.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use blkmq_core::{Bio, Host, QueueConfig, RequestQueue, Status, StdPlatform};
use blkmq_sched_bfq::Bfq;
use blkmq_sched_deadline::Deadline;
use blkmq_uring::{OpenError, UringDisk, UringDiskBuilder};

/// The elevators every data test runs through.
pub const ELEVATORS: [&str; 3] = ["none", "mq-deadline", "bfq"];

/// A temporary file's path, unique to this process and `name`; removed on drop.
pub struct TempPath(pub PathBuf);

impl TempPath {
    pub fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "blkmq-uring-test-{}-{name}.img",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        Self(path)
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A disk, its host and its queue.
pub struct Rig {
    pub queue: Arc<RequestQueue<UringDisk>>,
    pub host: Arc<Host<UringDisk>>,
    pub path: TempPath,
}

/// Opens `builder` and serves it with `elevator`; `None` (after a one-line note) when
/// io_uring cannot be set up here.
pub fn rig_with(path: TempPath, builder: UringDiskBuilder, elevator: &str) -> Option<Rig> {
    let disk = match builder.open() {
        Ok(disk) => disk,
        Err(OpenError::Uring(err)) => {
            eprintln!("skipped: io_uring cannot be set up here: {err}");
            return None;
        }
        Err(err) => panic!("open: {err}"),
    };
    let limits = disk.limits();
    let host = Host::new(disk.tag_set(), StdPlatform::new(), disk).unwrap();
    let mut config = QueueConfig::new(limits);
    match elevator {
        "none" => {}
        "mq-deadline" => config = config.elevator(Box::new(Deadline::new())),
        "bfq" => config = config.elevator(Box::new(Bfq::new())),
        other => panic!("no elevator {other}"),
    }
    let queue = UringDisk::add_queue(&host, config).unwrap();
    Some(Rig { queue, host, path })
}

/// A disk of `bytes` over a fresh temporary file.
pub fn rig(name: &str, bytes: u64, elevator: &str) -> Option<Rig> {
    let path = TempPath::new(name);
    let builder = UringDisk::builder(&path.0).size(bytes);
    rig_with(path, builder, elevator)
}

/// Runs `f` on a thread of its own and fails the test if it takes more than `secs`: a
/// detector for hangs, nothing waits for it to pass.
pub fn bounded<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(value) => {
            worker.join().unwrap();
            value
        }
        // It panicked: say why.
        Err(RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(worker.join().unwrap_err())
        }
        Err(RecvTimeoutError::Timeout) => panic!("hung: not done within {secs} s"),
    }
}

/// A buffer of `len` bytes aligned to 4096 (what `O_DIRECT` asks for), filled by `fill`.
pub struct Aligned {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: an owned allocation of plain bytes.
unsafe impl Send for Aligned {}
// SAFETY: shared access only reads.
unsafe impl Sync for Aligned {}

impl Aligned {
    pub fn new(len: usize, fill: impl Fn(usize) -> u8) -> Self {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096).unwrap();
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        let mut buf = Self { ptr, len };
        for (i, b) in buf.as_mut().iter_mut().enumerate() {
            *b = fill(i);
        }
        buf
    }

    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    pub fn as_ref(&self) -> &[u8] {
        // SAFETY: `len` bytes live at `ptr`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes live at `ptr`, and we have them uniquely.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len.max(1), 4096).unwrap();
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) }
    }
}

/// The statuses of bios submitted without waiting, by the order given in `private`.
pub struct Ended {
    pub statuses: Mutex<Vec<Option<Status>>>,
    pub count: AtomicUsize,
}

impl Ended {
    pub fn new(n: usize) -> &'static Ended {
        Box::leak(Box::new(Ended {
            statuses: Mutex::new(vec![None; n]),
            count: AtomicUsize::new(0),
        }))
    }

    /// `bio`, numbered `index`, noting its end here.
    pub fn bio(&'static self, bio: Bio, index: usize) -> Bio {
        let mut bio = bio.end_io(ended);
        bio.private = (self as *const Ended as u64) << 16 | index as u64;
        bio
    }

    /// Waits (bounded: fails after 20 s) until `n` bios have ended.
    pub fn wait(&self, n: usize) -> Vec<Option<Status>> {
        let start = std::time::Instant::now();
        while self.count.load(Ordering::Acquire) < n {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "hung: bios not ended"
            );
            std::thread::yield_now();
        }
        self.statuses.lock().unwrap().clone()
    }
}

fn ended(bio: Bio, status: Status) {
    // SAFETY: `private` holds a leaked `Ended`'s address (shifted) and an index.
    let done = unsafe { &*((bio.private >> 16) as *const Ended) };
    let index = (bio.private & 0xffff) as usize;
    done.statuses.lock().unwrap()[index] = Some(status);
    done.count.fetch_add(1, Ordering::AcqRel);
}

/// The backing file's bytes at `offset`.
pub fn file_bytes(path: &TempPath, offset: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(&path.0).unwrap();
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, offset).unwrap();
    buf
}

/// A byte pattern that names its place: `seed` and the byte's offset.
pub fn pattern(seed: u8, offset: usize) -> u8 {
    (offset as u8).wrapping_mul(31).wrapping_add(seed) ^ (offset >> 9) as u8
}
