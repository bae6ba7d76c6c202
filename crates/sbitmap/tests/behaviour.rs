//! Behaviour of `Sbitmap` and `SbitmapQueue` on concrete cases.

#![cfg(not(loom))]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Wake, Waker};

use blkmq_sbitmap::{
    AllocHint, BitBatch, MAX_DEPTH, Sbitmap, SbitmapError, SbitmapQueue, WAIT_QUEUES,
};

fn drain(map: &Sbitmap, hint: &AllocHint) -> Vec<usize> {
    std::iter::from_fn(|| map.get(hint)).collect()
}

/// A waker that counts its wake-ups.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting_waker() -> (Arc<CountingWaker>, Waker) {
    let count = Arc::new(CountingWaker::default());
    (count.clone(), Waker::from(count))
}

#[test]
fn shift_spreads_small_maps_over_four_words() {
    let cases = [
        (1, 6),
        (3, 6),
        (4, 0),
        (8, 1),
        (16, 2),
        (32, 3),
        (63, 3),
        (64, 4),
        (128, 5),
        (256, 6),
        (4096, 6),
    ];
    for (depth, shift) in cases {
        let map = Sbitmap::new(depth).unwrap();
        assert_eq!(map.shift(), shift, "depth {depth}");
    }
}

#[test]
fn configuration_errors_are_values() {
    assert_eq!(Sbitmap::new(0).unwrap_err(), SbitmapError::ZeroDepth);
    assert_eq!(
        Sbitmap::new(MAX_DEPTH + 1).unwrap_err(),
        SbitmapError::DepthTooLarge {
            depth: MAX_DEPTH + 1,
            max: MAX_DEPTH
        }
    );
    let max = usize::BITS.trailing_zeros();
    assert_eq!(
        Sbitmap::builder(8).shift(max + 1).build().unwrap_err(),
        SbitmapError::BadShift {
            shift: max + 1,
            max
        }
    );
    assert!(Sbitmap::builder(8).shift(max).build().is_ok());
    assert!(SbitmapQueue::new(0).is_err());
    // Every error explains itself.
    assert!(
        SbitmapError::ZeroDepth
            .to_string()
            .contains("at least one bit")
    );
}

#[test]
fn every_bit_is_handed_out_once_including_a_short_last_word() {
    for (depth, shift) in [(10, 2), (1, 0), (65, 6), (200, 3), (7, 6)] {
        let map = Sbitmap::builder(depth).shift(shift).build().unwrap();
        let hint = AllocHint::new(depth as u64);
        let bits = drain(&map, &hint);
        let unique: BTreeSet<usize> = bits.iter().copied().collect();
        assert_eq!(unique.len(), depth, "depth {depth} shift {shift}");
        assert!(unique.iter().all(|&b| b < depth));
        assert_eq!(map.weight(), depth);
        for &bit in &bits {
            map.put(bit, &hint).unwrap();
        }
        assert_eq!(map.weight(), 0);
        assert_eq!(drain(&map, &hint).len(), depth, "freed bits are reusable");
    }
}

#[test]
fn round_robin_hands_out_bits_in_order_and_wraps() {
    let map = Sbitmap::builder(8).round_robin(true).build().unwrap();
    let hint = AllocHint::at(0);
    assert_eq!(drain(&map, &hint), (0..8).collect::<Vec<_>>());
    map.put(2, &hint).unwrap();
    map.put(6, &hint).unwrap();
    // A full map reset the hint to 0; the next bits come in order from there.
    assert_eq!(map.get(&hint), Some(2));
    assert_eq!(map.get(&hint), Some(6));
    map.put(1, &hint).unwrap();
    map.put(3, &hint).unwrap();
    // Starting after 6, the search wraps to find 1 before 3.
    assert_eq!(map.get(&hint), Some(1));
    assert_eq!(map.get(&hint), Some(3));
    // Frees never move a round-robin hint.
    map.put(1, &hint).unwrap();
    assert_eq!(hint.value(), 4);
}

#[test]
fn round_robin_get_fails_only_when_full() {
    // Free bits below the hint in the hint's own word are still found.
    let map = Sbitmap::builder(16)
        .shift(3)
        .round_robin(true)
        .build()
        .unwrap();
    let hint = AllocHint::at(0);
    let all = drain(&map, &hint);
    assert_eq!(all.len(), 16);
    map.put(1, &hint).unwrap();
    let hint = AllocHint::at(5);
    assert_eq!(map.get(&hint), Some(1));
}

#[test]
fn put_points_the_hint_at_the_freed_bit() {
    let map = Sbitmap::new(256).unwrap();
    let hint = AllocHint::at(0);
    let bits = drain(&map, &hint);
    map.put(bits[200], &hint).unwrap();
    assert_eq!(hint.value() as usize, bits[200]);
    assert_eq!(map.get(&hint), Some(bits[200]));
}

/// A full word whose hinted bit waits to be cleared gives that bit back and leaves the
/// word's other frees pending: the hinted bit is taken straight from the pending mask.
#[test]
fn a_get_takes_its_hinted_free_back_and_leaves_the_other_frees_pending() {
    let map = Sbitmap::builder(8).shift(3).build().unwrap();
    let hint = AllocHint::at(0);
    assert_eq!(drain(&map, &hint).len(), 8);
    map.put(1, &hint).unwrap();
    map.put(5, &hint).unwrap();
    assert_eq!(hint.value(), 5);
    assert_eq!(map.get(&hint), Some(5));
    let text = map.dump().to_string();
    assert!(
        text.contains("word    0: bits=0xff cleared=0x02 busy=7"),
        "{text}"
    );
    // A hint on a bit that is not pending: the frees are moved in, and the lowest is taken.
    map.put(6, &hint).unwrap();
    assert_eq!(map.get(&AllocHint::at(0)), Some(1));
    let text = map.dump().to_string();
    assert!(
        text.contains("word    0: bits=0xbf cleared=0x00 busy=7"),
        "{text}"
    );
    assert_eq!(map.get(&hint), Some(6));
    assert_eq!(map.get(&hint), None);
}

#[test]
fn hints_from_different_seeds_start_on_different_words() {
    let map = Sbitmap::new(4096).unwrap();
    let words: BTreeSet<usize> = (0..16)
        .map(|cpu| map.get(&AllocHint::new(cpu)).unwrap() >> map.shift())
        .collect();
    assert!(words.len() >= 8, "16 CPUs landed on only {words:?}");
}

#[test]
fn spread_hints_give_each_cpu_its_own_word() {
    for (depth, cpus) in [(32, 4), (256, 4), (4096, 16), (4096, 64), (100, 3)] {
        let map = Sbitmap::new(depth).unwrap();
        let words: BTreeSet<usize> = (0..cpus)
            .map(|cpu| map.get(&AllocHint::spread(cpu, cpus)).unwrap() >> map.shift())
            .collect();
        assert_eq!(words.len(), cpus, "depth {depth}, {cpus} CPUs: {words:?}");
    }
    // More CPUs than words: they share, evenly.
    let map = Sbitmap::new(32).unwrap();
    let per_word: Vec<usize> = (0..8)
        .map(|cpu| AllocHint::spread(cpu, 8))
        .map(|hint| map.get(&hint).unwrap() >> map.shift())
        .collect();
    assert_eq!(per_word, vec![0, 0, 1, 1, 2, 2, 3, 3]);
    // Degenerate counts are tolerated.
    assert_eq!(AllocHint::spread(5, 0).value(), 0);
}

#[test]
fn a_hint_beyond_the_depth_is_reduced() {
    let map = Sbitmap::new(8).unwrap();
    let hint = AllocHint::at(1_000_003);
    let bit = map.get(&hint).unwrap();
    assert!(bit < 8);
    assert!((hint.value() as usize) < 8);
}

#[test]
fn shallow_gets_take_exactly_their_cap() {
    for depth in [1, 5, 8, 32, 100, 256, 1000] {
        for shallow in [1, 2, 3, 7, 16, 31, 64, 999] {
            let map = Sbitmap::new(depth).unwrap();
            let hint = AllocHint::new(7);
            let mut got = BTreeSet::new();
            while let Some(bit) = map.get_shallow(&hint, shallow) {
                assert!(got.insert(bit));
            }
            assert_eq!(
                got.len(),
                shallow.min(depth),
                "depth {depth} shallow {shallow}"
            );
            // Plain gets still reach the rest.
            assert_eq!(drain(&map, &hint).len(), depth - got.len());
        }
    }
    let map = Sbitmap::new(8).unwrap();
    assert_eq!(map.get_shallow(&AllocHint::new(0), 0), None);
}

#[test]
fn batches_come_from_one_word_and_go_back_in_one() {
    let map = Sbitmap::new(256).unwrap();
    let hint = AllocHint::new(3);
    let batch = map.get_batch(&hint, 8).unwrap();
    assert_eq!(batch.len(), 8);
    assert_eq!(batch.offset() % map.bits_per_word(), 0);
    for bit in batch.iter() {
        assert_eq!(map.test_bit(bit), Ok(true));
    }
    // More than a word's worth is clamped to a word.
    let big = map.get_batch(&hint, 1000).unwrap();
    assert!(big.len() <= map.bits_per_word());
    map.put_batch(batch, &hint).unwrap();
    map.put_batch(big, &hint).unwrap();
    assert_eq!(map.weight(), 0);
    // Round-robin maps do not batch.
    let rr = Sbitmap::builder(64).round_robin(true).build().unwrap();
    assert_eq!(rr.get_batch(&hint, 4), None);
    assert_eq!(map.get_batch(&hint, 0), None);
}

#[test]
fn batches_take_scattered_free_bits() {
    let map = Sbitmap::builder(16).shift(4).build().unwrap();
    let hint = AllocHint::at(0);
    let all = drain(&map, &hint);
    for bit in [1, 4, 9, 15] {
        map.put(all[bit], &hint).unwrap();
    }
    let batch = map.get_batch(&hint, 8).unwrap();
    assert_eq!(batch.iter().collect::<Vec<_>>(), vec![1, 4, 9, 15]);
    assert_eq!(map.get_batch(&hint, 8), None);
}

#[test]
fn bad_puts_are_reported_and_change_nothing() {
    let map = Sbitmap::new(64).unwrap();
    let hint = AllocHint::new(0);
    let bit = map.get(&hint).unwrap();
    assert_eq!(
        map.put(64, &hint),
        Err(SbitmapError::OutOfRange { bit: 64, depth: 64 })
    );
    let never = (bit + 1) % 64;
    assert_eq!(
        map.put(never, &hint),
        Err(SbitmapError::NotAllocated { bit: never })
    );
    map.put(bit, &hint).unwrap();
    // Double put while the first free is still deferred.
    assert_eq!(map.put(bit, &hint), Err(SbitmapError::NotAllocated { bit }));
    // Double put after the deferred clear went through.
    map.resize(64).unwrap(); // flushes deferred clears
    assert_eq!(map.put(bit, &hint), Err(SbitmapError::NotAllocated { bit }));
    assert_eq!(map.weight(), 0);
    assert_eq!(drain(&map, &hint).len(), 64);
}

#[test]
fn bad_batches_are_reported() {
    let map = Sbitmap::builder(40).shift(4).build().unwrap();
    let hint = AllocHint::at(0);
    let all = drain(&map, &hint);
    assert_eq!(all.len(), 40);
    let misaligned = BitBatch::new(3, 1);
    assert_eq!(
        map.put_batch(misaligned, &hint),
        Err(SbitmapError::BadBatch { offset: 3, mask: 1 })
    );
    // The last word has 8 bits: bit 8 of it does not exist.
    let past_end = BitBatch::new(32, 1 << 8);
    assert!(matches!(
        map.put_batch(past_end, &hint),
        Err(SbitmapError::BadBatch { .. })
    ));
    assert!(matches!(
        map.put_batch(BitBatch::new(48, 1), &hint),
        Err(SbitmapError::BadBatch { .. })
    ));
    map.put_batch(BitBatch::new(16, 0b11), &hint).unwrap();
    assert_eq!(
        map.put_batch(BitBatch::new(16, 0b110), &hint),
        Err(SbitmapError::NotAllocated { bit: 17 })
    );
    // Bit 17 was already freed: the batch fails whole, and bit 18 stays allocated.
    assert_eq!(map.weight(), 38);
    assert_eq!(map.test_bit(18), Ok(true));
    assert_eq!(map.put_batch(BitBatch::default(), &hint), Ok(()));
}

#[test]
fn resize_shrinks_and_grows_within_the_capacity() {
    let map = Sbitmap::new(64).unwrap();
    let hint = AllocHint::new(0);
    let held = drain(&map, &hint);
    map.resize(10).unwrap();
    assert_eq!(map.depth(), 10);
    assert_eq!(map.capacity(), 64);
    // Bits above the new depth are still held and can still be put.
    for &bit in &held {
        map.put(bit, &hint).unwrap();
    }
    assert_eq!(map.weight(), 0);
    let small = drain(&map, &hint);
    assert_eq!(small.len(), 10);
    assert!(small.iter().all(|&b| b < 10));
    map.resize(64).unwrap();
    assert_eq!(drain(&map, &hint).len(), 54);
    assert_eq!(map.resize(0), Err(SbitmapError::ZeroDepth));
    assert_eq!(
        map.resize(65),
        Err(SbitmapError::DepthTooLarge { depth: 65, max: 64 })
    );
}

#[test]
fn iteration_visits_allocated_bits_from_start_and_can_stop() {
    let map = Sbitmap::builder(100).round_robin(true).build().unwrap();
    let hint = AllocHint::at(0);
    let all = drain(&map, &hint);
    for &bit in &all {
        if bit % 3 != 0 {
            map.put(bit, &hint).unwrap();
        }
    }
    let mut seen = Vec::new();
    map.for_each_set(50, |bit| {
        seen.push(bit);
        true
    });
    let expected: Vec<usize> = (51..100)
        .chain(0..51)
        .filter(|b| b % 3 == 0)
        .collect::<Vec<_>>();
    let mut expected_from_50: Vec<usize> = expected.clone();
    expected_from_50.sort_by_key(|&b| (b < 50, b));
    assert_eq!(seen, expected_from_50);
    let mut first_two = Vec::new();
    map.for_each_set(0, |bit| {
        first_two.push(bit);
        first_two.len() < 2
    });
    assert_eq!(first_two, vec![0, 3]);
    assert!(map.any_bit_set());
    assert_eq!(map.test_bit(99), Ok(true));
    assert_eq!(map.test_bit(98), Ok(false));
}

#[test]
fn dump_shows_words_and_pending_frees() {
    let map = Sbitmap::builder(16).shift(3).build().unwrap();
    let hint = AllocHint::at(0);
    let a = map.get(&hint).unwrap();
    let b = map.get(&hint).unwrap();
    map.put(a, &hint).unwrap();
    let text = map.dump().to_string();
    assert!(text.contains("depth=16 capacity=16 busy=1 bits_per_word=8 words=2"));
    assert!(
        text.contains("word    0: bits=0x03 cleared=0x01 busy=1"),
        "{text}"
    );
    let _ = b;
}

#[test]
fn wake_batch_follows_depth_users_and_shallow_minimum() {
    let cases = [(1, 1), (8, 1), (16, 2), (63, 7), (64, 8), (4096, 8)];
    for (depth, batch) in cases {
        let q: SbitmapQueue = SbitmapQueue::new(depth).unwrap();
        assert_eq!(q.wake_batch(), batch, "depth {depth}");
    }
    let q = Sbitmap::builder(256)
        .min_shallow_depth(12)
        .build_queue()
        .unwrap();
    assert_eq!(q.wake_batch(), 1);
    q.recalculate_wake_batch(0);
    assert_eq!(q.wake_batch(), 1);
    let q: SbitmapQueue = SbitmapQueue::new(256).unwrap();
    q.recalculate_wake_batch(4);
    assert_eq!(q.wake_batch(), 8);
    q.recalculate_wake_batch(32);
    assert_eq!(q.wake_batch(), 1);
}

#[test]
fn shallow_below_the_declared_minimum_is_refused() {
    let q: SbitmapQueue = SbitmapQueue::new(64).unwrap();
    let hint = AllocHint::new(0);
    assert_eq!(
        q.get_shallow(&hint, 8),
        Err(SbitmapError::ShallowBelowMinimum {
            shallow_depth: 8,
            min_shallow_depth: usize::MAX
        })
    );
    // A cap at or above the depth is no cap.
    assert!(q.get_shallow(&hint, 64).unwrap().is_some());
    q.set_min_shallow_depth(8);
    assert!(q.get_shallow(&hint, 8).unwrap().is_some());
    assert!(q.shallow_waiter(&hint, 7).is_err());
    assert!(q.shallow_waiter(&hint, 8).is_ok());
}

#[test]
fn a_batch_of_frees_wakes_a_batch_of_waiters() {
    // Depth 64: wake batch 8. Ten waiters; eight frees wake eight of them.
    let q: SbitmapQueue = SbitmapQueue::new(64).unwrap();
    let hint = AllocHint::at(0);
    let held: Vec<usize> = std::iter::from_fn(|| q.get(&hint)).collect();
    let hints: Vec<AllocHint> = (0..10).map(AllocHint::new).collect();
    let mut waiters: Vec<_> = hints.iter().map(|h| q.waiter(h)).collect();
    let wakers: Vec<_> = (0..10).map(|_| counting_waker()).collect();
    for (w, (_, waker)) in waiters.iter_mut().zip(&wakers) {
        assert!(w.poll_get(&mut Context::from_waker(waker)).is_pending());
    }
    assert_eq!(q.waiters(), 10);
    for &bit in &held[..7] {
        q.put(bit, &hint).unwrap();
    }
    let woken = || {
        wakers
            .iter()
            .filter(|(c, _)| c.0.load(Ordering::SeqCst) > 0)
            .count()
    };
    assert_eq!(woken(), 0, "seven frees are less than a batch");
    q.put(held[7], &hint).unwrap();
    assert_eq!(woken(), 8);
    // The woken waiters take the eight free bits.
    let mut got = BTreeSet::new();
    for (w, (count, waker)) in waiters.iter_mut().zip(&wakers) {
        if count.0.load(Ordering::SeqCst) > 0 {
            match w.poll_get(&mut Context::from_waker(waker)) {
                Poll::Ready(bit) => assert!(got.insert(bit)),
                Poll::Pending => panic!("a woken waiter found no bit"),
            }
        }
    }
    assert_eq!(got, held[..8].iter().copied().collect());
    assert_eq!(q.waiters(), 2);
    drop(waiters);
    assert_eq!(q.waiters(), 0);
}

/// Waiters woken by freeing the bits of `word` (of a map of depth 64, wake batch 8, 16 bits
/// a word) with every bit held and 20 waiters: by one `put_batch`, or by single puts.
fn woken_by_freeing_a_word(batched: bool) -> usize {
    let q: SbitmapQueue = SbitmapQueue::new(64).unwrap();
    let hint = AllocHint::at(0);
    let held: Vec<usize> = std::iter::from_fn(|| q.get(&hint)).collect();
    assert_eq!((held.len(), q.bits_per_word(), q.wake_batch()), (64, 16, 8));
    let hints: Vec<AllocHint> = (0..20).map(AllocHint::new).collect();
    let mut waiters: Vec<_> = hints.iter().map(|h| q.waiter(h)).collect();
    let wakers: Vec<_> = (0..20).map(|_| counting_waker()).collect();
    for (w, (_, waker)) in waiters.iter_mut().zip(&wakers) {
        assert!(w.poll_get(&mut Context::from_waker(waker)).is_pending());
    }
    if batched {
        q.put_batch(BitBatch::new(16, 0xffff), &hint).unwrap();
    } else {
        for bit in 16..32 {
            q.put(bit, &hint).unwrap();
        }
    }
    wakers
        .iter()
        .filter(|(c, _)| c.0.load(Ordering::SeqCst) > 0)
        .count()
}

#[test]
fn a_batched_put_wakes_as_many_as_the_same_single_puts() {
    // Sixteen frees are two wake batches: sixteen waiters, however the bits come back.
    assert_eq!(woken_by_freeing_a_word(false), 16);
    assert_eq!(woken_by_freeing_a_word(true), 16);
}

#[test]
fn wake_ups_rotate_over_the_wait_queues() {
    let q: SbitmapQueue = SbitmapQueue::new(8).unwrap(); // wake batch 1
    let hint = AllocHint::at(0);
    let held: Vec<usize> = std::iter::from_fn(|| q.get(&hint)).collect();
    let hints: Vec<AllocHint> = (0..WAIT_QUEUES as u64).map(AllocHint::new).collect();
    let mut waiters: Vec<_> = hints.iter().map(|h| q.waiter(h)).collect();
    let wakers: Vec<_> = (0..WAIT_QUEUES).map(|_| counting_waker()).collect();
    for (w, (_, waker)) in waiters.iter_mut().zip(&wakers) {
        assert!(w.poll_get(&mut Context::from_waker(waker)).is_pending());
    }
    // Registrations went round-robin, one per wait queue; each free wakes the next queue.
    for (i, &bit) in held.iter().enumerate() {
        q.put(bit, &hint).unwrap();
        assert_eq!(wakers[i].0.0.load(Ordering::SeqCst), 1, "free {i}");
    }
}

#[test]
fn wake_all_wakes_every_registered_waiter() {
    let q: SbitmapQueue = SbitmapQueue::new(2).unwrap();
    let hint = AllocHint::at(0);
    let _held: Vec<usize> = std::iter::from_fn(|| q.get(&hint)).collect();
    let hints: Vec<AllocHint> = (0..20).map(AllocHint::new).collect();
    let mut waiters: Vec<_> = hints.iter().map(|h| q.waiter(h)).collect();
    let (count, waker) = counting_waker();
    for w in waiters.iter_mut() {
        assert!(w.poll_get(&mut Context::from_waker(&waker)).is_pending());
    }
    q.wake_all();
    assert_eq!(count.0.load(Ordering::SeqCst), 20);
    assert!(q.dump().to_string().contains("ws_active=20"));
}

#[test]
fn a_dropped_waiter_leaves_no_registration() {
    let q: SbitmapQueue = SbitmapQueue::new(1).unwrap();
    let hint = AllocHint::at(0);
    let held = q.get(&hint).unwrap();
    let (count, waker) = counting_waker();
    {
        let mut w = q.waiter(&hint);
        assert!(w.poll_get(&mut Context::from_waker(&waker)).is_pending());
        assert_eq!(q.waiters(), 1);
    }
    assert_eq!(q.waiters(), 0);
    q.put(held, &hint).unwrap();
    assert_eq!(count.0.load(Ordering::SeqCst), 0, "a stale waker was woken");
    assert!(!q.dump().to_string().contains("1 waiting"));
}

#[test]
fn a_woken_then_dropped_waiter_hands_its_wakeup_on() {
    let q: SbitmapQueue = SbitmapQueue::new(1).unwrap();
    let hint = AllocHint::at(0);
    let held = q.get(&hint).unwrap();
    let (first_count, first) = counting_waker();
    let (second_count, second) = counting_waker();
    let mut w1 = q.waiter(&hint);
    let mut w2 = q.waiter(&hint);
    assert!(w1.poll_get(&mut Context::from_waker(&first)).is_pending());
    assert!(w2.poll_get(&mut Context::from_waker(&second)).is_pending());
    q.put(held, &hint).unwrap();
    assert_eq!(first_count.0.load(Ordering::SeqCst), 1);
    assert_eq!(second_count.0.load(Ordering::SeqCst), 0);
    drop(w1);
    assert_eq!(second_count.0.load(Ordering::SeqCst), 1);
    assert_eq!(
        w2.poll_get(&mut Context::from_waker(&second)),
        Poll::Ready(held)
    );
}

#[test]
fn a_repolled_waiter_updates_its_waker() {
    let q: SbitmapQueue = SbitmapQueue::new(1).unwrap();
    let hint = AllocHint::at(0);
    let held = q.get(&hint).unwrap();
    let (old_count, old) = counting_waker();
    let (new_count, new) = counting_waker();
    let mut w = q.waiter(&hint);
    assert!(w.poll_get(&mut Context::from_waker(&old)).is_pending());
    assert!(w.poll_get(&mut Context::from_waker(&new)).is_pending());
    assert_eq!(q.waiters(), 1);
    q.put(held, &hint).unwrap();
    assert_eq!(old_count.0.load(Ordering::SeqCst), 0);
    assert_eq!(new_count.0.load(Ordering::SeqCst), 1);
}

#[test]
fn queue_batches_wake_waiters_too() {
    let q = Sbitmap::builder(8).shift(3).build_queue().unwrap();
    let hint = AllocHint::at(0);
    let batch = q.get_batch(&hint, 8).unwrap();
    assert_eq!(batch.len(), 8);
    let (count, waker) = counting_waker();
    let mut w = q.waiter(&hint);
    assert!(w.poll_get(&mut Context::from_waker(&waker)).is_pending());
    q.put_batch(batch, &hint).unwrap();
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    assert!(matches!(
        w.poll_get(&mut Context::from_waker(&waker)),
        Poll::Ready(_)
    ));
}

#[test]
fn resizing_a_queue_wakes_its_waiters() {
    let q: SbitmapQueue = SbitmapQueue::new(16).unwrap();
    let hint = AllocHint::at(0);
    q.resize(1).unwrap();
    let held = q.get(&hint).unwrap();
    let (count, waker) = counting_waker();
    let mut w = q.waiter(&hint);
    assert!(w.poll_get(&mut Context::from_waker(&waker)).is_pending());
    q.resize(16).unwrap();
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    assert!(matches!(
        w.poll_get(&mut Context::from_waker(&waker)),
        Poll::Ready(bit) if bit != held
    ));
}

/// Real threads hammering a small map: no bit is ever held twice, and nothing leaks.
#[test]
fn threads_never_share_a_bit() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 200_000;
    let map = Arc::new(Sbitmap::new(8).unwrap());
    let owned: Arc<Vec<AtomicBool>> = Arc::new((0..8).map(|_| AtomicBool::new(false)).collect());
    let start = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (map, owned, start) = (map.clone(), owned.clone(), start.clone());
            std::thread::spawn(move || {
                let hint = AllocHint::new(t as u64);
                start.wait();
                let mut got = 0;
                for _ in 0..ROUNDS {
                    if let Some(bit) = map.get(&hint) {
                        assert!(!owned[bit].swap(true, Ordering::AcqRel));
                        owned[bit].store(false, Ordering::Release);
                        map.put(bit, &hint).unwrap();
                        got += 1;
                    }
                }
                got
            })
        })
        .collect();
    let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(total > 0);
    assert_eq!(map.weight(), 0);
    assert_eq!(drain(&map, &AllocHint::new(0)).len(), 8);
}

/// Real threads blocking on a one-bit queue: every thread gets the bit its turn, nobody hangs.
#[test]
fn blocking_gets_all_complete() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 2_000;
    let q: Arc<SbitmapQueue> = Arc::new(SbitmapQueue::new(2).unwrap());
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let q = q.clone();
            std::thread::spawn(move || {
                let hint = AllocHint::new(t as u64);
                for _ in 0..ROUNDS {
                    let bit = q.get_blocking(&hint);
                    q.put(bit, &hint).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(q.weight(), 0);
    assert_eq!(q.waiters(), 0);
}
