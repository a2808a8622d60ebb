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

/// Opens `path` with `options` (to write: a log, a lock, a file about to be renamed
/// into place) only if it is, or becomes, a regular file: a FIFO left where such a file
/// goes (hostile-input probe: a FIX message log, store lock or store temporary file
/// made a FIFO) is refused at once with `InvalidInput` instead of hanging the start in
/// `open` until a reader comes; a socket or device is refused too.
pub fn open_regular(options: &std::fs::OpenOptions, path: &Path) -> io::Result<File> {
    use rustix::fs::OFlags;
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = options.clone();
    // A FIFO opened to write without a reader fails (ENXIO) rather than waiting.
    o.custom_flags(OFlags::NONBLOCK.bits() as i32);
    let file = o.open(path).map_err(|e| match e.raw_os_error() {
        Some(code) if code == rustix::io::Errno::NXIO.raw_os_error() => {
            io::Error::new(io::ErrorKind::InvalidInput, "a FIFO, not a regular file")
        }
        _ => e,
    })?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, socket or device)",
        ));
    }
    let flags = rustix::fs::fcntl_getfl(&file)?;
    rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK)?;
    Ok(file)
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

    #[test]
    fn only_regular_files_are_opened_to_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut append = std::fs::OpenOptions::new();
        append.create(true).append(true);
        let log = dir.path().join("a.log");
        {
            use std::io::Write;
            let mut f = open_regular(&append, &log).unwrap();
            f.write_all(b"one\n").unwrap();
            let mut f = open_regular(&append, &log).unwrap();
            f.write_all(b"two\n").unwrap();
            // Blocking again (O_APPEND kept), as an ordinary open gives.
            let fl = rustix::fs::fcntl_getfl(&f).unwrap();
            assert!(fl.contains(rustix::fs::OFlags::APPEND));
            assert!(!fl.contains(rustix::fs::OFlags::NONBLOCK));
        }
        assert_eq!(std::fs::read(&log).unwrap(), b"one\ntwo\n");
        // A FIFO without a reader: refused at once (a plain open waits for a reader).
        let fifo = dir.path().join("fifo");
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        let e = open_regular(&append, &fifo).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("FIFO"), "{e}");
        // With a reader, and a device: refused too.
        let reader = rustix::fs::open(
            &fifo,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let e = open_regular(&append, &fifo).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        drop(reader);
        let mut write = std::fs::OpenOptions::new();
        write.write(true);
        let e = open_regular(&write, Path::new("/dev/null")).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
}
