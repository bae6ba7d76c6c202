//! Loom models of the bitmap's lock-free protocols.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p blkmq-sbitmap --release --test loom`.
//! Each model is small (one or two words, two or three threads) so that loom can explore every
//! interleaving within a bounded number of preemptions in seconds.
//!
//! A lost wake-up shows up as loom's "deadlock" failure: a thread blocked in
//! `loom::future::block_on` that nothing will ever wake.

#![cfg(loom)]

use blkmq_sbitmap::{AllocHint, Sbitmap, SbitmapQueue};
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;

fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bounded(3, f);
}

/// [`model`] with at most `bound` preemptions (unless `LOOM_MAX_PREEMPTIONS` says otherwise).
fn model_bounded(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(bound);
    }
    builder.check(f);
}

/// Takes every bit of `map`, in order of allocation.
fn take_all(map: &Sbitmap, hint: &AllocHint) -> Vec<usize> {
    core::iter::from_fn(|| map.get(hint)).collect()
}

/// (a) Two threads getting and putting never hold the same bit, whether the bits share a word
/// (shift 1) or not (shift 0).
#[test]
fn a_get_put_exclusive() {
    for shift in [0, 1] {
        model(move || {
            let map = Arc::new(Sbitmap::builder(2).shift(shift).build().unwrap());
            let owned = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
            let threads: Vec<_> = (0..2)
                .map(|t| {
                    let (map, owned) = (map.clone(), owned.clone());
                    thread::spawn(move || {
                        let hint = AllocHint::new(t);
                        for _ in 0..2 {
                            if let Some(bit) = map.get(&hint) {
                                assert!(
                                    !owned[bit].swap(true, Ordering::Relaxed),
                                    "bit {bit} twice"
                                );
                                owned[bit].store(false, Ordering::Relaxed);
                                map.put(bit, &hint).unwrap();
                            }
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(map.weight(), 0);
            assert_eq!(take_all(&map, &AllocHint::new(0)).len(), 2);
        });
    }
}

/// (b) A deferred clear racing a get and a put loses no bit: bit 1 waits in the deferred mask,
/// one thread frees bit 0 while another allocates (and so clears the word).
#[test]
fn b_deferred_clear_loses_no_bit() {
    model(|| {
        let map = Arc::new(Sbitmap::builder(2).shift(1).build().unwrap());
        let hint = AllocHint::at(0);
        assert_eq!(take_all(&map, &hint), vec![0, 1]);
        map.put(1, &hint).unwrap(); // pending in `cleared`
        let putter = {
            let map = map.clone();
            thread::spawn(move || map.put(0, &AllocHint::at(0)).unwrap())
        };
        let getter = {
            let map = map.clone();
            thread::spawn(move || map.get(&AllocHint::at(0)))
        };
        putter.join().unwrap();
        let got = getter.join().unwrap();
        assert!(got.is_some(), "bit 1 was free before the race began");
        // Whatever the getter took, exactly the other bit is free now.
        assert_eq!(map.weight(), 1);
        let rest = take_all(&map, &AllocHint::at(0));
        assert_eq!(rest.len(), 1);
        assert_ne!(Some(rest[0]), got);
    });
}

/// (c) No lost wake-up: a waiter that registers while the map is full is always woken by the
/// free that follows.
#[test]
fn c_waiter_woken_by_put() {
    model(|| {
        let queue: Arc<SbitmapQueue> = Arc::new(SbitmapQueue::new(1).unwrap());
        let hint = AllocHint::at(0);
        let held = queue.get(&hint).unwrap();
        let waiter = {
            let queue = queue.clone();
            thread::spawn(move || {
                let hint = AllocHint::at(0);
                let bit = loom::future::block_on(queue.get_async(&hint));
                queue.put(bit, &hint).unwrap();
            })
        };
        queue.put(held, &hint).unwrap();
        waiter.join().unwrap();
        assert_eq!(queue.waiters(), 0);
        assert_eq!(queue.weight(), 0);
    });
}

/// (c) The 2024 hang: a deferred clear in progress on the only word, and the last waiter
/// looking at it. Both bits wait in the deferred mask; one thread allocates (moving them into
/// the word) while another must find the second bit, through the swap lock, or be woken.
/// Nobody frees anything after the race starts, so a miss is a hang.
#[test]
fn c_deferred_clear_racing_last_waiter() {
    model(|| {
        let queue: Arc<SbitmapQueue> = Arc::new(
            blkmq_sbitmap::Sbitmap::builder(2)
                .shift(1)
                .build_queue()
                .unwrap(),
        );
        let hint = AllocHint::at(0);
        let a = queue.get(&hint).unwrap();
        let b = queue.get(&hint).unwrap();
        queue.put(a, &hint).unwrap();
        queue.put(b, &hint).unwrap();
        let getter = {
            let queue = queue.clone();
            thread::spawn(move || queue.get(&AllocHint::at(0)))
        };
        let waiter = {
            let queue = queue.clone();
            thread::spawn(move || loom::future::block_on(queue.get_async(&AllocHint::at(0))))
        };
        let got = getter.join().unwrap();
        let waited = waiter.join().unwrap();
        assert!(got.is_some());
        assert_ne!(got, Some(waited));
        assert_eq!(queue.weight(), 2);
    });
}

/// (d) Batched wake-ups: with a wake batch of 2, two waiters on a full map are both woken once
/// two batches' worth of bits are freed, wherever their registrations fall among the frees.
///
/// (One batch is not always enough, by design: a free counts towards a wake-up only while
/// someone waits, so a free that lands before the second waiter registers may be taken by the
/// first waiter's retry, and the second then waits for a full batch of later frees. Bits
/// still in flight supply them: the batch is at most an eighth of the depth.)
#[test]
fn d_batch_wakes_all_waiters() {
    model(|| {
        // Depth 16 gives a wake batch of 2; two words of 8 bits keep the model small.
        let queue: Arc<SbitmapQueue> = Arc::new(
            blkmq_sbitmap::Sbitmap::builder(16)
                .shift(3)
                .build_queue()
                .unwrap(),
        );
        assert_eq!(queue.wake_batch(), 2);
        let hint = AllocHint::at(0);
        let held: Vec<usize> = core::iter::from_fn(|| queue.get(&hint)).collect();
        assert_eq!(held.len(), 16);
        let waiters: Vec<_> = (0..2)
            .map(|t| {
                let queue = queue.clone();
                thread::spawn(move || loom::future::block_on(queue.get_async(&AllocHint::new(t))))
            })
            .collect();
        let freed = [held[3], held[12], held[5], held[9]];
        for bit in freed {
            queue.put(bit, &hint).unwrap();
        }
        let got: Vec<usize> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
        assert_ne!(got[0], got[1]);
        assert!(got.iter().all(|bit| freed.contains(bit)));
        assert_eq!(queue.waiters(), 0);
        assert_eq!(queue.weight(), 12 + 2);
    });
}

/// (e) A batched put counts as that many single puts: with a wake batch of 1, one
/// `put_batch` of two bits wakes both waiters, wherever their registrations fall. (Counted
/// as one batch, the put would wake one, and with nothing else freed the other would hang.)
///
/// Two preemptions find that hang; the model's three threads and eight wait queues take
/// minutes to explore under three, seconds under two.
#[test]
fn e_batched_put_wakes_as_single_puts() {
    model_bounded(2, || {
        // Depth 8 gives a wake batch of 1; words of 4 bits.
        let queue: Arc<SbitmapQueue> = Arc::new(
            blkmq_sbitmap::Sbitmap::builder(8)
                .shift(2)
                .build_queue()
                .unwrap(),
        );
        assert_eq!(queue.wake_batch(), 1);
        let hint = AllocHint::at(0);
        let held: Vec<usize> = core::iter::from_fn(|| queue.get(&hint)).collect();
        assert_eq!(held.len(), 8);
        let waiters: Vec<_> = (0..2)
            .map(|t| {
                let queue = queue.clone();
                thread::spawn(move || loom::future::block_on(queue.get_async(&AllocHint::new(t))))
            })
            .collect();
        queue
            .put_batch(blkmq_sbitmap::BitBatch::new(4, 0b0101), &hint)
            .unwrap();
        let got: Vec<usize> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
        assert_ne!(got[0], got[1]);
        assert!(got.iter().all(|bit| [4, 6].contains(bit)));
        assert_eq!(queue.waiters(), 0);
        assert_eq!(queue.weight(), 8);
    });
}

/// A waiter that is woken and then dropped before it takes the bit passes the wake-up on, so
/// the other waiter still gets the freed bit.
#[test]
fn dropped_woken_waiter_passes_wakeup_on() {
    use core::task::{Context, Waker};

    model(|| {
        let queue: Arc<SbitmapQueue> = Arc::new(SbitmapQueue::new(1).unwrap());
        let hint = AllocHint::at(0);
        let held = queue.get(&hint).unwrap();

        // A waiter registered with a no-op waker, abandoned after the put.
        let quitter_hint = AllocHint::at(0);
        let mut quitter = queue.waiter(&quitter_hint);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(quitter.poll_get(&mut cx).is_pending());

        let stayer = {
            let queue = queue.clone();
            thread::spawn(move || loom::future::block_on(queue.get_async(&AllocHint::at(0))))
        };
        queue.put(held, &hint).unwrap();
        drop(quitter);
        assert_eq!(stayer.join().unwrap(), 0);
    });
}

/// (f) A get whose hint names a freed bit takes it back straight from the pending mask while
/// another get of the same word moves the pending mask in: no bit goes to two owners, none
/// is lost, and a bit's new owner sees what its last owner wrote before the put.
#[test]
fn f_hinted_take_races_deferred_clear() {
    use loom::cell::UnsafeCell;

    model(|| {
        // One word of four bits, all held; bit 2 already waits in the pending mask.
        let map = Arc::new(Sbitmap::builder(4).shift(2).build().unwrap());
        let data: Arc<[UnsafeCell<u32>; 4]> =
            Arc::new(core::array::from_fn(|_| UnsafeCell::new(0)));
        let hint = AllocHint::at(0);
        assert_eq!(take_all(&map, &hint), vec![0, 1, 2, 3]);
        // SAFETY: bit 2 is held here, and no other thread runs yet.
        data[2].with_mut(|d| unsafe { *d = 12 });
        map.put(2, &hint).unwrap();
        let freer = {
            let (map, data) = (map.clone(), data.clone());
            thread::spawn(move || {
                // SAFETY: bit 1 is this thread's until the put.
                data[1].with_mut(|d| unsafe { *d = 11 });
                map.put(1, &AllocHint::at(0)).unwrap();
            })
        };
        let getters: Vec<_> = [1, 3]
            .into_iter()
            .map(|at| {
                let (map, data) = (map.clone(), data.clone());
                thread::spawn(move || {
                    let bit = map.get(&AllocHint::at(at))?;
                    // The bit's last owner wrote 10 + bit before freeing it; a missing
                    // happens-before is a data race loom reports here.
                    // SAFETY: the get made `bit` this thread's.
                    let seen = data[bit].with(|d| unsafe { *d });
                    assert_eq!(seen, 10 + bit as u32, "bit {bit}");
                    Some(bit)
                })
            })
            .collect();
        freer.join().unwrap();
        let got: Vec<usize> = getters
            .into_iter()
            .filter_map(|g| g.join().unwrap())
            .collect();
        assert!(!got.is_empty(), "bit 2 was free before the race began");
        assert!(got.iter().all(|bit| [1, 2].contains(bit)), "{got:?}");
        if got.len() == 2 {
            assert_ne!(got[0], got[1]);
        }
        // Bits 0 and 3 stay held; of the two freed, the ones not taken are free now.
        assert_eq!(map.weight(), 2 + got.len());
        assert_eq!(take_all(&map, &AllocHint::at(0)).len(), 2 - got.len());
    });
}
