//! The io_uring driver against a temporary file: every operation, multi-segment and merged
//! requests, partial and short transfers, error statuses, data checked byte for byte,
//! through none, mq-deadline and BFQ; each test fails (rather than hangs) if it does not
//! finish in time.

#![cfg(target_os = "linux")]

mod common;

use blkmq_core::{Bio, BioFlags, Op, Platform, QueueType, SECTOR_SIZE, Segment, Status};
use blkmq_uring::{IoMode, OpenError, UringDisk};
use common::*;

const MIB: u64 = 1 << 20;

#[test]
fn writes_read_back_byte_for_byte_through_every_elevator() {
    for elevator in ELEVATORS {
        bounded(60, move || {
            let Some(rig) = rig(&format!("rw-{elevator}"), 8 * MIB, elevator) else {
                return;
            };
            let q = &rig.queue;
            // The last is larger than a request: split in pieces, each its own request.
            for (i, &(sector, len)) in [
                (0u64, 4096usize),
                (8, 512),
                (1000, 65536),
                (16376, 4096),
                (4096, 4 << 20),
            ]
            .iter()
            .enumerate()
            {
                let data = Aligned::new(len, |o| pattern(i as u8, o));
                assert_eq!(q.write_at(sector, data.as_ref()), Status::Ok, "{elevator}");
                let mut back = Aligned::new(len, |_| 0);
                assert_eq!(q.read_at(sector, back.as_mut()), Status::Ok, "{elevator}");
                assert_eq!(back.as_ref(), data.as_ref(), "{elevator}: read back");
                // On the file itself too.
                let on_file = file_bytes(&rig.path, sector * SECTOR_SIZE, len);
                assert_eq!(on_file, data.as_ref(), "{elevator}: on the file");
            }
            // Buffers at any address (not aligned for O_DIRECT) move as well.
            let odd: Vec<u8> = (0..8193).map(|o| pattern(77, o)).collect();
            assert_eq!(q.write_at(2048, &odd[1..]), Status::Ok, "{elevator}");
            let mut back = vec![0u8; 8195];
            assert_eq!(q.read_at(2048, &mut back[3..]), Status::Ok, "{elevator}");
            assert_eq!(&back[3..], &odd[1..], "{elevator}: unaligned buffers");
            assert_eq!(file_bytes(&rig.path, 2048 * SECTOR_SIZE, 8192), &odd[1..]);
            // Past the device: refused before the driver.
            let mut past = Aligned::new(4096, |_| 0);
            assert_eq!(q.read_at(16384, past.as_mut()), Status::IoErr);
        });
    }
}

#[test]
fn multi_segment_requests_move_every_buffer_of_the_table() {
    for elevator in ELEVATORS {
        bounded(60, move || {
            let Some(rig) = rig(&format!("sg-{elevator}"), 4 * MIB, elevator) else {
                return;
            };
            let q = &rig.queue;
            // Five buffers of different sizes, far apart: a table of five segments.
            let sizes = [4096usize, 512, 8192, 1024, 2560];
            let total: usize = sizes.iter().sum();
            let bufs: Vec<Aligned> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| Aligned::new(n, move |o| pattern(7 + i as u8, o)))
                .collect();
            let table: Vec<Segment> = bufs
                .iter()
                .zip(sizes)
                .map(|(b, n)| Segment::new(b.addr(), n as u32))
                .collect();
            let sectors = (total / 512) as u32;
            let status = q.submit_and_wait_with(Bio::new(Op::Write, 64, sectors), &table);
            assert_eq!(status, Status::Ok, "{elevator}");
            let expect: Vec<u8> = bufs.iter().flat_map(|b| b.as_ref().to_vec()).collect();
            assert_eq!(file_bytes(&rig.path, 64 * 512, total), expect, "{elevator}");
            // Read back through another layout: three buffers.
            let back_sizes = [512usize, 8192, total - 512 - 8192];
            let mut back: Vec<Aligned> =
                back_sizes.iter().map(|&n| Aligned::new(n, |_| 0)).collect();
            let table: Vec<Segment> = back
                .iter()
                .zip(back_sizes)
                .map(|(b, n)| Segment::new(b.addr(), n as u32))
                .collect();
            let status = q.submit_and_wait_with(Bio::new(Op::Read, 64, sectors), &table);
            assert_eq!(status, Status::Ok, "{elevator}");
            let got: Vec<u8> = back.iter_mut().flat_map(|b| b.as_ref().to_vec()).collect();
            assert_eq!(got, expect, "{elevator}: read back through three buffers");
        });
    }
}

#[test]
fn adjacent_bios_merged_while_the_queue_is_quiesced_move_their_own_buffers() {
    for elevator in ELEVATORS {
        bounded(60, move || {
            let Some(rig) = rig(&format!("merge-{elevator}"), 4 * MIB, elevator) else {
                return;
            };
            let q = &rig.queue;
            let n = 16usize;
            let bufs: Vec<Aligned> = (0..n)
                .map(|i| Aligned::new(4096, move |o| pattern(40 + i as u8, o)))
                .collect();
            let done = Ended::new(n);
            // Held back while they are submitted, so they meet in the queue and merge.
            q.quiesce();
            for (i, buf) in bufs.iter().enumerate() {
                let bio = Bio::new(Op::Write, 256 + 8 * i as u64, 8).buffer(buf.addr());
                q.submit(done.bio(bio, i)).unwrap();
            }
            q.unquiesce();
            assert!(
                done.wait(n).iter().all(|s| *s == Some(Status::Ok)),
                "{elevator}"
            );
            let expect: Vec<u8> = bufs.iter().flat_map(|b| b.as_ref().to_vec()).collect();
            assert_eq!(
                file_bytes(&rig.path, 256 * 512, n * 4096),
                expect,
                "{elevator}"
            );
            // And read back the same way, into separate buffers.
            let back: Vec<Aligned> = (0..n).map(|_| Aligned::new(4096, |_| 0)).collect();
            let done = Ended::new(n);
            q.quiesce();
            for (i, buf) in back.iter().enumerate() {
                let bio = Bio::new(Op::Read, 256 + 8 * i as u64, 8).buffer(buf.addr());
                q.submit(done.bio(bio, i)).unwrap();
            }
            q.unquiesce();
            assert!(
                done.wait(n).iter().all(|s| *s == Some(Status::Ok)),
                "{elevator}"
            );
            for (i, (b, a)) in back.iter().zip(&bufs).enumerate() {
                assert_eq!(b.as_ref(), a.as_ref(), "{elevator}: bio {i}");
            }
        });
    }
}

#[test]
fn a_read_past_the_end_of_a_short_file_ends_with_an_error_after_the_bytes_it_has() {
    for elevator in ELEVATORS {
        bounded(60, move || {
            let Some(rig) = rig(&format!("short-{elevator}"), 4 * MIB, elevator) else {
                return;
            };
            let q = &rig.queue;
            let data = Aligned::new(8192, |o| pattern(3, o));
            assert_eq!(q.write_at(0, data.as_ref()), Status::Ok);
            // The file shrinks under the disk to 6 KiB: the last 2 KiB of a 8 KiB read and
            // everything after are past its end.
            std::fs::OpenOptions::new()
                .write(true)
                .open(&rig.path.0)
                .unwrap()
                .set_len(6144)
                .unwrap();
            let mut back = Aligned::new(8192, |_| 0xee);
            assert_eq!(q.read_at(0, back.as_mut()), Status::IoErr, "{elevator}");
            // The short transfer read what the file has, then ended with the error.
            assert_eq!(&back.as_ref()[..6144], &data.as_ref()[..6144], "{elevator}");
            let mut none = Aligned::new(4096, |_| 0);
            assert_eq!(q.read_at(64, none.as_mut()), Status::IoErr, "{elevator}");

            // Two bios merged into one request over the end: the first ends well, the
            // second (past the end) with the error.
            let bufs: Vec<Aligned> = (0..2).map(|_| Aligned::new(4096, |_| 0)).collect();
            let done = Ended::new(2);
            q.quiesce();
            for (i, buf) in bufs.iter().enumerate() {
                let bio = Bio::new(Op::Read, 4 + 8 * i as u64, 8).buffer(buf.addr());
                q.submit(done.bio(bio, i)).unwrap();
            }
            q.unquiesce();
            let statuses = done.wait(2);
            assert_eq!(
                statuses,
                [Some(Status::Ok), Some(Status::IoErr)],
                "{elevator}"
            );
            assert_eq!(bufs[0].as_ref(), &data.as_ref()[2048..6144], "{elevator}");
        });
    }
}

#[test]
fn writes_to_a_read_only_file_end_with_an_error_and_reads_still_work() {
    bounded(60, || {
        let path = TempPath::new("ro");
        std::fs::write(&path.0, vec![0x5a; 1 << 20]).unwrap();
        let builder = UringDisk::builder(&path.0).read_only(true);
        let Some(rig) = rig_with(path, builder, "none") else {
            return;
        };
        assert!(rig.host.driver().is_read_only());
        assert_eq!(rig.host.driver().sectors(), 2048);
        let q = &rig.queue;
        let data = Aligned::new(4096, |_| 1);
        assert_eq!(q.write_at(0, data.as_ref()), Status::IoErr);
        let mut back = Aligned::new(4096, |_| 0);
        assert_eq!(q.read_at(0, back.as_mut()), Status::Ok);
        assert!(back.as_ref().iter().all(|&b| b == 0x5a));
        // Nothing to flush on a disk that takes no writes: no write cache.
        assert!(!rig.queue.limits().write_cache);
        assert_eq!(q.submit_and_wait(Bio::new(Op::Flush, 0, 0)), Status::Ok);
        let bio = Bio::new(Op::Discard, 0, 8);
        assert_eq!(q.submit_and_wait(bio), Status::NotSupported);
        assert_eq!(file_bytes(&rig.path, 0, 4096), vec![0x5a; 4096]);
    });
}

#[test]
fn flushes_and_fua_writes_complete_and_keep_the_data() {
    for elevator in ELEVATORS {
        bounded(60, move || {
            let Some(rig) = rig(&format!("flush-{elevator}"), 4 * MIB, elevator) else {
                return;
            };
            let q = &rig.queue;
            assert_eq!(q.submit_and_wait(Bio::new(Op::Flush, 0, 0)), Status::Ok);
            let data = Aligned::new(4096, |o| pattern(9, o));
            for flags in [
                BioFlags::FUA,
                BioFlags::PREFLUSH,
                BioFlags::PREFLUSH | BioFlags::FUA,
            ] {
                let bio = Bio::new(Op::Write, 32, 8).flags(flags).buffer(data.addr());
                assert_eq!(q.submit_and_wait(bio), Status::Ok, "{elevator} {flags:?}");
                assert_eq!(file_bytes(&rig.path, 32 * 512, 4096), data.as_ref());
            }
        });
    }
}

#[test]
fn discard_and_write_zeroes_read_back_zeroes() {
    for elevator in ELEVATORS {
        bounded(60, move || {
            let Some(rig) = rig(&format!("discard-{elevator}"), 4 * MIB, elevator) else {
                return;
            };
            let q = &rig.queue;
            let data = Aligned::new(65536, |o| pattern(1, o) | 1);
            assert_eq!(q.write_at(0, data.as_ref()), Status::Ok);
            // Discard the second 16 KiB, zero the fourth.
            assert_eq!(q.submit_and_wait(Bio::new(Op::Discard, 32, 32)), Status::Ok);
            assert_eq!(
                q.submit_and_wait(Bio::new(Op::WriteZeroes, 96, 32)),
                Status::Ok
            );
            let mut back = Aligned::new(65536, |_| 0xff);
            assert_eq!(q.read_at(0, back.as_mut()), Status::Ok);
            for (i, chunk) in back.as_ref().chunks(16384).enumerate() {
                let want = &data.as_ref()[i * 16384..(i + 1) * 16384];
                if i == 1 || i == 3 {
                    assert!(
                        chunk.iter().all(|&b| b == 0),
                        "{elevator}: chunk {i} zeroed"
                    );
                } else {
                    assert_eq!(chunk, want, "{elevator}: chunk {i} kept");
                }
            }
            // The file keeps its size.
            assert_eq!(std::fs::metadata(&rig.path.0).unwrap().len(), 4 * MIB);
        });
    }
}

#[test]
fn a_bio_naming_no_buffer_is_refused_not_moved() {
    bounded(30, || {
        let Some(rig) = rig("unmapped", MIB, "none") else {
            return;
        };
        assert_eq!(
            rig.queue.submit_and_wait(Bio::new(Op::Read, 0, 8)),
            Status::Invalid
        );
        assert_eq!(
            rig.queue.submit_and_wait(Bio::new(Op::Write, 0, 8)),
            Status::Invalid
        );
    });
}

#[test]
fn many_threads_on_two_hardware_queues_read_what_they_wrote() {
    for elevator in ELEVATORS {
        bounded(120, move || {
            let path = TempPath::new(&format!("mt-{elevator}"));
            let builder = UringDisk::builder(&path.0)
                .size(16 * MIB)
                .hw_queues(2)
                .depth(32);
            let Some(rig) = rig_with(path, builder, elevator) else {
                return;
            };
            let threads: Vec<_> = (0..4u64)
                .map(|t| {
                    let q = rig.queue.clone();
                    std::thread::spawn(move || {
                        let mut x = t * 7919 + 1;
                        for i in 0..200u64 {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            // Thread `t` owns sectors t*8192.. t*8192+8191.
                            let sector = t * 8192 + (x % 1024) * 8;
                            let data = Aligned::new(4096, |o| pattern((i + t) as u8, o));
                            assert_eq!(q.write_at(sector, data.as_ref()), Status::Ok);
                            let mut back = Aligned::new(4096, |_| 0);
                            assert_eq!(q.read_at(sector, back.as_mut()), Status::Ok);
                            assert_eq!(back.as_ref(), data.as_ref());
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        });
    }
}

#[test]
fn set_up_errors_are_values_with_a_clear_message() {
    let missing = std::env::temp_dir().join("blkmq-uring-test-no-such-dir/disk.img");
    let err = UringDisk::builder(&missing).size(MIB).open().unwrap_err();
    assert!(matches!(err, OpenError::Open { .. }), "{err}");
    assert!(err.to_string().contains("cannot open"), "{err}");

    let path = TempPath::new("errors");
    let err = UringDisk::builder(&path.0)
        .read_only(true)
        .open()
        .unwrap_err();
    assert!(matches!(err, OpenError::Open { .. }), "{err}");
    let err = UringDisk::builder(&path.0).size(0).open().unwrap_err();
    assert!(matches!(err, OpenError::ZeroSize), "{err}");
    let err = UringDisk::builder(&path.0)
        .size(MIB + 100)
        .open()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "size {} is not a multiple of the 512-byte logical block",
            MIB + 100
        )
    );
    std::fs::write(&path.0, b"").unwrap();
    let err = UringDisk::builder(&path.0).open().unwrap_err();
    assert!(matches!(err, OpenError::ZeroSize), "{err}");
    let err = UringDisk::builder(&path.0)
        .hw_queues(0)
        .size(MIB)
        .open()
        .unwrap_err();
    assert!(
        matches!(err, OpenError::BadConfig { what: "hw_queues" }),
        "{err}"
    );
    let err = UringDisk::builder(&path.0)
        .max_segments(2000)
        .size(MIB)
        .open()
        .unwrap_err();
    assert!(
        matches!(
            err,
            OpenError::BadConfig {
                what: "max_segments"
            }
        ),
        "{err}"
    );
    std::fs::write(&path.0, vec![0; 4096]).unwrap();
    let err = UringDisk::builder(&path.0)
        .read_only(true)
        .size(MIB)
        .open()
        .unwrap_err();
    assert!(matches!(err, OpenError::TooLarge { .. }), "{err}");
    let dir = std::env::temp_dir();
    let err = UringDisk::builder(&dir).open().unwrap_err();
    assert!(
        matches!(err, OpenError::NotADisk { .. } | OpenError::Open { .. }),
        "{err}"
    );
}

#[test]
fn the_mode_says_whether_io_is_direct() {
    let path = TempPath::new("mode");
    let disk = match UringDisk::builder(&path.0).size(MIB).open() {
        Ok(disk) => disk,
        Err(OpenError::Uring(err)) => {
            return eprintln!("skipped: io_uring cannot be set up here: {err}");
        }
        Err(err) => panic!("{err}"),
    };
    eprintln!("{}: {}", path.0.display(), disk.mode());
    match disk.mode() {
        IoMode::Direct => assert!(disk.mode().is_direct()),
        IoMode::Buffered { reason } => assert!(!reason.is_empty()),
    }
    let buffered = UringDisk::builder(&path.0).direct(false).open().unwrap();
    assert!(!buffered.mode().is_direct());
    assert_eq!(buffered.sectors(), 2048);
}

#[test]
fn a_tag_set_larger_than_the_rings_is_refused() {
    use blkmq_core::{Host, QueueConfig, StdPlatform, TagSet};
    let path = TempPath::new("shape");
    let disk = match UringDisk::builder(&path.0).size(MIB).depth(8).open() {
        Ok(disk) => disk,
        Err(OpenError::Uring(err)) => {
            return eprintln!("skipped: io_uring cannot be set up here: {err}");
        }
        Err(err) => panic!("{err}"),
    };
    let limits = disk.limits();
    let host = Host::new(TagSet::builder(16), StdPlatform::new(), disk).unwrap();
    let err = UringDisk::add_queue(&host, QueueConfig::new(limits)).unwrap_err();
    assert!(
        matches!(
            err,
            OpenError::Shape {
                what: "depth",
                queue: 16,
                disk: 8
            }
        ),
        "{err}"
    );
}

/// A small tmpfs, unmounted on drop.
struct SmallFs(std::path::PathBuf);

impl SmallFs {
    fn mount(name: &str, bytes: u64) -> Result<Self, String> {
        let dir =
            std::env::temp_dir().join(format!("blkmq-uring-fs-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(&dir)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            let _ = std::fs::remove_dir(&dir);
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Self(dir))
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_write_to_a_full_filesystem_ends_with_no_space() {
    bounded(60, || {
        let fs = match SmallFs::mount("nospace", MIB) {
            Ok(fs) => fs,
            Err(why) => return eprintln!("skipped: cannot mount a 1 MiB tmpfs: {why}"),
        };
        let path = TempPath(fs.0.join("disk.img"));
        // 4 MiB of device on 1 MiB of room: the file is sparse until written.
        let builder = UringDisk::builder(&path.0).size(4 * MIB);
        let Some(rig) = rig_with(path, builder, "mq-deadline") else {
            return;
        };
        let data = Aligned::new(MIB as usize, |o| pattern(5, o));
        let mut statuses = Vec::new();
        for i in 0..4 {
            statuses.push(rig.queue.write_at(i * 2048, data.as_ref()));
        }
        assert!(statuses.contains(&Status::NoSpace), "{statuses:?}");
        assert!(
            statuses
                .iter()
                .all(|s| matches!(s, Status::Ok | Status::NoSpace)),
            "{statuses:?}"
        );
        // Punching a hole frees room again: the next write goes in.
        assert_eq!(
            rig.queue.submit_and_wait(Bio::new(Op::Discard, 0, 8192)),
            Status::Ok
        );
        assert_eq!(rig.queue.write_at(6144, &data.as_ref()[..4096]), Status::Ok);
        drop(rig);
        drop(fs);
    });
}

/// Each reaper holds the first CPU of its hardware queue alone once the disk serves: a
/// thread pinned to that CPU gets no promise of it ([`Platform::exclusive_cpu`]), so the
/// reaper's counts there are the plain ones. Another CPU is still free to take.
#[test]
fn each_reaper_holds_its_hardware_queues_cpu_alone() {
    let path = TempPath::new("reaper-cpu");
    let builder = UringDisk::builder(&path.0).size(MIB).hw_queues(2);
    let Some(rig) = rig_with(path, builder, "none") else {
        return;
    };
    let map = rig
        .queue
        .maps()
        .map(QueueType::Default)
        .expect("a default map");
    let held: Vec<usize> = (0..2)
        .map(|hctx| map.cpus_of(hctx).next().expect("a CPU per hardware queue"))
        .collect();
    let platform = rig.queue.platform();
    // What a new thread pinned to `cpu` is promised.
    let asked_on = |cpu: usize| {
        std::thread::scope(|s| {
            s.spawn(|| {
                platform.pin_current_thread(cpu);
                platform.exclusive_cpu()
            })
            .join()
            .unwrap()
        })
    };
    for &cpu in &held {
        assert_eq!(asked_on(cpu), None, "CPU {cpu} is its reaper's");
    }
    if let Some(free) = (0..platform.nr_cpus()).find(|cpu| !held.contains(cpu)) {
        assert_eq!(asked_on(free), Some(free), "CPU {free} serves no reaper");
    }
}
