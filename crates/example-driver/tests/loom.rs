//! A loom model of the driver's interrupt racing a submission, through the real engine.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p blkmq-example-driver --release --test loom`.
//!
//! The device holds one request whose completion is posted. A submitter submits another
//! bio while the interrupt thread serves the posted completion. With room for one command
//! only, the new request is refused by the full device unless the interrupt ran first; the
//! interrupt's completion must then have it issued again. Right after the race the new
//! request is on the device, with nothing but the platform's kicks served (a request left
//! queued then would wait for a completion that never comes); at the end every bio has
//! ended exactly once and with success ([`Ticket`] panics on a second end, and loom
//! reports a ticket a bio never gave back as a leak), and no tag, command or usage
//! reference is left.
//!
//! The engine runs on [`LoomPlatform`], the platform blkmq-core has for loom models: its
//! lock and kicks are points loom interleaves at, and so is the driver's own lock, which
//! is the platform's.

#![cfg(loom)]

use std::sync::Arc;

use blkmq_core::testing::LoomPlatform;
use blkmq_core::{Bio, Host, Op, QueueConfig, QueueLimits, RequestQueue, TagSet};
use blkmq_example_driver::{MemDisk, Ticket};
use loom::thread;

type Disk = MemDisk<LoomPlatform>;

/// A host over a disk of 64 sectors holding `depth` commands, with 4 tags, and one queue.
struct World {
    host: Arc<Host<Disk>>,
    queue: Arc<RequestQueue<Disk>>,
}

impl World {
    fn new(depth: usize) -> Self {
        let host = Host::new(
            TagSet::builder(4).max_queues(1),
            LoomPlatform::new(1),
            MemDisk::new(64, depth),
        )
        .unwrap();
        let queue = host
            .add_queue(QueueConfig::new(QueueLimits::new(64)))
            .unwrap();
        Self { host, queue }
    }

    fn disk(&self) -> &Disk {
        self.host.driver()
    }

    /// Submits a write of 8 sectors at `sector`, filled with `word`, reporting to a ticket.
    fn write(&self, sector: u64, word: u64) -> Ticket {
        let ticket = Ticket::new();
        let bio = ticket.bio(Bio::new(Op::Write, sector, 8).payload(word));
        assert!(self.queue.submit(bio).is_ok(), "the queue refused a bio");
        ticket
    }

    /// Serves the platform's kicks, as its deferred work would.
    fn serve_kicks(&self) -> bool {
        if self.host.set().platform().take_kicks().is_empty() {
            return false;
        }
        assert!(self.host.run_kicked() > 0, "kicked, but no queue marked");
        true
    }

    /// Serves kicks and interrupts until neither has anything left, then checks that nothing
    /// is left behind.
    fn drain(&self) {
        for _ in 0..8 {
            let kicked = self.serve_kicks();
            if self.disk().interrupt(&self.queue) == 0 && !kicked {
                break;
            }
        }
        assert_eq!(self.disk().in_flight(), 0, "a command left on the device");
        assert_eq!(self.disk().pending(), 0);
        for hctx in 0..self.queue.nr_hw_queues() {
            assert!(!self.queue.has_work(hctx), "hardware queue {hctx} has work");
        }
        assert_eq!(self.host.in_driver(), 0);
        assert_eq!(self.queue.usage(), 0);
        assert_eq!(self.host.set().busy(), 0);
    }
}

/// Runs `f` in every interleaving loom finds with at most `bound` preemptions, unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise, on a model thread with room for a host.
fn model(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(bound);
    }
    builder.max_branches = builder.max_branches.max(10_000);
    let f = Arc::new(f);
    builder.check(move || {
        let f = f.clone();
        spawn(move || f()).join().unwrap();
    });
}

/// A model thread with a 1 MiB stack: making a host and submitting take more than a model
/// thread's default.
fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> thread::JoinHandle<T> {
    thread::Builder::new().stack_size(1 << 20).spawn(f).unwrap()
}

/// The interrupt ending the request on the device races a submission; with `depth` 1 the
/// submission finds the device full unless the interrupt came first.
fn interrupt_vs_submission(depth: usize) {
    let world = Arc::new(World::new(depth));
    let first = world.write(0, 1);
    assert_eq!(
        world.disk().pending(),
        1,
        "the device did not take the first request"
    );
    let submitter = {
        let world = world.clone();
        spawn(move || world.write(8, 2))
    };
    let interrupt = {
        let world = world.clone();
        spawn(move || world.disk().interrupt(&world.queue))
    };
    let second = submitter.join().unwrap();
    // The second too when it was on the device before the interrupt looked.
    let served = interrupt.join().unwrap();
    assert!(
        (1..=depth).contains(&served),
        "the interrupt served {served}"
    );
    assert_eq!(first.ended(), 1);
    world.serve_kicks();
    assert_eq!(
        world.disk().issued(),
        2,
        "the new request was stranded after the race ({:?})",
        world.queue,
    );
    world.drain();
    for (ticket, sector, word) in [(&first, 0, 1), (&second, 8, 2)] {
        assert_eq!(ticket.ended(), 1, "a bio did not end");
        assert!(ticket.ended_ok());
        assert_eq!(world.disk().read_sector(sector), Some(word));
    }
}

/// A device with room for one command: the submission may be refused and must be issued
/// again by the interrupt's completion.
#[test]
fn interrupt_vs_submission_to_a_full_device() {
    model(5, || interrupt_vs_submission(1));
}

/// A device with room for both: the submission is issued while the interrupt ends the
/// other request.
#[test]
fn interrupt_vs_submission_with_room() {
    model(5, || interrupt_vs_submission(2));
}
