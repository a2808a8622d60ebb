//! The floor of `bench guaranteed` (`--target floor`): the publishers' exact bytes over
//! loopback TCP to a minimal server that appends everything it read to a file,
//! `fdatasync`s it (one sync per read batch: group commit) and answers one PUB_ACK
//! range per batch. No routing, no spool index, no delivery: what "TCP + write +
//! fsync before the ACK" costs on this machine, measured in the same session.
//!
//! The server speaks just enough of the protocol (HELLO, PUB_OPEN, PUBLISH) for the
//! tickwire publisher of [`super::tickwire`] to run unchanged against it. It runs as
//! threads of the measuring process (one per connection).

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};

use anyhow::Context;
use tickwire_wire::frame::{self, Frame, DEFAULT_MAX_FRAME};
use tickwire_wire::gm;

/// The window the floor grants (the tickwire router's default).
const WINDOW: u32 = 4096;

/// Starts the floor server on a free loopback port; it writes files under `dir`.
pub fn start(dir: &Path) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding the floor server")?;
    let addr = listener.local_addr()?;
    let dir = dir.to_path_buf();
    std::thread::Builder::new()
        .name("floor-accept".into())
        .spawn(move || {
            for (k, s) in listener.incoming().enumerate() {
                let Ok(s) = s else { continue };
                let path = dir.join(format!("floor-{k}.log"));
                let _ = std::thread::Builder::new()
                    .name(format!("floor-{k}"))
                    .spawn(move || serve(s, path));
            }
        })
        .context("spawning the floor server")?;
    Ok(addr)
}

fn serve(mut s: TcpStream, path: PathBuf) -> anyhow::Result<()> {
    s.set_nodelay(true)?;
    let mut file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut end, mut out) = (0usize, Vec::with_capacity(4096));
    loop {
        let n = s.read(&mut buf[end..])?;
        if n == 0 {
            return Ok(());
        }
        end += n;
        let mut at = 0;
        let mut acked: Option<(u64, u64)> = None;
        while let Some((f, len)) = frame::decode(&buf[at..end], DEFAULT_MAX_FRAME)
            .map_err(|e| anyhow::anyhow!("floor: malformed frame: {e}"))?
        {
            match f {
                Frame::Hello { .. } => {
                    frame::encode_welcome(&mut out, 1, DEFAULT_MAX_FRAME, "floor")
                }
                Frame::PubOpen { request_id, .. } => {
                    gm::encode_pub_opened(&mut out, request_id, WINDOW, 0)
                }
                Frame::Publish(m) => {
                    if let Some(seq) = m.seq {
                        acked = Some(acked.map_or((seq, seq), |(a, _)| (a, seq)));
                    }
                }
                _ => {}
            }
            at += len;
        }
        if acked.is_some() {
            // The batch's bytes, then one fdatasync for all of it.
            file.write_all(&buf[..at])?;
            file.sync_data()?;
        }
        if let Some((a, b)) = acked {
            gm::encode_pub_ack(&mut out, a, b);
        }
        if !out.is_empty() {
            s.write_all(&out)?;
            out.clear();
        }
        buf.copy_within(at..end, 0);
        end -= at;
    }
}
