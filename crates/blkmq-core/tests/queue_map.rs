//! Spreading CPUs over hardware queues: in range, contiguous, even.

#![cfg(not(loom))]

use blkmq_core::{BioFlags, ConfigError, Op, QueueMap, QueueMaps, QueueType};
use proptest::prelude::*;

proptest! {
    #[test]
    fn spread_is_in_range_contiguous_and_even(
        nr_cpus in 1usize..300,
        nr_queues in 1usize..300,
        offset in 0usize..1000,
    ) {
        let map = QueueMap::spread(nr_cpus, nr_queues, offset).unwrap();
        let table: Vec<usize> = (0..nr_cpus).map(|cpu| map.hctx(cpu)).collect();
        prop_assert!(table.iter().all(|h| (offset..offset + nr_queues).contains(h)));
        prop_assert!(table.windows(2).all(|w| w[0] <= w[1]), "contiguous groups");
        let used = nr_queues.min(nr_cpus);
        let mut per_queue = vec![0usize; nr_queues];
        for &h in &table {
            per_queue[h - offset] += 1;
        }
        // Every queue that can have a CPU has one, and no two differ by more than one.
        prop_assert!(per_queue[..used].iter().all(|&n| n >= 1));
        prop_assert!(per_queue[used..].iter().all(|&n| n == 0));
        let (lo, hi) = (per_queue[..used].iter().min().unwrap(), per_queue[..used].iter().max().unwrap());
        prop_assert!(hi - lo <= 1, "{per_queue:?}");
        for h in offset..offset + nr_queues {
            prop_assert_eq!(map.cpus_of(h).count(), per_queue[h - offset]);
        }
    }

    #[test]
    fn any_cpu_value_is_safe(nr_cpus in 1usize..64, cpu in any::<usize>()) {
        let map = QueueMap::spread(nr_cpus, 3, 0).unwrap();
        prop_assert!(map.hctx(cpu) < 3);
    }
}

#[test]
fn bad_maps_are_errors() {
    assert_eq!(
        QueueMap::spread(0, 1, 0).unwrap_err(),
        ConfigError::ZeroCpus
    );
    assert!(matches!(
        QueueMap::spread(4, 2, 65535),
        Err(ConfigError::TooManyHwQueues { .. })
    ));
    assert_eq!(
        QueueMap::from_table(&[3, 4, 9], 3, 3).unwrap_err(),
        ConfigError::BadQueueMap { cpu: 2, hctx: 9 }
    );
    let default = QueueMap::spread(4, 2, 0).unwrap();
    let fewer_cpus = QueueMap::spread(3, 1, 2).unwrap();
    assert!(QueueMaps::new(default.clone(), Some(fewer_cpus), None).is_err());
    let poll = QueueMap::spread(4, 1, 2).unwrap();
    let maps = QueueMaps::new(default, None, Some(poll)).unwrap();
    assert_eq!(maps.nr_hw_queues(), 3);
    assert_eq!(
        maps.select(0, Op::Write, BioFlags::POLLED),
        (QueueType::Poll, 2)
    );
    assert_eq!(
        maps.select(0, Op::Read, BioFlags::empty()),
        (QueueType::Default, 0)
    );
}
