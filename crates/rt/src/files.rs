//! Reading the small files a command is pointed at (configurations, password files,
//! certificates, dictionaries) with a bound: a path may name a FIFO, which blocks an
//! open forever, or a device such as `/dev/zero`, which never ends (hostile-input
//! probe: `--config /dev/zero` read until memory ran out, a FIFO hung the start with no
//! message). Only a regular file (after symlinks) of at most `max` bytes is read.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// The bytes of the regular file at `path`, refused (`InvalidInput`) when it is not a
/// regular file and (`InvalidData`) when it holds more than `max` bytes. The type is
/// checked before the file is opened, so a FIFO is refused, not waited on.
pub fn read_limited(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file (a FIFO, socket or device)"
        };
        return Err(io::Error::new(io::ErrorKind::InvalidInput, what));
    }
    let too_big = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than the {max} bytes such a file may hold"),
        )
    };
    if meta.len() > max {
        return Err(too_big());
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    // It may grow after the look: never more than `max` is read.
    File::open(path)?.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(too_big());
    }
    Ok(out)
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
    fn regular_files_within_the_bound_only() {
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
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let fifo = dir.path().join("fifo");
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        // Refused at once, not waited on (the open of a FIFO blocks for a writer).
        let e = read_limited(&fifo, 100).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        std::fs::write(&small, [0xff, 0xfe]).unwrap();
        assert!(read_to_string_limited(&small, 100).is_err());
    }
}
