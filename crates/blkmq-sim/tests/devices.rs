//! Each device model against service times computed by hand from its parameters, and the
//! rules of its queue (depth, pipelining, reordering, striping).

use blkmq_core::Op;
use blkmq_sim::*;

fn read(sector: u64, sectors: u64) -> Command {
    Command::new(Op::Read, sector, sectors)
}

fn write(sector: u64, sectors: u64) -> Command {
    Command::new(Op::Write, sector, sectors)
}

/// Everything that ends by `at`.
fn complete(dev: &mut impl DeviceModel, at: u64) -> Vec<CmdId> {
    let mut done = Vec::new();
    dev.complete(at, &mut done);
    done
}

/// Runs the device until idle; returns (id, end) in completion order.
fn drain(dev: &mut impl DeviceModel) -> Vec<(CmdId, u64)> {
    let mut out = Vec::new();
    while let Some(at) = dev.next_completion() {
        for id in complete(dev, at) {
            out.push((id, at));
        }
    }
    out
}

// ----- the SD card -----

#[test]
fn card_read_on_an_idle_card_is_preparation_command_and_transfer() {
    let mut card = MmcCard::new(CardParams::default()).unwrap();
    // 128 KiB: prepare 240 us + 131072 B at 123 MB/s (1065.626 us), then the card's
    // 195 us + 131072 B at 23.29 MB/s (5627.823 us).
    let expected = 240_000 + 1_065_626 + 195_000 + 5_627_823;
    assert_eq!(card.service_ns(0, &read(0, 256)), expected);
    card.submit(0, 1, read(0, 256)).unwrap();
    assert_eq!(card.next_completion(), Some(expected));
    assert_eq!(drain(&mut card), [(1, expected)]);
}

#[test]
fn card_prepares_one_command_behind_the_one_on_the_bus_and_no_more() {
    let mut card = MmcCard::new(CardParams::default()).unwrap();
    let first = 240_000 + 1_065_626 + 195_000 + 5_627_823;
    card.submit(0, 1, read(0, 256)).unwrap();
    card.submit(0, 2, read(256, 256)).unwrap();
    assert_eq!(card.in_flight(), 2);
    assert_eq!(card.submit(0, 3, read(512, 256)), Err(read(512, 256)));
    // The second was prepared while the first ran: it starts the moment the bus frees.
    let second = first + 195_000 + 5_627_823;
    assert_eq!(drain(&mut card), [(1, first), (2, second)]);

    // Prepared late, its preparation is not hidden.
    let mut card = MmcCard::new(CardParams::default()).unwrap();
    card.submit(0, 1, read(0, 256)).unwrap();
    card.submit(7_000_000, 2, read(256, 256)).unwrap();
    let ready = 7_000_000 + 240_000 + 1_065_626;
    assert_eq!(
        drain(&mut card),
        [(1, first), (2, ready + 195_000 + 5_627_823)]
    );
}

#[test]
fn legacy_thread_wakes_before_every_start_and_every_completion() {
    let wake = 10_000;
    let mut legacy = LegacyMmc::new(MmcCard::new(CardParams::default()).unwrap(), wake);
    let card_128k = 195_000 + 5_627_823;
    // Idle: the thread wakes, prepares (240 us + 1065.626 us) and starts the command; it
    // sees the interrupt one wake-up after the card finished.
    let first_done = wake + 240_000 + 1_065_626 + card_128k;
    assert_eq!(legacy.service_ns(0, &read(0, 256)), first_done + wake);
    legacy.submit(0, 1, read(0, 256)).unwrap();
    legacy.submit(0, 2, read(256, 256)).unwrap();
    assert_eq!(legacy.in_flight(), 2);
    assert_eq!(legacy.submit(0, 3, read(512, 256)), Err(read(512, 256)));
    // The second, prepared behind the first, starts when the thread does: the card idles
    // one wake-up between the two.
    let second_done = first_done + wake + card_128k;
    assert_eq!(
        drain(&mut legacy),
        [(1, first_done + wake), (2, second_done + wake)]
    );
    // Without the thread (a wake-up of 0) it is the card alone.
    let mut bare = LegacyMmc::new(MmcCard::new(CardParams::default()).unwrap(), 0);
    let mut card = MmcCard::new(CardParams::default()).unwrap();
    for (id, sector) in [(1, 0), (2, 256)] {
        bare.submit(0, id, read(sector, 256)).unwrap();
        card.submit(0, id, read(sector, 256)).unwrap();
    }
    assert_eq!(drain(&mut bare), drain(&mut card));
    assert_eq!(legacy.name(), "mmc (legacy thread)");
    assert_eq!(legacy.limits(), legacy.card().limits());
}

#[test]
fn card_low_level_interface_leaves_the_prepared_command_to_the_driver() {
    let mut card = MmcCard::new(CardParams::default()).unwrap();
    let done = card.start(0, 1, read(0, 8)).unwrap();
    assert_eq!(done, 240_000 + 33_300 + 195_000 + 175_869);
    card.prepare(10, 2, read(8, 8)).unwrap();
    assert_eq!(card.prepared(), Some(2));
    assert_eq!(card.start_prepared(done), None); // the bus is busy until the interrupt
    assert_eq!(card.finish(done), Some(1));
    assert!(card.is_idle());
    assert_eq!(card.prepared(), Some(2)); // not started by the interrupt itself
    let next = card.start_prepared(done + 1_000).unwrap();
    assert_eq!(next, done + 1_000 + 195_000 + 175_869);
    assert_eq!(card.on_bus(), Some((2, next)));
}

#[test]
fn card_small_and_random_writes_pay_the_translation_layer() {
    let p = CardParams::default();
    let mut card = MmcCard::new(p).unwrap();
    // A sequential 4 KiB write (the card starts as if the last write ended at 0): command,
    // transfer at 7.535 MB/s, and a partial 8 KiB page.
    let seq4k = 213_000 + 543_596 + 840_000;
    assert_eq!(card.card_ns(&write(0, 8)), seq4k);
    assert_eq!(card.service_ns(0, &write(0, 8)), 240_000 + 33_300 + seq4k);
    card.submit(0, 1, write(0, 8)).unwrap();
    drain(&mut card);
    // Not following it: 98.9 ms scaled by the 508 KiB of the 512 KiB unit left unwritten.
    assert_eq!(card.card_ns(&write(800, 8)), seq4k + 98_127_343);
    // Following it: no penalty.
    assert_eq!(card.card_ns(&write(8, 8)), seq4k);
    // 256 KiB at random: half the penalty, no partial page.
    assert_eq!(
        card.card_ns(&write(4096, 512)),
        213_000 + 34_790_179 + 49_450_000
    );
    // A whole allocation unit costs nothing extra, wherever it goes.
    assert_eq!(card.card_ns(&write(4096, 1024)), 213_000 + 69_580_358);
    card.submit(0, 2, write(800, 8)).unwrap();
    drain(&mut card);
    assert_eq!(card.stats().random_writes, 1);
    assert_eq!(card.stats().bytes_written, 8192);
}

#[test]
fn card_random_reads_pay_their_parameter() {
    let p = CardParams {
        random_read_ns: 1_000_000,
        ..CardParams::default()
    };
    let mut card = MmcCard::new(p).unwrap();
    card.submit(0, 1, read(0, 8)).unwrap();
    drain(&mut card);
    assert_eq!(card.card_ns(&read(8, 8)), 195_000 + 175_869);
    assert_eq!(card.card_ns(&read(64, 8)), 195_000 + 175_869 + 1_000_000);
}

// ----- the rotational disk -----

/// 8 tracks of 1000 sectors at 6000 rpm: a turn is 10 ms, a sector 10 us.
fn small_disk(queue_depth: usize, max_wait_ns: u64) -> Disk {
    Disk::new(DiskParams {
        capacity_sectors: 8_000,
        rpm: 6000,
        sectors_per_track: 1_000,
        track_to_track_ns: 1_000_000,
        full_stroke_ns: 15_000_000,
        overhead_ns: 100_000,
        queue_depth,
        max_wait_ns,
        max_sectors: 256,
        max_segments: 128,
    })
    .unwrap()
}

#[test]
fn disk_seek_rotation_and_transfer() {
    let mut disk = small_disk(1, u64::MAX);
    // Head on track 0 at time 0; sector 2500 is on track 2, half a turn round.
    // Seek 2 of 8 tracks: 1 + 14 * sqrt(1/4) = 8 ms; positioned at 8.1 ms, the sector
    // comes by at 15 ms (6.9 ms later); 8 sectors take 80 us.
    let first = 100_000 + 8_000_000 + 6_900_000 + 80_000;
    assert_eq!(disk.service_ns(0, &read(2500, 8)), first);
    disk.submit(0, 1, read(2500, 8)).unwrap();
    assert_eq!(disk.submit(0, 2, read(0, 8)), Err(read(0, 8))); // no internal queue
    assert_eq!(drain(&mut disk), [(1, first)]);
    // Sequential: overhead and transfer only.
    assert_eq!(disk.service_ns(first, &read(2508, 8)), 180_000);
    // Same track elsewhere: no seek; at 15.18 ms the platter is at 5.18 ms of its turn,
    // sector 900 comes at 9 ms: 3.82 ms of rotation.
    assert_eq!(
        disk.service_ns(first, &read(2900, 8)),
        100_000 + 3_820_000 + 80_000
    );
    // A full stroke.
    assert_eq!(disk.params().seek_ns(8), 15_000_000);
    assert_eq!(disk.head(), 2508);
}

#[test]
fn disk_with_ncq_serves_the_closest_command_first() {
    let mut disk = small_disk(4, u64::MAX);
    let first = 100_000 + 8_000_000 + 6_900_000 + 80_000;
    disk.submit(0, 1, read(2500, 8)).unwrap();
    disk.submit(0, 2, read(7000, 8)).unwrap(); // 5 tracks away
    disk.submit(0, 3, read(2600, 8)).unwrap(); // same track, just ahead
    let done = drain(&mut disk);
    let order: Vec<CmdId> = done.iter().map(|d| d.0).collect();
    assert_eq!(order, [1, 3, 2]);
    // Command 3: at 15.18 ms the platter is at 5.18 ms, sector 600 is at 6 ms.
    assert_eq!(done[1].1, first + 100_000 + 820_000 + 80_000);
}

#[test]
fn disk_with_ncq_lets_no_command_wait_past_its_bound() {
    let mut disk = small_disk(4, 1);
    disk.submit(0, 1, read(2500, 8)).unwrap();
    disk.submit(0, 2, read(7000, 8)).unwrap();
    disk.submit(0, 3, read(2600, 8)).unwrap();
    let order: Vec<CmdId> = drain(&mut disk).iter().map(|d| d.0).collect();
    assert_eq!(order, [1, 2, 3]); // the oldest first: it waited past 1 ns
}

// ----- the SSD -----

#[test]
fn ssd_small_read_is_overhead_nand_channel_and_link() {
    let mut ssd = Ssd::new(SsdParams::default()).unwrap();
    // 15 us + 75 us + 4 KiB at 400 MB/s (10.24 us) + 4 KiB at 550 MB/s (7.447 us).
    let t = 15_000 + 75_000 + 10_240 + 7_447;
    assert_eq!(ssd.service_ns(0, &read(0, 8)), t);
    ssd.submit(0, 1, read(0, 8)).unwrap();
    assert_eq!(drain(&mut ssd), [(1, t)]);
}

#[test]
fn ssd_spreads_a_large_read_over_its_channels() {
    let ssd = Ssd::new(SsdParams::default()).unwrap();
    // 128 KiB = 8 stripes of 16 KiB on 8 channels, in parallel: 75 us + 40.96 us each,
    // then the whole 128 KiB over the link (238.312 us).
    let t = 15_000 + 75_000 + 40_960 + 238_312;
    assert_eq!(ssd.service_ns(0, &read(0, 256)), t);
    // The same bytes on one channel (stripes of 128 KiB) take 8 times the NAND time.
    let one = Ssd::new(SsdParams {
        stripe_bytes: 128 * 1024,
        ..SsdParams::default()
    })
    .unwrap();
    assert_eq!(
        one.service_ns(0, &read(0, 256)),
        15_000 + 75_000 + 327_680 + 238_312
    );
}

#[test]
fn ssd_commands_on_one_channel_queue_and_on_two_overlap() {
    // Sectors 0 and 256 are both on channel 0 (stripe 0 and stripe 8).
    let mut ssd = Ssd::new(SsdParams::default()).unwrap();
    ssd.submit(0, 1, read(0, 8)).unwrap();
    ssd.submit(0, 2, read(256, 8)).unwrap();
    let channel = 75_000 + 10_240;
    let second = 15_000 + 2 * channel + 7_447;
    assert_eq!(
        drain(&mut ssd),
        [(1, 15_000 + channel + 7_447), (2, second)]
    );
    // Sectors 0 and 32 are on channels 0 and 1: only the link is shared.
    let mut ssd = Ssd::new(SsdParams::default()).unwrap();
    ssd.submit(0, 1, read(0, 8)).unwrap();
    ssd.submit(0, 2, read(32, 8)).unwrap();
    let first = 15_000 + channel + 7_447;
    assert_eq!(drain(&mut ssd), [(1, first), (2, first + 7_447)]);
}

#[test]
fn ssd_write_crosses_the_link_first_and_respects_its_depth() {
    let mut ssd = Ssd::new(SsdParams {
        queue_depth: 1,
        ..SsdParams::default()
    })
    .unwrap();
    assert_eq!(
        ssd.service_ns(0, &write(0, 8)),
        15_000 + 7_447 + 5_000 + 10_240
    );
    ssd.submit(0, 1, write(0, 8)).unwrap();
    assert!(ssd.submit(0, 2, write(8, 8)).is_err());
    let flush = Command::new(Op::Flush, 0, 0);
    assert_eq!(ssd.service_ns(0, &flush), 15_000);
}

// ----- RAID-0 -----

fn ideal(latency_ns: u64, queue_depth: usize) -> Ideal {
    Ideal::new(IdealParams {
        latency_ns,
        bandwidth: 0,
        queue_depth,
        ..IdealParams::default()
    })
    .unwrap()
}

#[test]
fn raid0_maps_chunks_round_robin() {
    let members = (0..3).map(|_| ideal(100, 4)).collect();
    let raid = Raid0::new(
        members,
        Raid0Params {
            chunk_sectors: 8,
            queue_depth: None,
        },
    )
    .unwrap();
    assert_eq!(raid.queue_depth(), 12);
    let maps: Vec<(usize, u64)> = [0, 7, 8, 16, 24, 31, 50]
        .iter()
        .map(|&s| raid.map(s))
        .collect();
    assert_eq!(
        maps,
        [(0, 0), (0, 7), (1, 0), (2, 0), (0, 8), (0, 15), (0, 18)]
    );
    // Sectors 6..30: chunk 0 (2), 1, 2, 3 (6): member 0 gets 6..8 and 8..14 in one piece.
    let pieces = raid.pieces(&read(6, 24));
    assert_eq!(pieces, [(0, read(6, 8)), (1, read(0, 8)), (2, read(0, 8))]);
    let flush = Command::new(Op::Flush, 0, 0);
    assert_eq!(raid.pieces(&flush).len(), 3);
    assert_eq!(raid.capacity(), 3 * ((1 << 31) / 8 * 8));
}

#[test]
fn raid0_ends_a_command_with_its_slowest_piece() {
    let members = vec![ideal(100, 4), ideal(300, 4)];
    let mut raid = Raid0::new(
        members,
        Raid0Params {
            chunk_sectors: 8,
            queue_depth: None,
        },
    )
    .unwrap();
    assert_eq!(raid.service_ns(0, &read(0, 16)), 300);
    assert_eq!(raid.service_ns(0, &read(0, 8)), 100);
    raid.submit(0, 7, read(0, 16)).unwrap();
    raid.submit(0, 8, read(16, 8)).unwrap(); // member 0 only
    assert_eq!(drain(&mut raid), [(8, 100), (7, 300)]);
}

#[test]
fn raid0_pieces_wait_for_a_full_member() {
    let members = vec![ideal(100, 1), ideal(100, 1)];
    let mut raid = Raid0::new(
        members,
        Raid0Params {
            chunk_sectors: 8,
            queue_depth: Some(4),
        },
    )
    .unwrap();
    for id in 0..4 {
        raid.submit(0, id, read(0, 8)).unwrap(); // all on member 0
    }
    assert!(raid.submit(0, 4, read(8, 8)).is_err()); // the volume holds 4
    let done = drain(&mut raid);
    assert_eq!(done, [(0, 100), (1, 200), (2, 300), (3, 400)]);
}

// ----- every model -----

/// Whatever the model, a command on an idle device ends exactly `service_ns` after it is
/// submitted, and the statistics count it.
#[test]
fn service_time_predicts_the_completion_on_an_idle_device() {
    fn check(mut dev: impl DeviceModel) {
        let mut rng = SimRng::new(5);
        let mut now = 0;
        let mut bytes = 0;
        for id in 0..200 {
            now += rng.below(20_000_000);
            let sectors = 8 * (1 + rng.below(64));
            let sector = rng.below(dev.capacity() - sectors);
            let cmd = if rng.chance(1, 2) {
                read(sector, sectors)
            } else {
                write(sector, sectors)
            };
            bytes += cmd.bytes();
            let expected = dev.service_ns(now, &cmd);
            dev.submit(now, id, cmd).unwrap();
            // A volume is also called at each member's end; nothing ends before `expected`.
            let end = now + expected;
            while let Some(at) = dev.next_completion().filter(|&at| at < end) {
                assert!(complete(&mut dev, at).is_empty(), "{}", dev.name());
            }
            assert_eq!(dev.next_completion(), Some(end), "{}", dev.name());
            now = end;
            assert_eq!(complete(&mut dev, now), [id]);
        }
        let stats = dev.stats();
        assert_eq!(stats.commands, 200);
        assert_eq!(stats.bytes_read + stats.bytes_written, bytes);
        assert_eq!(dev.in_flight(), 0);
    }
    check(MmcCard::new(CardParams::default()).unwrap());
    check(Disk::new(DiskParams::default()).unwrap());
    check(Disk::new(DiskParams::ncq()).unwrap());
    check(Ssd::new(SsdParams::default()).unwrap());
    check(ideal(1_000, 2));
    let members = (0..4)
        .map(|_| Ssd::new(SsdParams::default()).unwrap())
        .collect();
    check(Raid0::new(members, Raid0Params::default()).unwrap());
}

#[test]
fn models_refuse_bad_parameters() {
    assert_eq!(
        MmcCard::new(CardParams {
            max_sectors: 3,
            ..CardParams::default()
        })
        .unwrap_err()
        .what,
        "max_sectors"
    );
    assert_eq!(
        Disk::new(DiskParams {
            queue_depth: 0,
            ..DiskParams::default()
        })
        .unwrap_err()
        .what,
        "queue_depth"
    );
    assert_eq!(
        Ssd::new(SsdParams {
            stripe_bytes: 100,
            ..SsdParams::default()
        })
        .unwrap_err()
        .what,
        "stripe_bytes"
    );
    assert!(
        Raid0::new(
            vec![ideal(1, 1)],
            Raid0Params {
                chunk_sectors: 0,
                queue_depth: None
            }
        )
        .is_err()
    );
}

#[test]
fn only_the_disk_and_sets_of_disks_are_rotational() {
    let disk = Disk::new(DiskParams::default()).unwrap();
    assert!(disk.limits().rotational);
    assert!(
        !MmcCard::new(CardParams::default())
            .unwrap()
            .limits()
            .rotational
    );
    assert!(!Ssd::new(SsdParams::default()).unwrap().limits().rotational);
    let disks = (0..2)
        .map(|_| Disk::new(DiskParams::default()).unwrap())
        .collect();
    let raid = Raid0::new(disks, Raid0Params::default()).unwrap();
    assert!(raid.limits().rotational);
}
