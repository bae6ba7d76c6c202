//! A tag pool under load: the job a block layer gives its scalable bitmap.
//!
//! Several submitter threads (standing in for CPUs) each keep a window of requests in flight
//! against a device with fewer tags than the submitters want in total, so tags run out. A
//! submitter that finds no free tag first completes its own oldest request, as a driver reaps
//! completions; only a submitter with nothing in flight sleeps until another frees a tag. Every tag is checked to be held by one request at a time, and the run
//! prints, for the `blkmq` tag queue and for a mutex-protected free list side by side,
//! the throughput and how often a submitter had to wait.
//!
//! ```text
//! cargo run --release --example tag_pool [-- THREADS DEPTH OPS_PER_THREAD]
//! ```

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use blkmq::sbitmap::{AllocHint, SbitmapQueue};

/// What the workload needs from a tag allocator.
trait TagPool: Send + Sync {
    /// Takes a free tag, or `None` at once when there is none.
    fn try_get(&self, cpu: usize) -> Option<usize>;
    /// Takes a tag, sleeping until one is free.
    fn get_waiting(&self, cpu: usize) -> usize;
    fn put(&self, tag: usize, cpu: usize);
}

/// blkmq's tag queue with one allocation hint per CPU.
struct Blkmq {
    tags: SbitmapQueue,
    hints: Vec<crossbeam_utils::CachePadded<AllocHint>>,
}

impl TagPool for Blkmq {
    fn try_get(&self, cpu: usize) -> Option<usize> {
        self.tags.get(&self.hints[cpu])
    }

    fn get_waiting(&self, cpu: usize) -> usize {
        self.tags.get_blocking(&self.hints[cpu])
    }

    fn put(&self, tag: usize, cpu: usize) {
        self.tags.put(tag, &self.hints[cpu]).expect("tag held once");
    }
}

/// The obvious alternative: a free list under a mutex, with a condition variable to wait on.
struct MutexPool {
    free: Mutex<VecDeque<usize>>,
    freed: Condvar,
}

impl TagPool for MutexPool {
    fn try_get(&self, _cpu: usize) -> Option<usize> {
        self.free.lock().unwrap().pop_front()
    }

    fn get_waiting(&self, _cpu: usize) -> usize {
        let mut free = self.free.lock().unwrap();
        loop {
            if let Some(tag) = free.pop_front() {
                return tag;
            }
            free = self.freed.wait(free).unwrap();
        }
    }

    fn put(&self, tag: usize, _cpu: usize) {
        self.free.lock().unwrap().push_back(tag);
        self.freed.notify_one();
    }
}

struct Outcome {
    elapsed: Duration,
    waits: u64,
}

/// Each thread keeps up to `window` tags in flight, completing the oldest before taking
/// another.
fn run(pool: Arc<dyn TagPool>, depth: usize, threads: usize, window: usize, ops: u64) -> Outcome {
    let held: Arc<Vec<AtomicBool>> = Arc::new((0..depth).map(|_| AtomicBool::new(false)).collect());
    let waits = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|cpu| {
            let (pool, held, waits, start) =
                (pool.clone(), held.clone(), waits.clone(), start.clone());
            std::thread::spawn(move || {
                let mut in_flight: VecDeque<usize> = VecDeque::with_capacity(window);
                let mut my_waits = 0;
                start.wait();
                for _ in 0..ops {
                    if in_flight.len() == window {
                        let tag = in_flight.pop_front().unwrap();
                        held[tag].store(false, Ordering::Release);
                        pool.put(tag, cpu);
                    }
                    let tag = loop {
                        if let Some(tag) = pool.try_get(cpu) {
                            break tag;
                        }
                        // No free tag: reap our oldest request, or sleep if we hold none.
                        match in_flight.pop_front() {
                            Some(tag) => {
                                held[tag].store(false, Ordering::Release);
                                pool.put(tag, cpu);
                            }
                            None => {
                                my_waits += 1;
                                break pool.get_waiting(cpu);
                            }
                        }
                    };
                    assert!(
                        !held[tag].swap(true, Ordering::AcqRel),
                        "tag {tag} held twice"
                    );
                    in_flight.push_back(tag);
                }
                for tag in in_flight {
                    held[tag].store(false, Ordering::Release);
                    pool.put(tag, cpu);
                }
                waits.fetch_add(my_waits, Ordering::Relaxed);
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    for w in workers {
        w.join().unwrap();
    }
    let elapsed = began.elapsed();
    assert!(
        held.iter().all(|h| !h.load(Ordering::Acquire)),
        "a tag leaked"
    );
    Outcome {
        elapsed,
        waits: waits.load(Ordering::Relaxed),
    }
}

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .map(|a| a.parse().expect("arguments are numbers"))
        .unwrap_or(default)
}

fn main() {
    let threads = arg(1, 4);
    let depth = arg(2, 64);
    let ops = arg(3, 500_000) as u64;
    // Together the submitters want 1.5x the tags there are, so some always wait.
    let window = (depth * 3 / 2).div_ceil(threads).max(1);
    println!(
        "{threads} submitters x {window} requests in flight, {depth} tags, {ops} requests each"
    );
    println!(
        "{:<22} {:>12} {:>14} {:>10}",
        "allocator", "Mreq/s", "ns/req/thread", "sleeps"
    );

    let blkmq = Arc::new(Blkmq {
        tags: SbitmapQueue::new(depth).expect("a valid depth"),
        hints: (0..threads as u64)
            .map(|cpu| crossbeam_utils::CachePadded::new(AllocHint::new(cpu)))
            .collect(),
    });
    let mutex = Arc::new(MutexPool {
        free: Mutex::new((0..depth).collect()),
        freed: Condvar::new(),
    });
    let pools: [(&str, Arc<dyn TagPool>); 2] = [
        ("blkmq SbitmapQueue", blkmq.clone()),
        ("Mutex<VecDeque>+Condvar", mutex),
    ];
    for (name, pool) in pools {
        let out = run(pool, depth, threads, window, ops);
        let total = ops as f64 * threads as f64;
        println!(
            "{:<22} {:>12.2} {:>14.1} {:>10}",
            name,
            total / out.elapsed.as_secs_f64() / 1e6,
            out.elapsed.as_nanos() as f64 / ops as f64,
            out.waits
        );
    }
    assert_eq!(blkmq.tags.weight(), 0);
    assert_eq!(blkmq.tags.waiters(), 0);
    println!("every tag was held by one request at a time; none leaked");
}
