//! An MMC/SD host driver on blkmq, run against the simulated SD card of seed 000 (an MMC
//! card moved to blk-mq without a scheduler: `dd` 21.4 -> 16.9 MB/s, `find` 3.60 -> 4.42 s,
//! iozone never faster).
//!
//! ```text
//! cargo run --release --example mmc_host            # the seed's scale, on one screen
//! cargo run --release --example mmc_host -- --full  # every table
//! cargo run --release --example mmc_host -- --svg DIR  # and pictures in DIR
//! cargo run --release --example mmc_host -- small   # the test's: dd of 64 MiB, fewer records
//! cargo run --release --example mmc_host -- --thread-wake-us=40  # another queue thread
//! ```
//!
//! The driver (`MmcHost` in `mmc_host/driver.rs`) has one hardware queue of depth 2: the
//! card runs one command while the host prepares the next (DMA mapping, command set-up).
//! `queue_rq` starts a command on an idle card, prepares it behind a running one, and
//! answers `Status::Resource` when both slots are taken. The card's interrupt finishes the
//! command, starts the prepared one and ends the finished request, which frees its tag and
//! reruns the queue: the driver takes requests when the queue hands them over and never
//! looks for work itself. It has no thread: Linux's legacy path (and the naive switch to
//! blk-mq) took every request and started every command from the queue thread `mmcqd`,
//! which had to wake each time. The queue limits are an sdhci host's: 512 KiB per
//! request, 128 segments of at most 64 KiB.
//!
//! # Reading the output
//!
//! By default the report fits one screen: `dd` and `find` of every set-up (the seed's
//! BEFORE and AFTER, the model's BEFORE, the simulated columns), each against the seed's
//! BEFORE and AFTER; a line of iozone per set-up, each test's geometric mean over its
//! record sizes against the seed's BEFORE; the responsiveness table (5. below); and a line
//! per check of 3. and 4. that failed, or that all hold. `--full` prints every table, in
//! five sections:
//!
//! 1. The seed's figures, parsed from its text and printed back in its formats: BEFORE
//!    (Linux 4.9-rc2's legacy MMC path) and AFTER (the naive switch to blk-mq).
//! 2. The simulated columns side by side, in the same formats, then what each driver did
//!    over the three runs. `naive` is the AFTER set-up: no merging (the bios of `dd` and
//!    `find` carry `NOMERGE`, so a plug merges nothing, every `dd` refill after the first is
//!    a single bio, and each of `find`'s readahead bursts is 32 requests), one tag, and a
//!    driver whose thread handles one request at a time, preparing it only once the
//!    previous one is done. `none`, `mq-deadline` and `bfq` run the driver above
//!    with no scheduler, mq-deadline and BFQ (each scheduler holding 128 requests, as
//!    Linux's MMC queue of depth 64 gives it). `dd` is the simulator's page-cache-like reader (128
//!    KiB readahead bios, two in flight, submitted under a plug); `find` reads single
//!    blocks and, one step in 52, a burst of 32 adjacent blocks under a plug (an inode
//!    table read ahead). A new scheduler is one more entry in `COLUMNS`.
//! 3. The calibration: the card driven as the legacy path drove it (its queue thread,
//!    `blkmq_sim::LegacyMmc`, which prepares ahead and wakes to start every command, behind
//!    the simulator's generic driver and mq-deadline's sorting and merging; "the model's
//!    BEFORE") against the seed's BEFORE, figure by figure: `dd` within 5%, `find` within
//!    10%, each iozone cell within 20%. The card keeps the simulator's default parameters,
//!    already fitted to these figures with the thread's wake-up
//!    (`blkmq_sim::QUEUE_THREAD_WAKE_NS`, 10 us): every one is within its limit, so none
//!    was changed. With `--thread-wake-us=N` the card is refitted for another wake-up
//!    (the legacy path's figures stay the same; the pipelined driver saves more or less).
//! 4. The directions: `naive` should be worse than BEFORE on `dd` and `find`; `none`,
//!    `mq-deadline` and `bfq` no worse on `dd`, `find` and the iozone read, reread and random
//!    read cells. Each check is marked against the seed's BEFORE and against the model's; the
//!    note says when a column ties with the model's BEFORE.
//! 5. Responsiveness: an application starting up (128 reads of 4 KiB, one at a time, by an
//!    issuer new to the queue) on an idle card and under four `dd` writers, for each
//!    scheduler: how much longer it takes loaded, and what the writers moved meanwhile.
//!
//! `--svg DIR` writes pictures of the same figures, each written on it as text:
//! `dd.svg` and `find.svg` (a bar per set-up, the seed's BEFORE and AFTER as dashed
//! lines), `iozone.svg` (the grids side by side, each cell shaded by its ratio to the
//! seed's BEFORE), `startup.svg` (the start-up's time idle and loaded per scheduler, on a
//! log scale) and `latency.svg` (per set-up the queue ran, the model's BEFORE and each
//! simulated column, a histogram of the iozone run's requests per log2 bucket of their
//! time from allocation to completion, reads and writes, from the queue's I/O accounting,
//! `RequestQueue::latency`; each bar carries its count and each panel its completions and
//! the buckets of their median and 99th percentile). iozone's run is the one pictured: it
//! has both reads and writes, of every record size from one block to many requests.
//!
//! # What the figures say
//!
//! * The naive set-up loses `dd` (17.5 MB/s, the seed's AFTER 16.9) and every read of a
//!   record larger than one request (18803 kB/s from 1 MiB records up, the seed's AFTER
//!   17679 to 18889): each request's preparation is paid on an idle bus.
//! * `none`, `mq-deadline` and `bfq` are at or above both BEFOREs on every figure checked.
//!   With the next request prepared behind the running one, the card is as busy as the
//!   legacy path kept it, and more: no thread wakes between one command's interrupt and the
//!   next command's start (`dd` 21.466 MB/s, the model's BEFORE 21.429 and the seed's
//!   21.431), or to take a request and to see it end one at a time (`find` 3.562 s against
//!   3.607 and 3.600; 4 kB reads 6209 kB/s against 6022 and at most 6060). Records of
//!   several requests gain more (1 MiB: 20514 kB/s, the seed 18436). At `dd`'s two bios in
//!   flight nothing waits in a scheduler long enough to merge, so the three are equal.
//! * Under the writers, the start-up waits behind the writeback with `none` and
//!   `mq-deadline` (several hundred times its idle time); BFQ raises the new issuer's weight
//!   and lets it preempt the writers' queue, so it takes about 3.3x its idle time while the
//!   writers keep their rate. Most of that is the wait for the two writes already on the
//!   card when it starts: requests of up to 512 KiB, about 70 ms each.
//! * `find`'s reads are synchronous and wait one for another; there is nothing to prepare
//!   ahead. The pipelined driver saves the thread's two wake-ups per step. The naive
//!   set-up loses 0.61 s (4.213 s): each readahead burst, one 128 KiB request elsewhere,
//!   is 32 requests of 4 KiB there. The seed lost 0.82 s, of which 0.22 s was processor
//!   time (user and system 2.05 s against 1.83 s), which the model leaves out.

#[path = "mmc_host/host.rs"]
mod host;

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut scale = host::Scale::SEED;
    let mut setup = host::Setup::seed();
    let mut full = false;
    let mut svg_dir = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "small" {
            scale = host::Scale::SMALL;
        } else if arg == "--full" {
            full = true;
        } else if arg == "--svg" {
            svg_dir = Some(args.next().ok_or("--svg needs a directory")?);
        } else if let Some(dir) = arg.strip_prefix("--svg=") {
            svg_dir = Some(dir.to_string());
        } else if let Some(us) = arg.strip_prefix("--thread-wake-us=") {
            let wake_ns = us.parse::<u64>()?.saturating_mul(1_000);
            setup = host::Setup::with_thread_wake(wake_ns)
                .ok_or("a wake-up longer than the fitted command or preparation time")?;
        } else {
            let usage = "try `small`, `--full`, `--svg DIR` and `--thread-wake-us=N`";
            return Err(format!("unknown argument {arg:?}: {usage}").into());
        }
    }
    let results = host::run_all(setup, scale)?;
    if full {
        print!("{}", host::report(&results)?);
    } else {
        print!("{}", host::summary(&results)?);
    }
    if let Some(dir) = svg_dir {
        for path in host::write_pictures(&results, std::path::Path::new(&dir))? {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}
