//! Property tests of recovery: tail cuts at every position, byte flips anywhere,
//! arbitrary bytes as a segment file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use tickwire_spool::{Config, Lsn, RecoveryReport, Spool, SyncPolicy};

/// Writes `records` through the appender, flushing after each group of `group`.
fn write_log(dir: &Path, records: &[Vec<u8>], group: usize, segment_size: u64) -> Config {
    let mut config = Config::new(dir);
    config.segment_size = segment_size;
    config.sync = SyncPolicy::PageCache;
    config.max_record = 256;
    let (spool, _) = Spool::open(config.clone(), |_, _| {}).unwrap();
    let mut app = spool.start(Box::new(|| {})).unwrap();
    for (i, r) in records.iter().enumerate() {
        app.append(r).unwrap();
        if (i + 1) % group == 0 {
            app.flush();
        }
    }
    app.close().unwrap();
    config
}

fn recover(config: &Config) -> (Vec<(u64, Vec<u8>)>, RecoveryReport) {
    let mut got = Vec::new();
    let (_, report) = Spool::open(config.clone(), |lsn, p| got.push((lsn.0, p.to_vec()))).unwrap();
    (got, report)
}

/// (start, end, lsn) of one record in a segment file.
type Span = (u64, u64, u64);

/// Segment files in order, with the span of each record in them.
fn layout(dir: &Path) -> Vec<(PathBuf, Vec<Span>)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let b = std::fs::read(&f).unwrap();
            let mut recs = Vec::new();
            let mut off = 0usize;
            while off < b.len() {
                let len = u32::from_le_bytes(b[off..off + 4].try_into().unwrap()) as usize;
                let lsn = u64::from_le_bytes(b[off + 8..off + 16].try_into().unwrap());
                recs.push((off as u64, (off + 16 + len) as u64, lsn));
                off += 16 + len;
            }
            (f, recs)
        })
        .collect()
}

fn records() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..60), 1..40)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// A cut anywhere in the last segment: recovery returns exactly the records that
    /// end at or before the cut, reports the bytes cut, no damage, and numbering goes on.
    #[test]
    fn tail_cut_recovers_exactly_the_valid_prefix(
        recs in records(), group in 1usize..8, seg in 100u64..600, cut_frac in 0.0f64..1.0,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let config = write_log(dir.path(), &recs, group, seg);
        let lay = layout(dir.path());
        let (last_path, last_recs) = lay.last().unwrap();
        let len = last_recs.last().map_or(0, |r| r.1);
        let cut = (cut_frac * len as f64) as u64;
        std::fs::OpenOptions::new().write(true).open(last_path).unwrap().set_len(cut).unwrap();
        let kept_in_last = last_recs.iter().filter(|r| r.1 <= cut).count();
        let kept_end = last_recs.iter().filter(|r| r.1 <= cut).map(|r| r.1).max().unwrap_or(0);
        let before: usize = lay[..lay.len() - 1].iter().map(|s| s.1.len()).sum();
        let expect = before + kept_in_last;

        let (got, report) = recover(&config);
        prop_assert_eq!(&report.damaged, &vec![]);
        prop_assert_eq!(got.len(), expect);
        for (i, (lsn, p)) in got.iter().enumerate() {
            prop_assert_eq!(*lsn, i as u64 + 1);
            prop_assert_eq!(p, &recs[i]);
        }
        prop_assert_eq!(report.torn_tail.as_ref().map_or(0, |t| t.bytes_cut), cut - kept_end);
        prop_assert_eq!(report.next_lsn, Lsn(expect as u64 + 1));
        prop_assert_eq!(std::fs::metadata(last_path).unwrap().len(), kept_end);
        // Recovering again finds a clean log.
        let (again, report) = recover(&config);
        prop_assert_eq!(again.len(), expect);
        prop_assert!(report.torn_tail.is_none() && report.damaged.is_empty());
    }

    /// One flipped byte anywhere: never a panic, only genuine records delivered, every
    /// record before the flipped one delivered; damage reported unless the flip hit the
    /// final record of the last segment (a torn tail).
    #[test]
    fn byte_flip_is_damage_or_torn_tail(
        recs in records(), group in 1usize..8, seg in 100u64..600,
        pick in any::<prop::sample::Index>(), mask in 1u8..=255,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let config = write_log(dir.path(), &recs, group, seg);
        let lay = layout(dir.path());
        let all: Vec<(usize, u64, u64, u64)> = lay
            .iter()
            .enumerate()
            .flat_map(|(s, (_, rs))| rs.iter().map(move |r| (s, r.0, r.1, r.2)))
            .collect();
        let total: u64 = all.iter().map(|r| r.2 - r.1).sum();
        // The n-th byte of the log, and the record holding it.
        let mut n = pick.index(total as usize) as u64;
        let mut hit = all[0];
        for r in &all {
            if n < r.2 - r.1 { hit = *r; break; }
            n -= r.2 - r.1;
        }
        let (s, start, _, hit_lsn) = hit;
        let path = &lay[s].0;
        let mut bytes = std::fs::read(path).unwrap();
        bytes[(start + n) as usize] ^= mask;
        std::fs::write(path, &bytes).unwrap();

        let (got, report) = recover(&config);
        for (lsn, p) in &got {
            prop_assert_eq!(p, &recs[*lsn as usize - 1]);
        }
        prop_assert!(got.windows(2).all(|w| w[0].0 < w[1].0));
        let delivered_before = got.iter().filter(|g| g.0 < hit_lsn).count() as u64;
        prop_assert_eq!(delivered_before, hit_lsn - 1);
        prop_assert!(!got.iter().any(|g| g.0 == hit_lsn));
        let final_of_log = hit_lsn == recs.len() as u64;
        if final_of_log {
            prop_assert!(report.damaged.is_empty(), "{:?}", report);
            prop_assert!(report.torn_tail.is_some());
            prop_assert_eq!(got.len(), recs.len() - 1);
        } else {
            prop_assert!(!report.damaged.is_empty(), "{:?}", report);
        }
        // Numbers are never reused after damage.
        prop_assert!(report.next_lsn.0 > recs.len() as u64 - u64::from(final_of_log));
    }

    /// Arbitrary bytes as segment files: no panic, bounded reads, payloads within
    /// max_record, and the spool still opens for appending.
    #[test]
    fn arbitrary_segment_bytes_never_panic(
        files in prop::collection::vec((1u64..1000, prop::collection::vec(any::<u8>(), 0..2048)), 1..4),
        valid_prefix in 0usize..4,
    ) {
        let dir = tempfile::tempdir().unwrap();
        for (i, (first, bytes)) in files.iter().enumerate() {
            let mut content = Vec::new();
            if i == 0 {
                // Sometimes a few valid records first, so the fuzz reaches past them.
                for k in 0..valid_prefix as u64 {
                    let lsn = first + k;
                    let payload = [k as u8; 5];
                    content.extend_from_slice(&5u32.to_le_bytes());
                    let crc = crc32c::crc32c_append(crc32c::crc32c(&lsn.to_le_bytes()), &payload);
                    content.extend_from_slice(&crc.to_le_bytes());
                    content.extend_from_slice(&lsn.to_le_bytes());
                    content.extend_from_slice(&payload);
                }
            }
            content.extend_from_slice(bytes);
            std::fs::write(dir.path().join(format!("{first:020}.log")), content).unwrap();
        }
        let mut config = Config::new(dir.path());
        config.max_record = 64;
        config.sync = SyncPolicy::PageCache;
        let mut n = 0;
        let (spool, report) = Spool::open(config, |_, p| {
            assert!(p.len() <= 64);
            n += 1;
        }).unwrap();
        prop_assert_eq!(report.records, n);
        let next = spool.next_lsn();
        let mut app = spool.start(Box::new(|| {})).unwrap();
        prop_assert_eq!(app.append(b"after").unwrap(), next);
        app.close().unwrap();
    }
}
