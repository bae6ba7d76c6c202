//! The `raid_hba` example's driver and load, checked for correctness only: every read of
//! a `--verify` run comes back once, from the member and sector its volume sector stripes
//! to, with the bytes the run wrote there, in every mode; the written bytes sit on the
//! members where RAID-0 chunking puts them; the hosts end idle with their
//! budget back; and the volume's budget running out (requests waiting for a completion to
//! rerun their hardware queue) loses nothing. No timing is asserted: that is for the
//! example's table and `benches/hba.rs`.

#[path = "../examples/raid_hba/hba.rs"]
#[allow(dead_code)]
mod hba;

use std::sync::Mutex;

use blkmq_core::SECTOR_SIZE;
use hba::driver::{MEMBERS, STRIPE_SECTORS, VERIFY_SECTORS, data_of, pattern, stripe};
use hba::stats::Stats;
use hba::{Config, Mode, Rig};

/// The runs spin on their threads: one at a time, so they do not crowd each other out of
/// a small machine.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `ios` verified reads through a fresh host in `mode`; checks the run found nothing
/// wrong and left the host idle.
fn verified(mode: Mode, cfg: &Config, ios: u64) -> Stats {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = Config {
        verify: true,
        ..cfg.clone()
    };
    let rig = Rig::new(mode, &cfg);
    let st = rig.run(ios);
    let name = mode.name();
    assert_eq!(st.errors, 0, "{name}: {st:?}");
    assert_eq!((st.duplicates, st.lost), (0, 0), "{name}");
    assert_eq!(st.ios, ios, "{name}: reads completed");
    assert_eq!(st.submitted, ios, "{name}: reads submitted");
    assert!(rig.is_idle(), "{name}: host not idle after the run");
    let commands: u64 = rig.host.driver().member_ios().iter().sum();
    // Merged reads are one command: never more commands than reads.
    assert!(
        commands > 0 && commands <= ios,
        "{name}: {commands} commands"
    );
    // The same host runs again just as well.
    let again = rig.run(ios / 10);
    assert_eq!(
        (again.errors, again.ios),
        (0, ios / 10),
        "{name}: second run"
    );
    assert!(rig.is_idle(), "{name}: host not idle after the second run");
    st
}

#[test]
fn striping_maps_each_strip_to_the_next_member() {
    assert_eq!(stripe(0), (0, 0));
    assert_eq!(stripe(STRIPE_SECTORS - 1), (0, STRIPE_SECTORS - 1));
    assert_eq!(stripe(STRIPE_SECTORS), (1, 0));
    assert_eq!(stripe(STRIPE_SECTORS + 2), (1, 2));
    assert_eq!(stripe(MEMBERS * STRIPE_SECTORS), (0, STRIPE_SECTORS));
    assert_eq!(
        stripe(MEMBERS * STRIPE_SECTORS * 3 + 7 * STRIPE_SECTORS + 5),
        (7, 3 * STRIPE_SECTORS + 5)
    );
    // Different members or sectors hold different data.
    assert_ne!(data_of(0, 8), data_of(1, 8));
    assert_ne!(data_of(3, 8), data_of(3, 16));
}

#[test]
fn every_mode_completes_every_read_once_with_its_data() {
    // CPU-bound, one submitter and one completion thread: 200,000 reads per mode.
    let cfg = Config::default();
    for mode in Mode::ALL {
        verified(mode, &cfg, 200_000);
    }
}

#[test]
fn inline_completions_under_budget_pressure_lose_nothing() {
    // Two submitters keep 256 reads in flight against a budget of 64: most wait on their
    // hardware queue for a completion's rerun. Completions run on the submitting threads.
    let cfg = Config {
        submitters: 2,
        completers: 0,
        budget: 64,
        ..Config::default()
    };
    for mode in Mode::ALL {
        verified(mode, &cfg, 50_000);
    }
}

#[test]
fn threaded_completions_under_budget_pressure_lose_nothing() {
    let cfg = Config {
        submitters: 2,
        completers: 2,
        budget: 32,
        hctxs: 16,
        reply_queues: 16,
        depth: 512,
        ..Config::default()
    };
    for mode in Mode::ALL {
        verified(mode, &cfg, 50_000);
    }
}

#[test]
fn modeled_latency_still_completes_everything() {
    let cfg = Config {
        latency_ns: 20_000,
        ..Config::default()
    };
    for mode in [Mode::Single, Mode::Shared] {
        let st = verified(mode, &cfg, 20_000);
        // Nothing completes before its member's service time.
        assert!(st.p50_ns >= 20_000, "{}: p50 {} ns", mode.name(), st.p50_ns);
    }
}

#[test]
fn written_data_sits_on_the_members_by_raid0_chunking() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = Config {
        verify: true,
        ..Config::default()
    };
    let rig = Rig::new(Mode::Shared, &cfg);
    let st = rig.run(2_000);
    assert_eq!(st.errors, 0, "{st:?}");
    let driver = rig.host.driver();
    // Every sector written: on the member and at the member sector its strip maps to,
    // holding the run's pattern for that volume sector.
    let mut want = vec![0u8; SECTOR_SIZE as usize];
    let mut got = vec![0u8; SECTOR_SIZE as usize];
    for sector in 0..VERIFY_SECTORS {
        let (member, member_sector) = stripe(sector);
        pattern(sector, 1, &mut want);
        assert!(driver.member_data(member, member_sector, &mut got));
        assert!(
            got == want,
            "volume sector {sector}: member {member} sector {member_sector}"
        );
    }
    // Nothing past the stores.
    assert!(!driver.member_data(0, VERIFY_SECTORS / MEMBERS, &mut got));
    // A run without verify moves no bytes and keeps no stores.
    let plain = Rig::new(Mode::Shared, &Config::default());
    assert!(!plain.host.driver().member_data(0, 0, &mut got));
}
