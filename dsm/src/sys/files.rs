//! Files: bounded reads of regular files (no FIFO or device can block or flood a read)
//! and exclusive advisory locks on files that several processes update.

use std::io;

/// Why [`read_regular_file`] read nothing.
#[derive(Debug)]
pub enum ReadError {
    /// Opening or reading failed (the file is missing, unreadable, ...).
    Io(io::Error),
    /// A directory, device, FIFO or socket: something that could block or never end.
    NotRegular,
    /// Larger than the caller's limit (bytes).
    TooLarge { limit: u64 },
}

impl ReadError {
    /// True if the file does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::NotRegular => {
                f.write_str("it is not a regular file (a directory, device or pipe)")
            }
            ReadError::TooLarge { limit } => {
                write!(f, "it is larger than the limit of {}", size_text(*limit))
            }
        }
    }
}

impl std::error::Error for ReadError {}

/// A byte count as a limit is written: `64 MiB`, `512 KiB`, `100 bytes`.
pub fn size_text(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes % (1 << 10) == 0 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

/// Reads the whole of `path` if it is a regular file of at most `limit` bytes. The file is
/// opened with `O_NONBLOCK`, so that a FIFO does not block the open (it is then refused by
/// its type, checked on the open descriptor, so a file swapped between a check and the
/// open cannot slip through); a device such as `/dev/zero` is refused the same way, and a
/// file that grows past the limit while it is read is refused too.
pub fn read_regular_file(path: &std::path::Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(ReadError::Io)?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular);
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge { limit });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(bytes)
}

/// [`read_regular_file`] as UTF-8 text.
pub fn read_regular_text(path: &std::path::Path, limit: u64) -> Result<String, ReadError> {
    let bytes = read_regular_file(path, limit)?;
    String::from_utf8(bytes).map_err(|e| {
        ReadError::Io(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "it is not text (invalid UTF-8 at byte {})",
                e.utf8_error().valid_up_to()
            ),
        ))
    })
}

/// An exclusive advisory lock on a file (`flock`), held until dropped: serializes the
/// read-modify-write of a file that several processes update.
pub struct FileLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// Takes the exclusive lock on `path` (created if missing), waiting for another holder.
pub fn lock_file(path: &std::path::Path) -> io::Result<FileLock> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map(|lock| FileLock { _lock: lock })
        .map_err(|(_, e)| io::Error::from(e))
}

/// Takes the exclusive lock on `path` (created if missing) if nobody holds it, without
/// waiting: `None` if another process holds it. The holder's `note` (its pid, say) is
/// then written into the file, where another process that finds the lock taken can read
/// it ([`read_regular_text`]).
pub fn try_lock_file(path: &std::path::Path, note: &str) -> io::Result<Option<FileLock>> {
    use std::io::Write;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            lock.set_len(0)?;
            lock.write_all(note.as_bytes())?;
            Ok(Some(FileLock { _lock: lock }))
        }
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(io::Error::from(e)),
    }
}
