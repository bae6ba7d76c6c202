//! A first look at a request queue end to end: submit, split, dispatch with a driver
//! that pushes back, completion and restart, with and without an elevator.

#[path = "common/fifo.rs"]
mod fifo;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use blkmq_core::*;

static ENDED: AtomicUsize = AtomicUsize::new(0);
fn done(_bio: Bio, status: Status) {
    assert_eq!(status, Status::Ok);
    ENDED.fetch_add(1, Ordering::SeqCst);
}

struct Hold {
    held: Mutex<Vec<Rq>>,
    cap: usize,
}
impl Driver for Hold {
    type Platform = StdPlatform;
    type Payload = ();
    fn init_request(&self, _: RequestInit) {}
    fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
        let mut held = self.held.lock().unwrap();
        if held.len() >= self.cap {
            return Err(Rejected {
                rq,
                status: Status::Resource,
            });
        }
        held.push(rq);
        Ok(())
    }
}

fn run(elevator: bool) {
    ENDED.store(0, Ordering::SeqCst);
    let host = Host::new(
        TagSet::builder(16).hw_queues(2),
        StdPlatform::with_cpus(2),
        Hold {
            held: Mutex::new(Vec::new()),
            cap: 3,
        },
    )
    .unwrap();
    let mut config = QueueConfig::new(QueueLimits {
        max_sectors: 64,
        ..QueueLimits::new(1 << 20)
    });
    if elevator {
        config = config.elevator(Box::new(fifo::Fifo::new()));
    }
    let queue = host.add_queue(config).unwrap();
    // 10 distinct bios, one big one split into 4 pieces.
    for i in 0..10u64 {
        queue
            .submit(Bio::new(Op::Read, i * 1000, 8).end_io(done))
            .unwrap();
    }
    queue
        .submit(Bio::new(Op::Write, 50_000, 256).end_io(done))
        .unwrap();
    let mut rounds = 0;
    loop {
        let held: Vec<Rq> = host.driver().held.lock().unwrap().drain(..).collect();
        if held.is_empty() {
            break;
        }
        rounds += 1;
        queue
            .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
            .unwrap();
    }
    assert_eq!(ENDED.load(Ordering::SeqCst), 11);
    assert!(rounds >= 4, "{rounds}");
    assert_eq!(host.set().busy(), 0);
    assert_eq!(queue.usage(), 0);
}

/// Both runs share the completion counter: one test, in turn.
#[test]
fn smoke_none_then_fifo() {
    run(false);
    run(true);
}
