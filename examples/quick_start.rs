//! Quick start: a complete minimal driver on the std runtime, with BFQ, two threads
//! submitting and waiting. Nothing here kicks, runs a queue or keeps a timer: the
//! `StdPlatform` worker does (BFQ idles and asks for later runs; the worker makes them).
//!
//! ```text
//! cargo run --example quick_start
//! ```
//!
//! `tests/quick_start.rs` runs it.

use std::sync::Mutex;

use blkmq::bfq::Bfq;
use blkmq::{
    Bio, Driver, HctxCx, Host, IssuerId, Op, QueueConfig, QueueLimits, Rejected, RequestInit, Rq,
    SECTOR_SIZE, Status, StdPlatform, TagSet,
};

/// The device: 16 MiB of memory, each request served at once in `queue_rq`.
struct RamDisk {
    data: Mutex<Vec<u8>>,
}

impl Driver for RamDisk {
    type Platform = StdPlatform;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        let queue = cx.queue();
        let (op, start, len) = {
            let io = queue.io(&rq).expect("our own request");
            let start = (io.sector() * SECTOR_SIZE) as usize;
            (io.op(), start, (io.sectors() * SECTOR_SIZE) as usize)
        };
        let mut data = self.data.lock().unwrap();
        let status = match data.get_mut(start..start + len) {
            // A real driver copies the bios' pages here; this one touches the range.
            Some(range) if op == Op::Write => {
                range.fill(0xa5);
                Status::Ok
            }
            Some(_) => Status::Ok,
            None => Status::IoErr,
        };
        drop(data);
        // Our own request, from our own queue: ending it cannot be refused.
        assert!(queue.end_request(rq, status).is_ok());
        Ok(())
    }
}

/// Bios each thread submits.
const PER_THREAD: usize = 2_000;

/// Two threads submit 2,000 bios each through BFQ, each waiting for its own.
pub(crate) fn main() {
    let disk = RamDisk {
        data: Mutex::new(vec![0; 16 << 20]),
    };
    // The default platform starts its worker with the host, and stops it when the host
    // is dropped.
    let host = Host::new(TagSet::builder(32), StdPlatform::new(), disk).expect("a valid host");
    let limits = QueueLimits::new((16 << 20) / SECTOR_SIZE);
    let queue = host
        .add_queue(QueueConfig::new(limits).elevator(Box::new(Bfq::new())))
        .expect("a valid queue");

    let threads: Vec<_> = (0..2u32)
        .map(|thread| {
            let queue = queue.clone();
            std::thread::spawn(move || {
                for i in 0..PER_THREAD as u64 {
                    let op = if i % 4 == 0 { Op::Write } else { Op::Read };
                    let sector = u64::from(thread) * 8192 + (i * 8) % 8192;
                    let bio = Bio::new(op, sector, 8).issuer(IssuerId(thread + 1));
                    // Sleeps until a request is free and then until the bio has ended.
                    let status = queue.submit_and_wait(bio);
                    assert_eq!(status, Status::Ok, "thread {thread}, bio {i}");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a submitter panicked");
    }
    println!(
        "{} bios ended, {} timeouts, {} requests in the driver",
        2 * PER_THREAD,
        queue.timed_out(),
        host.in_driver()
    );
}
