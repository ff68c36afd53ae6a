//! Memory: anonymous shared-memory files (memfd), address-space reservations, shared
//! mappings at a chosen or fixed address, page protections, populating page tables, and
//! the host's limits on memory and mappings.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

/// The error number of an allocation or mapping that ran out of memory.
pub const ENOMEM: i32 = libc::ENOMEM;

/// Creates an anonymous shared-memory file of `len` bytes (sparse: pages are allocated when
/// first touched). The descriptor is close-on-exec;
/// [`spawn_node_process`](super::spawn_node_process) hands it on explicitly.
pub fn memfd_create(name: &str, len: usize) -> io::Result<OwnedFd> {
    let cname = CString::new(name).map_err(|_| io::Error::other("memfd name contains NUL"))?;
    // SAFETY: cname is a valid NUL-terminated string; flags are valid.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by memfd_create and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::other("memfd too large"))?;
    // SAFETY: fd is a valid memfd.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Takes ownership of a descriptor inherited from the launcher.
///
/// # Safety
/// `fd` must be an open descriptor that nothing else in this process owns.
pub unsafe fn adopt_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: the caller guarantees that fd is open and unowned.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Page protections the protocol sets on the application's view of the heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prot {
    None,
    Read,
    ReadWrite,
}

impl Prot {
    fn bits(self) -> libc::c_int {
        match self {
            Prot::None => libc::PROT_NONE,
            Prot::Read => libc::PROT_READ,
            Prot::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        }
    }
}

/// A mapping owned by this process; unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    // Visible to the door's other files: `signals` wraps its alternate stacks in one.
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
}

// SAFETY: a Mapping is an address range; sharing the address between threads is sound, and
// every access to the memory goes through raw pointers whose users state their own rules.
unsafe impl Send for Mapping {}
// SAFETY: as above; &Mapping only hands out the address.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The mapping's length in bytes (the userfaultfd backend registers the whole view;
    /// the mprotect backend populates the used part of it).
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping this value created and still owns.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Reserves `len` bytes of address space with no access, to pick an address range that
/// later mappings replace with [`map_shared_fixed_noreplace`].
pub fn reserve(len: usize) -> io::Result<Mapping> {
    map_private(len, Prot::None)
}

/// Maps `len` bytes of private anonymous memory with protection `prot` at an address the
/// kernel picks. With `MAP_NORESERVE` the kernel's default overcommit policy charges it
/// only as it is touched or populated; under `vm.overcommit_memory=2` a writable mapping is
/// charged whole when it is made, and one beyond the commit limit fails here.
pub(super) fn map_private(len: usize, prot: Prot) -> io::Result<Mapping> {
    // SAFETY: an anonymous mapping at a kernel-chosen address has no preconditions.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot.bits(),
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Mapping {
        ptr: NonNull::new(p.cast()).expect("mmap returned null"),
        len,
    })
}

/// Maps `len` bytes of `fd` from `offset`, shared, with protection `prot`, at an address
/// the kernel picks.
pub fn map_shared(fd: &OwnedFd, offset: usize, len: usize, prot: Prot) -> io::Result<Mapping> {
    map_shared_inner(fd, offset, len, prot, None)
}

/// Maps at exactly `addr`, which must be free (the address was chosen by another process
/// of the same cluster; MAP_FIXED_NOREPLACE refuses to clobber anything).
pub fn map_shared_fixed_noreplace(
    fd: &OwnedFd,
    offset: usize,
    len: usize,
    prot: Prot,
    addr: usize,
) -> io::Result<Mapping> {
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; fd is valid.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            prot.bits(),
            libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE,
            fd.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    if p as usize != addr {
        // Old kernels ignore the flag and treat it as a hint.
        // SAFETY: p/len is the mapping just created.
        unsafe { libc::munmap(p, len) };
        return Err(io::Error::other(format!(
            "address {addr:#x} is not free in this process"
        )));
    }
    Ok(Mapping {
        ptr: NonNull::new(p.cast()).expect("mmap returned null"),
        len,
    })
}

fn map_shared_inner(
    fd: &OwnedFd,
    offset: usize,
    len: usize,
    prot: Prot,
    addr: Option<usize>,
) -> io::Result<Mapping> {
    let (hint, extra) = match addr {
        Some(a) => (a as *mut libc::c_void, libc::MAP_FIXED),
        None => (std::ptr::null_mut(), 0),
    };
    // SAFETY: with MAP_FIXED the caller checked that addr lies inside a reservation this
    // process owns, so no live Rust object is replaced; fd is valid.
    let p = unsafe {
        libc::mmap(
            hint,
            len,
            prot.bits(),
            libc::MAP_SHARED | extra,
            fd.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Mapping {
        ptr: NonNull::new(p.cast()).expect("mmap returned null"),
        len,
    })
}

/// Changes the protection of `[addr, addr + len)`, which must be inside a mapping this
/// process made.
pub fn protect(addr: usize, len: usize, prot: Prot) -> io::Result<()> {
    // SAFETY: changing protections cannot violate Rust's memory safety by itself: the heap
    // view is only accessed through raw pointers, and a fault on it is handled.
    let rc = unsafe { libc::mprotect(addr as *mut libc::c_void, len, prot.bits()) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOMEM) {
            return Err(io::Error::other(format!(
                "mprotect failed with ENOMEM: this process has too many memory mappings \
                 (vm.max_map_count = {}); run one node per process or use a smaller heap",
                max_map_count().unwrap_or(0)
            )));
        }
        return Err(e);
    }
    Ok(())
}

/// Makes each page of `[addr, addr + len)`, the start of a mapping of `mapped` bytes that
/// this process made, a kernel memory area of its own, so that a later change of one
/// page's protection changes that area in place. Inside a larger area `mprotect` splits it
/// around the page, and merges the pieces back once they match again: on the development
/// host a fault + `mprotect` round trip on a page inside a 64 MiB mapping took 4.9-5.2 us
/// against 3.6-3.9 on a one-page mapping. Every other page gets the advice `MADV_RANDOM`,
/// and the kernel never merges areas whose flags differ; so that the last page is not
/// merged with the rest of the mapping, the rest gets the other flag than it. The flag
/// turns off read-ahead, which shared memory present before any access never does, and
/// since Linux 6.3 makes reclaim ignore the accessed bits seen through these areas (the
/// runtime's own mapping of the same pages is still counted). The range then takes one of
/// the process's `vm.max_map_count` mappings per page. If advice fails (too many
/// mappings), the whole mapping is advised back to one area and the error returned.
pub fn one_area_per_page(addr: usize, len: usize, mapped: usize, page: usize) -> io::Result<()> {
    let end = addr + len;
    let split = || -> io::Result<()> {
        let mut at = addr + page;
        while at < end {
            advise(at, page.min(end - at), libc::MADV_RANDOM)?;
            at += 2 * page;
        }
        // An odd number of pages leaves the last one unadvised, like the rest.
        let pages = len.div_ceil(page);
        if pages % 2 == 1 && mapped > len {
            advise(end, mapped - len, libc::MADV_RANDOM)?;
        }
        Ok(())
    };
    split().inspect_err(|_| {
        let _ = advise(addr, mapped, libc::MADV_NORMAL);
    })
}

/// `madvise(addr, len, advice)` on memory of this process, for an advice that changes no
/// byte and no protection: read-ahead advice (`MADV_NORMAL`, `MADV_RANDOM`) and
/// `MADV_POPULATE_WRITE`, which only faults pages in (a range not mapped read-write
/// fails with an error).
fn advise(addr: usize, len: usize, advice: libc::c_int) -> io::Result<()> {
    debug_assert!(
        [libc::MADV_NORMAL, libc::MADV_RANDOM, MADV_POPULATE_WRITE].contains(&advice),
        "advice {advice} may change memory"
    );
    // SAFETY: the advice is one of those above, which change no byte and no protection,
    // so no memory Rust can see changes under it.
    let rc = unsafe { libc::madvise(addr as *mut libc::c_void, len, advice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `MADV_POPULATE_WRITE` (Linux 5.14), not in the libc crate.
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Fills the page tables of `[addr, addr + len)`, a shared mapping of a memfd that this
/// process made, as writes would, without changing any byte: pages of the file nobody
/// touched yet are allocated (zero-filled, as they read anyway). The runtime's first
/// access to each page then takes no page fault. A mapping with no access is opened
/// for the call and closed again; its page table entries stay filled, so opening a page
/// later with [`protect`] needs no fault either.
pub fn populate_shared(addr: usize, len: usize, prot: Prot) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    if prot != Prot::ReadWrite {
        protect(addr, len, Prot::ReadWrite)?;
    }
    let populated = populate_writable(addr, len);
    if prot != Prot::ReadWrite {
        protect(addr, len, prot)?;
    }
    populated
}

/// Fills the page tables of `[addr, addr + len)`, read-write memory of this process, as
/// writes would, without changing any byte (`MADV_POPULATE_WRITE`): pages not there yet
/// are allocated zero-filled.
pub(super) fn populate_writable(addr: usize, len: usize) -> io::Result<()> {
    advise(addr, len, MADV_POPULATE_WRITE)
}

/// The kernel's limit on mappings per process.
pub fn max_map_count() -> Option<usize> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The machine's physical memory (`MemTotal` in /proc/meminfo), if it can be read.
pub fn total_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many of this process's kernel memory areas overlap `[addr, addr + len)`.
    fn areas_in(addr: usize, len: usize) -> usize {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
        maps.lines()
            .filter(|line| {
                let range = line.split_whitespace().next().expect("a range");
                let (a, b) = range.split_once('-').expect("start-end");
                let a = usize::from_str_radix(a, 16).expect("hex start");
                let b = usize::from_str_radix(b, 16).expect("hex end");
                a < addr + len && b > addr
            })
            .count()
    }

    #[test]
    fn a_range_split_per_page_keeps_an_area_per_page_through_protection_changes() {
        let (page, n) = (8192, 16);
        let fd = memfd_create("cashmere-test-areas", page * n).expect("memfd");
        let m = map_shared(&fd, 0, page * n, Prot::None).expect("map");
        let (base, len) = (m.addr(), m.len());
        assert_eq!(areas_in(base, len), 1);
        // The kernel's own way, which the split avoids: a change splits the area, and the
        // change back merges it again.
        protect(base + 3 * page, page, Prot::Read).expect("protect");
        assert_eq!(areas_in(base, len), 3, "a change inside one area splits it");
        protect(base + 3 * page, page, Prot::None).expect("protect");
        assert_eq!(areas_in(base, len), 1, "the pieces merge back");

        one_area_per_page(base, len, len, page).expect("split");
        assert_eq!(areas_in(base, len), n, "one area per page");
        for (p, prot) in [(3, Prot::Read), (4, Prot::Read), (5, Prot::ReadWrite), (3, Prot::None)] {
            protect(base + p * page, page, prot).expect("protect");
            assert_eq!(areas_in(base, len), n, "page {p} changed to {prot:?}");
        }
    }

    #[test]
    fn the_last_page_of_an_odd_split_stays_apart_from_the_rest_of_the_mapping() {
        let (page, n, used) = (8192, 16, 5);
        let fd = memfd_create("cashmere-test-areas-odd", page * n).expect("memfd");
        let m = map_shared(&fd, 0, page * n, Prot::None).expect("map");
        let base = m.addr();
        one_area_per_page(base, used * page, m.len(), page).expect("split");
        // Five pages of their own, and the rest of the mapping one area.
        assert_eq!(areas_in(base, m.len()), used + 1);
        protect(base + (used - 1) * page, page, Prot::Read).expect("protect");
        assert_eq!(areas_in(base, m.len()), used + 1, "the last page changed in place");
    }
}
