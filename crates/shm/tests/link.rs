//! The handshake and both link ends over a real Unix socket and memfd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use tickwire_shm::{socket_path, ClientLink, Listener};

fn name(test: &str) -> String {
    format!("link-{test}-{}", std::process::id())
}

fn accept(l: &Listener) -> tickwire_shm::ServerLink {
    for _ in 0..1000 {
        if let Some(s) = l.accept().unwrap() {
            return s;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("no client");
}

#[test]
fn handshake_bytes_both_ways_and_end_of_stream() {
    let path = socket_path(&name("basic"));
    let l = Listener::bind(&path, 4096).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let p = path.clone();
    let client = std::thread::spawn(move || ClientLink::connect(&p, Duration::from_secs(5)));
    let mut server = accept(&l);
    let mut c = client.join().unwrap().unwrap();

    let mut buf = [0u8; 16];
    assert_eq!(
        server.read(&mut buf).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    assert_eq!(c.send(b"hello").unwrap(), 5);
    assert_eq!(server.read(&mut buf).unwrap(), 5);
    assert_eq!(&buf[..5], b"hello");
    assert_eq!(server.write(b"world").unwrap(), 5);
    let ready = c.wait(true, false, Some(Duration::from_secs(1))).unwrap();
    assert!(ready.input);
    assert_eq!(c.recv(&mut buf).unwrap(), 5);

    // A sleeping client is woken by the doorbell.
    let waiter = std::thread::spawn(move || {
        let r = c.wait(true, false, Some(Duration::from_secs(10))).unwrap();
        (r, c)
    });
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(server.write(b"x").unwrap(), 1);
    let (r, mut c) = waiter.join().unwrap();
    assert!(r.input);
    assert_eq!(c.recv(&mut buf).unwrap(), 1);

    // The client's end: the router reads what is left, then end of stream.
    assert_eq!(c.send(b"bye").unwrap(), 3);
    drop(c);
    server.hint_ctl_event();
    assert_eq!(server.read(&mut buf).unwrap(), 3);
    assert_eq!(server.read(&mut buf).unwrap(), 0);
    drop(l);
    assert!(!path.exists(), "the socket file is removed");
}

#[test]
fn a_client_that_corrupts_its_tail_is_reported() {
    let path = socket_path(&name("corrupt"));
    let l = Listener::bind(&path, 4096).unwrap();
    let p = path.clone();
    let client = std::thread::spawn(move || ClientLink::connect(&p, Duration::from_secs(5)));
    let mut server = accept(&l);
    let c = client.join().unwrap().unwrap();
    // Simulate the hostile client through its own mapping: a huge tail.
    c.debug_store_tail(u64::MAX / 2);
    let mut buf = [0u8; 16];
    assert_eq!(
        server.read(&mut buf).unwrap_err().kind(),
        ErrorKind::InvalidData
    );
}

#[test]
fn a_live_socket_is_not_stolen_and_a_stale_one_is_replaced() {
    let path = socket_path(&name("stale"));
    let l = Listener::bind(&path, 4096).unwrap();
    assert_eq!(
        Listener::bind(&path, 4096).unwrap_err().kind(),
        ErrorKind::AddrInUse
    );
    drop(l);
    // A file left behind by a dead router.
    let dead = std::os::unix::net::UnixListener::bind(&path).unwrap();
    drop(dead);
    let l = Listener::bind(&path, 4096).unwrap();
    drop(l);
}

/// Regression (hostile-input probe): a NAME that is the path of a regular file (a
/// mistyped flag or config key) replaced the file with the socket, and the socket was
/// removed at exit: the file was gone.
#[test]
fn a_file_that_is_not_a_socket_is_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("precious.txt");
    std::fs::write(&path, b"precious data").unwrap();
    let e = Listener::bind(&path, 4096).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists);
    assert!(e.to_string().contains("is not a socket"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"precious data");
    let sub = dir.path().join("a-directory");
    std::fs::create_dir(&sub).unwrap();
    assert!(Listener::bind(&sub, 4096).is_err());
    assert!(sub.is_dir());
}

/// Regression (hostile-input probe, c8e): the socket was bound under a temporary name
/// with the umask's permissions and only then restricted, so with umask 000 another
/// user could connect in between. It is now bound inside a private 0700 directory and
/// renamed out: right after bind it is 0600, and nothing else is left behind.
#[test]
fn the_socket_is_private_from_the_start_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("umask.sock");
    let old = rustix::process::umask(rustix::fs::Mode::empty());
    let l = Listener::bind(&path, 4096);
    rustix::process::umask(old);
    let l = l.unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["umask.sock"], "temporary files left behind");
    drop(l);
    assert!(!path.exists());
}

/// Hostile-input probe: a router whose socket file had been removed, and whose NAME a
/// second router then bound, removed the second router's socket when it exited: that
/// router ran on, unreachable over shared memory. A listener removes only its own file.
#[test]
fn a_listener_removes_only_its_own_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared-name.sock");
    let first = Listener::bind(&path, 4096).unwrap();
    std::fs::remove_file(&path).unwrap();
    let second = Listener::bind(&path, 4096).unwrap();
    drop(first);
    assert!(
        path.exists(),
        "the first listener removed the second's socket"
    );
    // Still the second's: a connection reaches its listener.
    std::os::unix::net::UnixStream::connect(&path).unwrap();
    drop(second);
    assert!(!path.exists());
}

/// A second router on a live socket is refused; when the socket belongs to another
/// user the error says so (checked as root, who can hand the file to `nobody`).
#[test]
fn a_live_socket_is_refused_and_a_foreign_owner_named() {
    let path = socket_path(&name("taken"));
    let _first = Listener::bind(&path, 4096).unwrap();
    let e = Listener::bind(&path, 4096).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrInUse);
    assert!(e.to_string().contains("a router already listens"), "{e}");
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let e = Listener::bind(&path, 4096).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AddrInUse);
        assert!(e.to_string().contains("another user (uid 65534)"), "{e}");
    }
}

/// Minor page faults of the calling thread so far.
fn thread_minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(7).unwrap().parse().unwrap()
}

/// docs/shm.md, "Page faults": after the client's first bytes the router's end writes
/// its whole outbound ring without faulting page by page (the prefault helper mapped
/// it); before them, nothing was handed over, and the control shows what writing an
/// unmapped ring costs.
#[test]
fn the_routers_end_is_mapped_in_after_the_clients_first_bytes() {
    const RING: usize = 1 << 20;
    let path = socket_path(&name("prefault"));
    let l = Listener::bind(&path, RING).unwrap();
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let p = path.clone();
        let client = std::thread::spawn(move || ClientLink::connect(&p, Duration::from_secs(5)));
        let server = accept(&l);
        pairs.push((server, client.join().unwrap().unwrap()));
    }
    let (mut control, _control_client) = pairs.remove(0);
    let (mut server, mut client) = pairs.remove(0);

    // Writes a lap of the outbound ring in 4 KiB steps; returns this thread's faults.
    // The client never reads: the ring fills exactly once.
    let lap = |s: &mut tickwire_shm::ServerLink| {
        let page = [7u8; 4096];
        let before = thread_minor_faults();
        let mut written = 0;
        while written < RING {
            written += s.write(&page).unwrap();
        }
        thread_minor_faults() - before
    };

    assert_eq!(client.send(b"first").unwrap(), 5);
    let mut buf = [0u8; 8];
    assert_eq!(server.read(&mut buf).unwrap(), 5);
    // The helper needs ~0.1 ms for 2 MiB; it has a second.
    std::thread::sleep(Duration::from_secs(1));
    let mapped = lap(&mut server);
    let unmapped = lap(&mut control);
    assert!(
        unmapped > 128,
        "the control ring (no bytes from its client, so not handed over) faulted only \
         {unmapped} times in 256 pages"
    );
    assert!(
        mapped < 16,
        "{mapped} faults writing 256 pages the helper should have mapped in"
    );
}
