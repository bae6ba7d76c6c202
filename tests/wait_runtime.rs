//! Waiting for one's own I/O on the std runtime: two threads each submit bios one at a time
//! with `submit_and_wait` (sleeping, no table of flags, no spinning) through BFQ, mq-deadline
//! and none on the default `StdPlatform`, with more submitters than tags on a small set, and
//! every bio's status comes back to the thread that submitted it.

use blkmq::bfq::Bfq;
use blkmq::deadline::Deadline;
use blkmq::testing::Null;
use blkmq::{
    Bio, Elevator, Host, IoPrio, IoPrioClass, IssuerId, Op, QueueConfig, QueueLimits, Status,
    StdPlatform, TagSet,
};

const PER_THREAD: u64 = 300;

/// Two issuers of unequal priority (so BFQ idles for the one in service) submit and wait;
/// the bios past the device's end must come back failed, the others succeed.
fn run(elevator: Option<Box<dyn Elevator>>) {
    let host = Host::new(TagSet::builder(2), StdPlatform::new(), Null::new()).unwrap();
    let mut config = QueueConfig::new(QueueLimits::new(1 << 20));
    if let Some(elevator) = elevator {
        config = config.elevator(elevator);
    }
    let queue = host.add_queue(config).unwrap();
    std::thread::scope(|s| {
        for thread in 0..2u32 {
            let queue = &queue;
            s.spawn(move || {
                let prio = IoPrio::new(IoPrioClass::BestEffort, thread as u8 * 7).unwrap();
                for i in 0..PER_THREAD {
                    // Every tenth bio lies past the end of the device.
                    let past_end = i % 10 == 9;
                    let sector = if past_end {
                        1 << 20
                    } else {
                        u64::from(thread) * (1 << 16) + i * 8
                    };
                    let bio = Bio::new(Op::Read, sector, 8)
                        .issuer(IssuerId(thread + 1))
                        .prio(prio);
                    let want = if past_end { Status::IoErr } else { Status::Ok };
                    assert_eq!(queue.submit_and_wait(bio), want, "thread {thread}, bio {i}");
                }
            });
        }
    });
    assert_eq!(
        (host.in_driver(), host.set().busy(), queue.usage()),
        (0, 0, 0)
    );
}

#[test]
fn bfq_waiters_get_their_own_status_on_the_default_platform() {
    run(Some(Box::new(Bfq::new())));
}

#[test]
fn mq_deadline_waiters_get_their_own_status_on_the_default_platform() {
    run(Some(Box::new(Deadline::new())));
}

#[test]
fn waiters_without_an_elevator_get_their_own_status_on_the_default_platform() {
    run(None);
}
