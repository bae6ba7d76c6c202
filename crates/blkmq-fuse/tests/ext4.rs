//! A file system on the real stack: a loop device over the file `blkmq-disk` serves,
//! `mkfs.ext4` on it, a tree of a few thousand files of pseudo-random bytes copied in,
//! `sync` and unmount; `e2fsck -fn` finds it clean, and mounted again every file reads back
//! with its hash; with mq-deadline, no elevator and BFQ. Whatever fails, the guard
//! unmounts, detaches the loop device and stops the daemon. Skips, saying why, without
//! root, `/dev/fuse`, `fusermount3`, loop devices, `losetup`, `mkfs.ext4` or `e2fsck`.

#![cfg(target_os = "linux")]

mod common;

use std::path::{Path, PathBuf};

use common::daemon::{Daemon, missing_tool, run, run_ok};
use common::{fill_pattern, hash64, skip_reason, temp_dir};

/// Files in the tree, and the largest (sizes are drawn from 0 to this).
const FILES: u64 = 3000;
const MAX_FILE: u64 = 64 << 10;

fn skip() -> Option<String> {
    skip_reason()
        .or_else(|| {
            (!Path::new("/dev/loop-control").exists())
                .then(|| "no loop devices (/dev/loop-control is missing)".to_string())
        })
        .or_else(|| {
            missing_tool(&[
                ("losetup", "util-linux"),
                ("mount", "mount"),
                ("umount", "mount"),
                ("mkfs.ext4", "e2fsprogs"),
                ("e2fsck", "e2fsprogs"),
            ])
        })
        .or_else(|| {
            // A free loop device, and its node (a container may have the one, not the other).
            let (status, free) = run("losetup", &["-f"]);
            let free = free.trim();
            (!status.success() || !Path::new(free).exists())
                .then(|| format!("no free loop device (losetup -f: {status}: {free})"))
        })
}

/// The stack, torn down in order on drop: the file system unmounted, the loop device
/// detached, the daemon killed (if a test failed before stopping it) and its mount
/// detached, the temporary files removed.
struct Stack {
    daemon: Option<Daemon>,
    loop_dev: Option<String>,
    /// The file system's mount point, while mounted.
    mounted: Option<PathBuf>,
    /// The source tree and the mount point.
    dir: PathBuf,
}

impl Stack {
    fn mount(&mut self, at: &Path) {
        let dev = self.loop_dev.clone().unwrap();
        run_ok("mount", &["-t", "ext4", &dev, at.to_str().unwrap()]);
        self.mounted = Some(at.to_path_buf());
    }

    fn unmount(&mut self) {
        if let Some(at) = self.mounted.take() {
            run_ok("umount", &[at.to_str().unwrap()]);
        }
    }

    fn detach_loop(&mut self) {
        if let Some(dev) = self.loop_dev.take() {
            run_ok("losetup", &["-d", &dev]);
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(at) = self.mounted.take() {
            let at = at.to_str().unwrap();
            if !run("umount", &[at]).0.success() {
                let _ = run("umount", &["-l", at]);
            }
        }
        if let Some(dev) = self.loop_dev.take() {
            let _ = run("losetup", &["-d", &dev]);
        }
        drop(self.daemon.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One file of the tree: its path under the tree's root, its size and its hash.
struct Entry {
    path: PathBuf,
    len: usize,
    hash: u64,
}

/// Writes the tree under `root`: `FILES` files of 0 to `MAX_FILE` pseudo-random bytes in
/// two levels of directories; what each one holds.
fn make_tree(root: &Path) -> Vec<Entry> {
    let mut sizes = vec![0u8; FILES as usize * 8];
    fill_pattern(u64::MAX, &mut sizes);
    let mut buf = vec![0u8; MAX_FILE as usize];
    (0..FILES)
        .map(|i| {
            let word = u64::from_le_bytes(sizes[i as usize * 8..][..8].try_into().unwrap());
            let len = (word % (MAX_FILE + 1)) as usize;
            let path = PathBuf::from(format!("d{}/e{}/f{i}.bin", i % 10, i / 10 % 17));
            let bytes = &mut buf[..len];
            fill_pattern(i, bytes);
            let file = root.join(&path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, &bytes).unwrap();
            Entry {
                path,
                len,
                hash: hash64(bytes),
            }
        })
        .collect()
}

/// Files under `dir`, counted through every level.
fn count_files(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                count_files(&entry.path())
            } else {
                1
            }
        })
        .sum()
}

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The whole run with `blkmq-disk --elevator elevator`, copying the tree at `source`
/// (which holds `tree`); the lines it reports.
fn ext4_on(elevator: &str, source: &Path, tree: &[Entry]) -> String {
    let dir = temp_dir(&format!("ext4-{elevator}-fs"));
    let mut stack = Stack {
        daemon: None,
        loop_dev: None,
        mounted: None,
        dir: dir.clone(),
    };
    let fs = dir.join("fs");
    std::fs::create_dir(&fs).unwrap();
    let bytes: usize = tree.iter().map(|e| e.len).sum();

    let daemon = stack.daemon.insert(Daemon::start(
        &format!("ext4-{elevator}"),
        "256M",
        &["--elevator", elevator],
    ));
    let disk = daemon.disk();
    let dev = run_ok(
        "losetup",
        &["-f", "--show", "--direct-io=on", disk.to_str().unwrap()],
    );
    // The device's name is the last line (a warning may come before it).
    let dev = dev.lines().last().unwrap().trim().to_string();
    assert!(dev.starts_with("/dev/loop"), "losetup: {dev}");
    stack.loop_dev = Some(dev.clone());
    run_ok("mkfs.ext4", &["-q", "-F", &dev]);

    stack.mount(&fs);
    let copy = format!("{}/.", source.display());
    let into = fs.join("tree");
    run_ok("cp", &["-r", &copy, into.to_str().unwrap()]);
    // The file system's own data and metadata reach the loop device (and the disk).
    run_ok("sync", &["-f", into.to_str().unwrap()]);
    stack.unmount();

    let (status, report) = run("e2fsck", &["-fn", &dev]);
    assert!(
        status.success(),
        "{elevator}: e2fsck -fn: {status}: {report}"
    );
    let clean = report
        .lines()
        .find(|line| line.contains(" files (") && line.contains(" blocks"))
        .unwrap_or_else(|| panic!("no summary from e2fsck: {report}"))
        .to_string();

    stack.mount(&fs);
    assert_eq!(count_files(&into), FILES, "{elevator}");
    for entry in tree {
        let back = std::fs::read(into.join(&entry.path)).unwrap();
        let path = entry.path.display();
        assert_eq!(back.len(), entry.len, "{elevator}: {path}");
        assert_eq!(hash64(&back), entry.hash, "{elevator}: {path}");
    }
    stack.unmount();
    stack.detach_loop();
    let summary = stack.daemon.take().unwrap().stop();
    format!(
        "ext4 through blkmq-disk ({elevator}): {FILES} files ({bytes} bytes) copied, every hash \
         matches after remounting; e2fsck -fn exit 0: {clean}\n  {summary}"
    )
}

#[test]
fn ext4_is_clean_and_keeps_every_file_with_each_elevator() {
    if let Some(why) = skip() {
        eprintln!("skipped: {why}");
        return;
    }
    let source = TempDir(temp_dir("ext4-tree"));
    let tree = make_tree(&source.0);
    for elevator in ["mq-deadline", "none", "bfq"] {
        let line = ext4_on(elevator, &source.0, &tree);
        eprintln!("{line}");
    }
}
