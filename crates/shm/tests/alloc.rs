//! Both link ends allocate nothing per message in steady state: the router's
//! `ServerLink` (read and write like a socket) and the client's `ClientLink` (send,
//! recv). Its own test binary, so the counting allocator is this file's alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::time::Duration;

use tickwire_alloc_count::{allocations_during, assert_counting, CountingAlloc};
use tickwire_shm::{socket_path, ClientLink, Listener};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[test]
fn link_reads_and_writes_allocate_nothing() {
    assert_counting();
    let path = socket_path(&format!("alloc-{}", std::process::id()));
    let l = Listener::bind(&path, 64 * 1024).unwrap();
    let p = path.clone();
    let client = std::thread::spawn(move || ClientLink::connect(&p, Duration::from_secs(5)));
    let mut server = loop {
        if let Some(s) = l.accept().unwrap() {
            break s;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let mut c = client.join().unwrap().unwrap();
    let msg = [9u8; 100];
    let mut buf = vec![0u8; 64 * 1024];
    let mut round = |c: &mut ClientLink, server: &mut tickwire_shm::ServerLink| {
        for _ in 0..100 {
            assert_eq!(c.send(&msg).unwrap(), msg.len());
        }
        let mut got = 0;
        while got < 100 * msg.len() {
            got += server.read(&mut buf).unwrap();
        }
        for _ in 0..100 {
            assert_eq!(server.write(&msg).unwrap(), msg.len());
        }
        let mut got = 0;
        while got < 100 * msg.len() {
            got += c.recv(&mut buf).unwrap();
        }
    };
    for _ in 0..10 {
        round(&mut c, &mut server);
    }
    let ((), n) = allocations_during(|| {
        for _ in 0..1000 {
            round(&mut c, &mut server);
        }
    });
    assert_eq!(
        n, 0,
        "{n} allocations for 200,000 messages through both rings"
    );
}
