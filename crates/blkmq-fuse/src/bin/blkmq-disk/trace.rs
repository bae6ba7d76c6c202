//! `--trace FILE`: the queue's trace events, one `blkparse` line each, written to FILE by a
//! thread draining the queue's ring tracer, and the `btt`-like summary at exit.
//!
//! Lines are written a drain at a time, each drain's in time order (an event published
//! just after a drain can be a little older than the last lines written before it).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use blkmq_core::{QueueConfig, RingTracer, SummaryBuilder, TraceEvent, TraceSummary};

/// Events each CPU's ring holds between drains.
const RING_EVENTS: usize = 1 << 16;

/// How long the drainer sleeps when it found nothing.
const IDLE: Duration = Duration::from_millis(10);

/// The trace being written.
struct Tracing {
    rings: Arc<RingTracer>,
    stop: Arc<AtomicBool>,
    drainer: JoinHandle<std::io::Result<(u64, TraceSummary)>>,
    path: String,
}

static TRACING: Mutex<Option<Tracing>> = Mutex::new(None);

/// Creates `path` and starts draining into it (before the queue is made).
pub(crate) fn start(path: Option<&Path>) -> Result<(), String> {
    let Some(path) = path else {
        return Ok(());
    };
    let file = File::create(path)
        .map_err(|e| format!("cannot create the trace file {}: {e}", path.display()))?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rings = Arc::new(RingTracer::new(cpus, RING_EVENTS));
    let stop = Arc::new(AtomicBool::new(false));
    let drainer = {
        let (rings, stop) = (rings.clone(), stop.clone());
        std::thread::Builder::new()
            .name("blkmq-trace".into())
            .spawn(move || drain(&rings, &stop, file))
            .map_err(|e| format!("cannot start the trace thread: {e}"))?
    };
    let path = path.display().to_string();
    *TRACING.lock().unwrap_or_else(|e| e.into_inner()) = Some(Tracing {
        rings,
        stop,
        drainer,
        path,
    });
    Ok(())
}

/// `config` with the tracer, when tracing.
pub(crate) fn config(config: QueueConfig) -> QueueConfig {
    match &*TRACING.lock().unwrap_or_else(|e| e.into_inner()) {
        Some(tracing) => config.tracer(tracing.rings.clone()),
        None => config,
    }
}

/// Stops the drainer after a last drain and prints what it wrote and the summary.
pub(crate) fn finish() {
    let Some(tracing) = TRACING.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return;
    };
    tracing.stop.store(true, Ordering::Release);
    match tracing.drainer.join() {
        Ok(Ok((written, summary))) => {
            eprintln!(
                "blkmq-disk: trace: {written} events written to {}, {} dropped (a ring was full)",
                tracing.path,
                tracing.rings.dropped()
            );
            eprint!("{summary}");
        }
        Ok(Err(e)) => eprintln!("blkmq-disk: trace: writing {} failed: {e}", tracing.path),
        Err(_) => eprintln!("blkmq-disk: trace: the trace thread panicked"),
    }
}

/// Drains `rings` into `file` until `stop`, then once more; the events written and their
/// summary.
fn drain(
    rings: &RingTracer,
    stop: &AtomicBool,
    file: File,
) -> std::io::Result<(u64, TraceSummary)> {
    let mut out = BufWriter::new(file);
    let mut batch: Vec<TraceEvent> = Vec::with_capacity(RING_EVENTS);
    let mut summary = SummaryBuilder::default();
    let mut written = 0u64;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        batch.clear();
        rings.drain(|e| batch.push(e));
        batch.sort_by_key(|e| e.time_ns);
        for e in &batch {
            writeln!(out, "{e}")?;
            summary.push(e);
        }
        written += batch.len() as u64;
        if stopping {
            break;
        }
        if batch.is_empty() {
            out.flush()?;
            std::thread::sleep(IDLE);
        }
    }
    out.flush()?;
    Ok((written, summary.finish()))
}
