//! A full disk, simulated with a file-size rlimit (RLIMIT_FSIZE) in a child process:
//! writes past the limit fail with EFBIG (SIGXFSZ is caught so it does not kill the
//! process), exactly like ENOSPC from the spool's point of view: a partial write, then
//! an error. Chosen over a size-limited tmpfs because it needs no mount privilege, so it
//! runs the same on every machine and in CI.
//!
//! The test re-runs its own binary with an environment variable set, so the limit (a
//! per-process setting) never touches the other tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use tickwire_spool::{Appender, Config, Durable, Lsn, SkippedRange, Spool};

const CHILD: &str = "TICKWIRE_SPOOL_DISK_FULL_CHILD";
const NAME: &str = "failed_batch_is_reported_and_later_batches_succeed_once_space_frees_up";

#[test]
fn failed_batch_is_reported_and_later_batches_succeed_once_space_frees_up() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("disk-full child: ok"),
        "child did not run:\n{stdout}\n{stderr}"
    );
}

/// Appends one batch of 10 records of 100 bytes (1,160 bytes on disk) and waits for
/// its outcome.
fn batch(app: &mut Appender) -> Durable {
    let first = app.next_lsn();
    for _ in 0..10 {
        app.append(&[0xAB; 100]).unwrap();
    }
    app.flush();
    let last = Lsn(first.0 + 9);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        while let Some(d) = app.poll_durable() {
            match d {
                Durable::Through(l) if l >= last => return d,
                Durable::Failed { last: l, .. } if l >= last => return d,
                Durable::Failed { .. } => panic!("unexpected failure {d:?}"),
                Durable::Through(_) => {}
            }
        }
        assert!(Instant::now() < deadline, "no outcome for {first}..={last}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn child() {
    // SIGXFSZ would kill the process; with a handler the write returns EFBIG instead.
    signal_hook::flag::register(
        signal_hook::consts::SIGXFSZ,
        Arc::new(AtomicBool::new(false)),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = Config::new(dir.path());
    let (spool, _) = Spool::open(config.clone(), |_, _| {}).unwrap();
    let mut app = spool.start(Box::new(|| {})).unwrap();

    let original = getrlimit(Resource::Fsize);
    setrlimit(
        Resource::Fsize,
        Rlimit {
            current: Some(8192),
            maximum: original.maximum,
        },
    )
    .unwrap();
    // 7 batches fit (8,120 bytes), the 8th and 9th do not.
    for k in 0..7 {
        assert_eq!(batch(&mut app), Durable::Through(Lsn(10 * k + 10)));
    }
    let full = |first, last| Durable::Failed {
        first: Lsn(first),
        last: Lsn(last),
        kind: io::ErrorKind::FileTooLarge,
    };
    assert_eq!(batch(&mut app), full(71, 80));
    assert_eq!(batch(&mut app), full(81, 90));
    let seg = dir.path().join(format!("{:020}.log", 1));
    assert_eq!(
        std::fs::metadata(&seg).unwrap().len(),
        8120,
        "the partial writes were truncated"
    );

    // Space frees up: the next batch goes through, numbering continues after the gap.
    setrlimit(Resource::Fsize, original).unwrap();
    assert_eq!(batch(&mut app), Durable::Through(Lsn(100)));
    let stats = app.stats();
    assert_eq!((stats.records_written, stats.failed_batches), (80, 2));
    app.close().unwrap();

    let mut got = Vec::new();
    let (spool, report) = Spool::open(config, |lsn, _| got.push(lsn.0)).unwrap();
    assert_eq!(got, (1..=70).chain(91..=100).collect::<Vec<_>>());
    assert!(report.damaged.is_empty(), "{report:?}");
    assert!(report.torn_tail.is_none());
    assert_eq!(
        report.skipped,
        vec![SkippedRange {
            first: Lsn(71),
            last: Lsn(90)
        }]
    );
    assert_eq!(spool.next_lsn(), Lsn(101));
    println!("disk-full child: ok");
}
