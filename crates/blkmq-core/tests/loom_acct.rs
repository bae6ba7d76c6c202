//! A loom model of the I/O accounting's two halves per CPU: a context that holds its CPU's
//! id alone ([`Platform::exclusive_cpu`]) counts with plain loads and stores, any other with
//! atomic adds on the other half, and an id passes from one holder to the next with a
//! release and an acquire (as `StdPlatform` passes a CPU slot when its thread ends). No
//! interleaving loses a count.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p blkmq-core --release --test loom_acct`.
//!
//! The platform here hands out the id of CPU 0 as `StdPlatform` hands out a slot: to the
//! first model thread that asks while nobody holds it, until that thread gives it back.
//! Three submitters ask for it; the first two give it back when done, so the id may pass
//! from one to the other while the third counts on the shared half of its CPU. Each
//! submitter runs on a CPU, a software queue and a hardware queue of its own
//! (`current_cpu`), so the model races the counting and nothing else. Each request is
//! ended inside `queue_rq`: each submitter counts its start and its end.

#![cfg(loom)]

use std::cell::Cell;
use std::sync::Arc;

use blkmq_core::testing::{LoomRawMutex, Null};
use blkmq_core::{Bio, Host, Op, OpGroup, Platform, QueueConfig, QueueLimits, TagSet};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

loom::thread_local! {
    /// The model thread's token (zero: none, never a holder); it runs on CPU `token - 1`.
    static TOKEN: Cell<usize> = Cell::new(0);
}

/// Submitters, each with a token, a CPU and a hardware queue.
const SUBMITTERS: usize = 3;

/// CPUs, CPU 0's id one model thread at a time may hold alone.
struct Claimed {
    /// The holder's token; zero when nobody holds the id.
    owner: AtomicUsize,
}

impl Claimed {
    /// Gives the id back if the calling thread holds it (its end, on `StdPlatform`).
    fn release(&self) {
        let token = TOKEN.with(Cell::get);
        if token != 0 && self.owner.load(Ordering::Relaxed) == token {
            self.owner.store(0, Ordering::Release);
        }
    }
}

impl Platform for Claimed {
    type RawMutex = LoomRawMutex;

    fn nr_cpus(&self) -> usize {
        SUBMITTERS
    }

    fn current_cpu(&self) -> usize {
        TOKEN.with(Cell::get).saturating_sub(1)
    }

    fn exclusive_cpu(&self) -> Option<usize> {
        let token = TOKEN.with(Cell::get);
        if token == 0 {
            return None;
        }
        match self.owner.load(Ordering::Relaxed) {
            held if held == token => Some(0),
            0 => self
                .owner
                .compare_exchange(0, token, Ordering::Acquire, Ordering::Relaxed)
                .ok()
                .map(|_| 0),
            _ => None,
        }
    }

    fn now_ns(&self) -> u64 {
        0
    }

    fn kick(&self, _hctx: usize) {}
}

/// A model thread with a 1 MiB stack (making a host takes more than the default).
fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> thread::JoinHandle<T> {
    thread::Builder::new().stack_size(1 << 20).spawn(f).unwrap()
}

#[test]
fn a_cpu_passed_between_holders_and_shared_loses_no_count() {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    // A reading loads every counter of every part and histogram: many steps for loom.
    builder.max_branches = builder.max_branches.max(100_000);
    builder.check(|| {
        spawn(|| {
            let platform = Claimed {
                owner: AtomicUsize::new(0),
            };
            let host = Host::new(
                TagSet::builder(2).hw_queues(SUBMITTERS),
                platform,
                Null::new(),
            )
            .unwrap();
            let config = QueueConfig::new(QueueLimits::new(1 << 10)).accounting(true);
            let queue = host.add_queue(config).unwrap();
            // One I/O before the race, from a thread that never holds the id: it counts on
            // CPU 0's shared half.
            queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
            let submitters: Vec<_> = (1..=SUBMITTERS)
                .map(|token| {
                    let queue = Arc::clone(&queue);
                    spawn(move || {
                        TOKEN.with(|t| t.set(token));
                        queue
                            .submit(Bio::new(Op::Read, token as u64 * 64, 8))
                            .unwrap();
                        if token != SUBMITTERS {
                            queue.platform().release();
                        }
                    })
                })
                .collect();
            for submitter in submitters {
                submitter.join().unwrap();
            }
            let stats = queue.stats().unwrap();
            assert_eq!(stats.op(OpGroup::Read).ios, 4);
            assert_eq!(stats.op(OpGroup::Read).sectors, 32);
            assert_eq!(stats.in_flight, [0, 0]);
            assert_eq!(queue.latency().unwrap().count(OpGroup::Read), 4);
        })
        .join()
        .unwrap();
    });
}
