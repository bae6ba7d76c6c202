//! A simulated 1 GiB `dd` read from the SD card model, with no scheduler and with
//! mq-deadline: prints busybox's result lines and the wall time each simulation took.
//!
//! ```text
//! cargo run --release -p blkmq-sim --example dd_1g
//! ```

use std::time::Instant;

use blkmq_sched_deadline::Deadline;
use blkmq_sim::{CardParams, Dd, MmcCard, Sim};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for deadline in [false, true] {
        let card = MmcCard::new(CardParams::default())?;
        let elevator = deadline.then(|| Box::new(Deadline::new()) as _);
        let (mut sim, queue) = Sim::for_model(card, 1, elevator)?;
        let dd = sim.add_workload(queue, Dd::read(0, 1 << 30));
        let wall = Instant::now();
        let report = sim.run()?;
        let wall = wall.elapsed();
        let result = sim.workload(dd).result().ok_or("dd did not finish")?;
        println!("{}:", if deadline { "mq-deadline" } else { "none" });
        println!("{result}");
        println!(
            "{} bios, {} events, simulated in {:.3} s of wall time\n",
            report.stats.bios_submitted,
            report.events,
            wall.as_secs_f64()
        );
    }
    Ok(())
}
