//! A request queue with mq-deadline allocates nothing per I/O once warmed up: submission,
//! insertion, dispatch, `queue_rq` and the completion counted by the scheduler's shared part,
//! without its lock. Measured with the core's counting allocator on the submitting thread
//! (everything here runs on it).

#![cfg(not(loom))]

#[path = "../../blkmq-core/tests/common/counting.rs"]
mod counting;

use counting::assert_no_alloc;
use std::sync::atomic::{AtomicU64, Ordering};

use blkmq_core::{
    Bio, Driver, HctxCx, Host, IoPrio, IoPrioClass, Op, Platform, QueueConfig, QueueLimits,
    Rejected, RequestInit, Rq, Status, TagSet,
};
use blkmq_sched_deadline::Deadline;

/// I/Os counted.
const IOS: u64 = 10_000;

/// A platform of one CPU, a clock that ticks on each read, and no kicks expected.
struct Fixed {
    clock: AtomicU64,
}

impl Platform for Fixed {
    type RawMutex = spin::mutex::SpinMutex<()>;
    fn nr_cpus(&self) -> usize {
        1
    }
    fn current_cpu(&self) -> usize {
        0
    }
    fn now_ns(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }
    fn kick(&self, _hctx: usize) {}
}

/// Ends every request inside `queue_rq`.
struct Inline;

impl Driver for Inline {
    type Platform = Fixed;
    type Payload = ();
    fn init_request(&self, _: RequestInit) {}
    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        cx.queue().end_request(rq, Status::Ok).unwrap();
        Ok(())
    }
}

/// Reads and writes of every class, none touching another (nothing merges).
fn bio(i: u64) -> Bio {
    let op = if i % 3 == 0 { Op::Write } else { Op::Read };
    let class = match i % 5 {
        0 => IoPrioClass::RealTime,
        1 => IoPrioClass::Idle,
        _ => IoPrioClass::BestEffort,
    };
    Bio::new(op, (i % 4096) * 16, 8).prio(IoPrio::new(class, 4).unwrap())
}

#[test]
fn mq_deadline_allocates_nothing_per_io() {
    let platform = Fixed {
        clock: AtomicU64::new(0),
    };
    let host = Host::new(TagSet::builder(64), platform, Inline).unwrap();
    let config = QueueConfig::new(QueueLimits::new(1 << 20)).elevator(Box::new(Deadline::new()));
    let queue = host.add_queue(config).unwrap();
    for i in 0..IOS {
        queue.submit(bio(i)).unwrap();
    }
    assert_no_alloc("submit -> deadline -> queue_rq -> end_request", || {
        for i in IOS..2 * IOS {
            queue.submit(bio(i)).unwrap();
        }
    });
    // Every request came back through the shared part: counted finished, nothing in flight.
    let classes = [
        IoPrioClass::RealTime,
        IoPrioClass::BestEffort,
        IoPrioClass::Idle,
    ];
    let stats = classes.map(|c| {
        queue
            .with_elevator(|dd: &mut Deadline| dd.stats(c))
            .unwrap()
    });
    assert_eq!(stats.iter().map(|s| s.inserted).sum::<u64>(), 2 * IOS);
    for s in stats {
        assert_eq!(
            (s.merged, s.completed, s.in_flight),
            (0, s.inserted, 0),
            "{s:?}"
        );
        assert_eq!(s.dispatched, s.inserted, "{s:?}");
    }
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}
