//! Reading the small files a command is pointed at (configurations, password files,
//! certificates, dictionaries) with a bound: a path may name a FIFO, whose open blocks
//! until a writer comes, or a device such as `/dev/zero`, which never ends
//! (hostile-input probe: `--config /dev/zero` read until memory ran out, a FIFO hung the
//! start with no message). A regular file (after symlinks) or a pipe of at most `max`
//! bytes is read: a pipe (`--config <(envsubst < tpl.toml)`) is opened without waiting
//! for a writer, and one that has none reads as empty.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// The bytes of the regular file or pipe at `path`, refused (`InvalidInput`) when it
/// is anything else and (`InvalidData`) when it holds more than `max` bytes. The type
/// is checked before the file is opened, and a pipe is opened without waiting for a
/// writer, so nothing here waits on one that never comes.
pub fn read_limited(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let meta = std::fs::metadata(path)?;
    let kind = meta.file_type();
    let file = if meta.is_file() {
        if meta.len() > max {
            return Err(too_big(max));
        }
        File::open(path)?
    } else if kind.is_fifo() {
        // Opened without waiting for a writer, then read blocking: to the writer's end,
        // or empty at once when there is none.
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        rustix::fs::fcntl_setfl(&fd, OFlags::empty())?;
        File::from(fd)
    } else {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file or a pipe (a socket or device)"
        };
        return Err(io::Error::new(io::ErrorKind::InvalidInput, what));
    };
    let mut out = Vec::new();
    // It may grow after the look: never more than `max` is read.
    file.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(too_big(max));
    }
    Ok(out)
}

fn too_big(max: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("larger than the {max} bytes such a file may hold"),
    )
}

/// [`read_limited`] as UTF-8 text (`InvalidData` when it is not).
pub fn read_to_string_limited(path: &Path, max: u64) -> io::Result<String> {
    String::from_utf8(read_limited(path, max)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_and_pipes_within_the_bound_only() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small");
        std::fs::write(&small, b"hello").unwrap();
        assert_eq!(read_limited(&small, 5).unwrap(), b"hello");
        assert_eq!(read_to_string_limited(&small, 100).unwrap(), "hello");
        let e = read_limited(&small, 4).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("larger than the 4 bytes"), "{e}");
        let e = read_limited(dir.path(), 100).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read_limited(&zero, 100).unwrap_err();
        assert!(e.to_string().contains("a socket or device"), "{e}");
        std::fs::write(&small, [0xff, 0xfe]).unwrap();
        assert!(read_to_string_limited(&small, 100).is_err());

        let fifo = dir.path().join("fifo");
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        // Without a writer: empty at once, not waited on (a blocking open waits).
        assert_eq!(read_limited(&fifo, 100).unwrap(), b"");
        // A pipe with a writer, as `<(...)` gives (`/dev/fd/N`): what it wrote.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "printf 'from a pipe'"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&out));
        let got = read_limited(Path::new(&path), 100).unwrap();
        child.wait().unwrap();
        drop(out);
        assert_eq!(got, b"from a pipe");
    }
}
