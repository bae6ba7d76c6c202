//! Seed 000's figures as posted (linux-block, October 2016): an SD card on Linux 4.9-rc2,
//! through the legacy MMC path and after a naive switch to blk-mq. The card model's
//! defaults are fitted to the first.

/// The seed's `dd`, `find` and iozone output before the switch to blk-mq (the legacy MMC
/// path), as posted.
///
/// ```
/// use blkmq_sim::{IozoneGrid, IozoneTest, SEED_000_BEFORE};
/// let grid = IozoneGrid::parse(SEED_000_BEFORE).unwrap();
/// assert_eq!(grid.get(4, IozoneTest::Read), Some(6052));
/// assert!(SEED_000_BEFORE.contains("47.781464 seconds, 21.4MB/s"));
/// ```
pub const SEED_000_BEFORE: &str = "\
time dd if=/dev/mmcblk0 of=/dev/null bs=1M count=1024
1024+0 records in
1024+0 records out
1073741824 bytes (1.0GB) copied, 47.781464 seconds, 21.4MB/s
real    0m 47.79s
user    0m 0.02s
sys     0m 9.35s

mount /dev/mmcblk0p1 /mnt/
cd /mnt/
time find . > /dev/null
real    0m 3.60s
user    0m 0.25s
sys     0m 1.58s

mount /dev/mmcblk0p1 /mnt/
iozone -az -i0 -i1 -i2 -s 20m -I -f /mnt/foo.test
(kBytes/second)
                                                    random    random
    kB  reclen    write  rewrite    read    reread    read     write
 20480       4     2112     2157     6052     6060     6025       40
 20480       8     4820     5074     9163     9121     9125       81
 20480      16     5755     5242    12317    12320    12280      165
 20480      32     6176     6261    14981    14987    14962      336
 20480      64     6547     5875    16826    16828    16810      692
 20480     128     6762     6828    17899    17896    17896     1408
 20480     256     6802     6871    16960    17513    18373     3048
 20480     512     7220     7252    18675    18746    18741     7228
 20480    1024     7222     7304    18436    17858    18246     7322
 20480    2048     7316     7398    18744    18751    18526     7419
 20480    4096     7520     7636    20774    20995    20703     7609
 20480    8192     7519     7704    21850    21489    21467     7663
 20480   16384     7395     7782    22399    22210    22215     7781
";

/// The same after the naive switch to blk-mq, as posted.
///
/// ```
/// use blkmq_sim::{IozoneGrid, IozoneTest, SEED_000_AFTER};
/// let grid = IozoneGrid::parse(SEED_000_AFTER).unwrap();
/// assert_eq!(grid.get(8, IozoneTest::Read), Some(8014));
/// assert!(SEED_000_AFTER.contains("real    0m 4.42s"));
/// ```
pub const SEED_000_AFTER: &str = "\
time dd if=/dev/mmcblk0 of=/dev/null bs=1M count=1024
1024+0 records in
1024+0 records out
1073741824 bytes (1.0GB) copied, 60.551117 seconds, 16.9MB/s
real    1m 0.56s
user    0m 0.02s
sys     0m 9.81s

mount /dev/mmcblk0p1 /mnt/
cd /mnt/
time find . > /dev/null
real    0m 4.42s
user    0m 0.24s
sys     0m 1.81s

mount /dev/mmcblk0p1 /mnt/
iozone -az -i0 -i1 -i2 -s 20m -I -f /mnt/foo.test
(kBytes/second)
                                                    random    random
    kB  reclen    write  rewrite    read    reread    read     write
 20480       4     2086     2201     6024     6036     6006       40
 20480       8     4812     5036     8014     9121     9090       82
 20480      16     5432     5633    12267     9776    12212      168
 20480      32     6180     6233    14870    14891    14852      340
 20480      64     6382     5454    16744    16771    16746      702
 20480     128     6761     6776    17816    17846    17836     1394
 20480     256     6828     6842    17789    17895    17094     3084
 20480     512     7158     7222    17957    17681    17698     7232
 20480    1024     7215     7274    18642    17679    18031     7300
 20480    2048     7229     7269    17943    18642    17732     7358
 20480    4096     7212     7360    18272    18157    18889     7371
 20480    8192     7008     7271    18632    18707    18225     7282
 20480   16384     6889     7211    18243    18429    18018     7246
";
