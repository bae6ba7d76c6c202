//! The driver's I/O path, from submission to the end of the bio, through the real engine.
//!
//! Run with `cargo bench -p blkmq-example-driver`.
//!
//! * `memdisk/write_then_interrupt`: one 4 KiB write submitted and its interrupt served,
//!   on one thread: the whole path of one I/O with no waiting in it.
//! * `memdisk/32_writes_one_interrupt`: 32 writes on the device, then one interrupt ending
//!   them in a batch, as interrupt coalescing would (per batch).

use std::hint::black_box;
use std::sync::Arc;

use blkmq_core::{Bio, Host, Op, QueueConfig, QueueLimits, RequestQueue, StdPlatform, TagSet};
use blkmq_example_driver::MemDisk;
use criterion::Criterion;

const SECTORS: usize = 1 << 16;

type Disk = MemDisk<StdPlatform>;

/// A host over a disk of `depth` commands and as many tags, and one queue.
fn world(depth: usize) -> (Arc<Host<Disk>>, Arc<RequestQueue<Disk>>) {
    let platform = StdPlatform::with_cpus(1);
    let host = Host::new(
        TagSet::builder(depth),
        platform,
        MemDisk::new(SECTORS, depth),
    )
    .unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(SECTORS as u64)))
        .unwrap();
    (host, queue)
}

fn io_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("memdisk");

    let (host, queue) = world(64);
    let mut sector = 0;
    group.bench_function("write_then_interrupt", |b| {
        b.iter(|| {
            sector = (sector + 8) % SECTORS as u64;
            queue
                .submit(Bio::new(Op::Write, black_box(sector), 8).payload(sector))
                .unwrap();
            black_box(host.driver().interrupt(&queue))
        })
    });

    let (host, queue) = world(64);
    group.bench_function("32_writes_one_interrupt", |b| {
        b.iter(|| {
            for i in 0..32u64 {
                queue
                    .submit(Bio::new(Op::Write, black_box(i * 64), 8).payload(i))
                    .unwrap();
            }
            black_box(host.driver().interrupt(&queue))
        })
    });

    group.finish();
    assert_eq!(host.in_driver(), 0);
}

fn main() {
    // What `criterion_group!` and `criterion_main!` expand to, less the undocumented `pub fn`.
    let mut c = Criterion::default().configure_from_args();
    io_path(&mut c);
    c.final_summary();
}
