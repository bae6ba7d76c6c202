//! `RestartSet` against a plain set: marks, unmarks and drains in any order hand out exactly
//! the queues marked since the last drain, in increasing order, each once.

#![cfg(not(loom))]

use std::collections::BTreeSet;
use std::sync::Arc;

use blkmq_core::{ConfigError, RestartSet};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Mark(usize),
    Unmark(usize),
    Drain,
}

fn op(nr: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..nr).prop_map(Op::Mark),
        1 => (0..nr + 2).prop_map(Op::Unmark),
        2 => Just(Op::Drain),
    ]
}

fn case() -> impl Strategy<Value = (usize, Vec<Op>)> {
    prop_oneof![1..=64usize, 65..=4096usize, 4097..=65536usize]
        .prop_flat_map(|nr| (Just(nr), proptest::collection::vec(op(nr), 0..80)))
}

proptest! {
    #[test]
    fn matches_a_plain_set((nr, ops) in case()) {
        let set = RestartSet::new(nr).unwrap();
        let mut model = BTreeSet::new();
        for op in ops {
            match op {
                Op::Mark(h) => prop_assert_eq!(set.mark(h), model.insert(h)),
                Op::Unmark(h) => prop_assert_eq!(set.unmark(h), model.remove(&h)),
                Op::Drain => {
                    let mut got = Vec::new();
                    let n = set.drain(|h| got.push(h));
                    let want: Vec<usize> = std::mem::take(&mut model).into_iter().collect();
                    prop_assert_eq!(n, want.len());
                    prop_assert_eq!(got, want);
                }
            }
            prop_assert_eq!(set.len(), model.len());
            for &h in &model {
                prop_assert!(set.is_marked(h));
            }
            if !model.is_empty() {
                prop_assert!(!set.is_empty());
            }
        }
        // Whatever unmarks left behind, one drain empties the set for good.
        set.drain(|h| assert!(model.remove(&h), "{h} handed out but not marked"));
        prop_assert!(model.is_empty());
        prop_assert!(set.is_empty());
    }
}

#[test]
fn sizes_are_checked() {
    assert_eq!(RestartSet::new(0).unwrap_err(), ConfigError::ZeroHwQueues);
    assert!(matches!(
        RestartSet::new(65537),
        Err(ConfigError::TooManyHwQueues { .. })
    ));
    let set = RestartSet::new(65536).unwrap();
    assert!(set.mark(65535));
    assert_eq!(set.drain(|h| assert_eq!(h, 65535)), 1);
}

#[test]
#[should_panic(expected = "out of range")]
fn marking_a_queue_out_of_range_is_a_broken_invariant() {
    RestartSet::new(4).unwrap().mark(4);
}

#[test]
fn threads_marking_and_draining_lose_no_mark() {
    // Each marker marks its queues over and over; a drainer drains meanwhile. Every mark
    // that returned true is handed out by exactly one drain.
    let set = Arc::new(RestartSet::new(300).unwrap());
    let rounds = 2000;
    let markers: Vec<_> = (0..2)
        .map(|t| {
            let set = Arc::clone(&set);
            std::thread::spawn(move || {
                let mut fresh = vec![0usize; 300];
                for r in 0..rounds {
                    let h = (t * 150 + r * 7) % 300;
                    if set.mark(h) {
                        fresh[h] += 1;
                    }
                }
                fresh
            })
        })
        .collect();
    let mut handed = vec![0usize; 300];
    let drainer = {
        let set = Arc::clone(&set);
        std::thread::spawn(move || {
            let mut handed = vec![0usize; 300];
            for _ in 0..rounds {
                set.drain(|h| handed[h] += 1);
            }
            handed
        })
    };
    let mut fresh = vec![0usize; 300];
    for m in markers {
        for (f, n) in fresh.iter_mut().zip(m.join().unwrap()) {
            *f += n;
        }
    }
    for (h, n) in handed.iter_mut().zip(drainer.join().unwrap()) {
        *h += n;
    }
    set.drain(|h| handed[h] += 1);
    assert_eq!(handed, fresh, "each fresh mark handed out exactly once");
}
