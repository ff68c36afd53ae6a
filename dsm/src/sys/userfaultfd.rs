//! userfaultfd (cargo feature `userfaultfd`): heap views registered for missing, minor and
//! write-protect faults, delivered as SIGBUS to the same handler as the mprotect
//! backend's faults.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::Mapping;

/// A heap view registered with userfaultfd for missing, minor and write-protect faults.
///
/// With `UFFD_FEATURE_SIGBUS` the kernel raises SIGBUS in the faulting thread instead of
/// queueing an event for a handler thread, so the fault reaches the same signal handler
/// as the mprotect backend's (see [`register_fault_range`](super::register_fault_range)).
/// On x86-64 the page-fault error code in the signal context tells reads from writes for
/// these faults too: verified on Linux 6.18, a read of an absent page gives 0x4, a write
/// to an absent page 0x6 and a write to a write-protected present page 0x7 (see the
/// tests below).
///
/// Page states map to page-table states: no PTE (a fault), a PTE installed write-protected
/// by `UFFDIO_CONTINUE` in `MODE_WP` (reads pass, writes fault), a writable PTE. Page
/// contents always come from the memfd's page cache, which the runtime fills through its
/// alias; a page the alias never touched is allocated (zero-filled) through the alias
/// before it is installed.
#[derive(Debug)]
pub struct UffdView {
    uffd: userfaultfd::Uffd,
    view: usize,
    len: usize,
    alias: usize,
}

mod uffd_abi {
    //! The parts of `include/uapi/linux/userfaultfd.h` the crate does not expose.
    pub const UFFD_API: u64 = 0xAA;
    pub const UFFD_USER_MODE_ONLY: libc::c_int = 1;
    pub const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
    pub const UFFD_FEATURE_MINOR_SHMEM: u64 = 1 << 10;
    pub const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
    /// Bit of `UFFDIO_CONTINUE` in the `ioctls` a registration returns.
    pub const UFFDIO_CONTINUE_BIT: u64 = 1 << 0x07;
    pub const UFFDIO_CONTINUE_MODE_DONTWAKE: u64 = 1 << 0;
    pub const UFFDIO_CONTINUE_MODE_WP: u64 = 1 << 1;
    /// `_IOWR(0xAA, 0x3F, struct uffdio_api)`.
    pub const UFFDIO_API: libc::c_ulong = 0xC018_AA3F;
    /// `_IOWR(0xAA, 0x07, struct uffdio_continue)`.
    pub const UFFDIO_CONTINUE: libc::c_ulong = 0xC020_AA07;

    #[repr(C)]
    pub struct UffdioApi {
        pub api: u64,
        pub features: u64,
        pub ioctls: u64,
    }

    #[repr(C)]
    pub struct UffdioRange {
        pub start: u64,
        pub len: u64,
    }

    #[repr(C)]
    pub struct UffdioContinue {
        pub range: UffdioRange,
        pub mode: u64,
        pub mapped: i64,
    }
}

fn uffd_error(e: userfaultfd::Error) -> io::Error {
    match e {
        userfaultfd::Error::SystemError(errno) => io::Error::from_raw_os_error(errno as i32),
        e => io::Error::other(e.to_string()),
    }
}

/// Opens a userfaultfd and performs the API handshake with `features`.
fn uffd_open(features: u64) -> io::Result<(OwnedFd, u64)> {
    use uffd_abi::*;
    // User-mode-only descriptors are allowed to every user whatever
    // vm.unprivileged_userfaultfd says. Kernel-mode accesses to the range still fail (with
    // EFAULT, as under mprotect): with UFFD_FEATURE_SIGBUS the kernel never resolves them.
    let flags = libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY;
    // SAFETY: the userfaultfd system call takes flags only and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::other(format!(
            "the kernel refused to create a userfaultfd ({e}); it needs CONFIG_USERFAULTFD, and container \
             seccomp profiles often block the system call; use the mprotect backend (DSM_BACKEND=mprotect)"
        )));
    }
    // SAFETY: fd was just returned by the system call and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let mut api = UffdioApi {
        api: UFFD_API,
        features,
        ioctls: 0,
    };
    // SAFETY: fd is a fresh userfaultfd and api is a valid uffdio_api for the duration.
    if unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API, &mut api) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((fd, api.features))
}

impl UffdView {
    /// Registers `view`, a read-write shared mapping of a memfd whose same contents the
    /// runtime maps at `alias`, for missing, minor and write-protect faults raised as
    /// SIGBUS. Zaps every page table entry of the view, so every page starts absent.
    pub fn register(view: &Mapping, alias: usize) -> io::Result<UffdView> {
        use uffd_abi::*;
        use userfaultfd::RegisterMode;
        let wanted = [
            (UFFD_FEATURE_SIGBUS, "SIGBUS delivery (Linux 4.14)"),
            (
                UFFD_FEATURE_MINOR_SHMEM,
                "minor faults on shared memory (Linux 5.14)",
            ),
            (
                UFFD_FEATURE_WP_HUGETLBFS_SHMEM,
                "write-protection of shared memory (Linux 5.19, CONFIG_PTE_MARKER_UFFD_WP)",
            ),
        ];
        // A first descriptor learns what the kernel offers, so that a refusal names what is
        // missing; the handshake can be done once per descriptor.
        let (_, offered) = uffd_open(0)?;
        let missing: Vec<&str> = wanted
            .iter()
            .filter(|(bit, _)| offered & bit == 0)
            .map(|(_, what)| *what)
            .collect();
        if !missing.is_empty() {
            return Err(io::Error::other(format!(
                "this kernel's userfaultfd lacks {}; use the mprotect backend (DSM_BACKEND=mprotect)",
                missing.join(" and ")
            )));
        }
        let (fd, _) = uffd_open(wanted.iter().map(|(bit, _)| bit).fold(0, |a, b| a | b))?;
        // SAFETY: fd is an open userfaultfd that the Uffd takes over (it closes it on drop).
        let uffd =
            unsafe { userfaultfd::Uffd::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(fd)) };
        let mode = RegisterMode::MISSING | RegisterMode::MINOR | RegisterMode::WRITE_PROTECT;
        let ioctls = uffd
            .register_with_mode(view.as_ptr().cast(), view.len(), mode)
            .map_err(|e| {
                io::Error::other(format!(
                    "cannot register the heap view with userfaultfd: {}",
                    uffd_error(e)
                ))
            })?;
        let needed = UFFDIO_CONTINUE_BIT | userfaultfd::IoctlFlags::WRITE_PROTECT.bits();
        if ioctls.bits() & needed != needed {
            return Err(io::Error::other(format!(
                "userfaultfd on the heap view offers {ioctls:?}, without UFFDIO_CONTINUE or UFFDIO_WRITEPROTECT; \
                 use the mprotect backend (DSM_BACKEND=mprotect)"
            )));
        }
        let v = UffdView {
            uffd,
            view: view.addr(),
            len: view.len(),
            alias,
        };
        v.zap(0, v.len)?;
        Ok(v)
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset + len <= self.len,
            "range [{offset:#x}, {:#x}) outside the view of {:#x} bytes",
            offset + len,
            self.len
        );
    }

    /// Removes the page table entries of `[offset, offset + len)` of the view: the next
    /// access takes a minor fault. The contents stay in the page cache.
    pub fn zap(&self, offset: usize, len: usize) -> io::Result<()> {
        self.check(offset, len);
        // SAFETY: the range lies inside the view, which is a shared file mapping; dropping
        // its page table entries loses no data (the page cache keeps it) and the view is
        // only ever accessed through raw pointers whose faults are handled.
        if unsafe {
            libc::madvise(
                (self.view + offset) as *mut libc::c_void,
                len,
                libc::MADV_DONTNEED,
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Maps the absent pages `[offset, offset + len)` of the view from the page cache,
    /// writable or write-protected (atomically: a write-protected page is never writable,
    /// not even for an instant). Fails with `ErrorKind::AlreadyExists` if a page of the
    /// range is already mapped.
    pub fn install(&self, offset: usize, len: usize, writable: bool) -> io::Result<()> {
        self.check(offset, len);
        let mut done = 0;
        let mut populated = false;
        while done < len {
            match self.continue_once(offset + done, len - done, writable) {
                Ok(mapped) => done += mapped,
                Err(e) if e.raw_os_error() == Some(libc::EFAULT) && !populated => {
                    // A page the alias never touched is not in the page cache yet.
                    self.populate_alias(offset + done, len - done)?;
                    populated = true;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One `UFFDIO_CONTINUE`; returns how many bytes it mapped.
    fn continue_once(&self, offset: usize, len: usize, writable: bool) -> io::Result<usize> {
        use uffd_abi::*;
        let start = self.view + offset;
        if writable {
            let mapped = self
                .uffd
                .r#continue(start as *mut libc::c_void, len, false)
                .map_err(uffd_error)?;
            return Ok(mapped as usize);
        }
        // The crate has no MODE_WP for UFFDIO_CONTINUE (Linux 6.4).
        let mut arg = UffdioContinue {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: UFFDIO_CONTINUE_MODE_WP | UFFDIO_CONTINUE_MODE_DONTWAKE,
            mapped: 0,
        };
        // SAFETY: the range lies inside the registered view; arg is a valid
        // uffdio_continue for the duration of the call.
        let rc = unsafe { libc::ioctl(self.uffd.as_raw_fd(), UFFDIO_CONTINUE, &mut arg) };
        if rc == 0
            || (arg.mapped > 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN))
        {
            return Ok(arg.mapped.max(0) as usize);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINVAL) {
            return Err(io::Error::other(
                "UFFDIO_CONTINUE refused MODE_WP; the userfaultfd backend needs Linux 6.4 or later",
            ));
        }
        Err(e)
    }

    /// Allocates the pages of `[offset, offset + len)` in the page cache, zero-filled,
    /// without changing pages already there.
    fn populate_alias(&self, offset: usize, len: usize) -> io::Result<()> {
        // The alias maps the same file range as the view, read-write, for as long as the
        // view exists.
        super::memory::populate_writable(self.alias + offset, len)
    }


    /// Write-protects the mapped pages of `[offset, offset + len)` (`on`), or makes them
    /// writable again.
    pub fn write_protect(&self, offset: usize, len: usize, on: bool) -> io::Result<()> {
        self.check(offset, len);
        let start = (self.view + offset) as *mut libc::c_void;
        if on {
            self.uffd.write_protect(start, len).map_err(uffd_error)
        } else {
            self.uffd
                .remove_write_protection(start, len, false)
                .map_err(uffd_error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::{
        host_page_size, map_shared, memfd_create, register_fault_range, FaultAccess, Prot,
    };
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    /// What the test's fault function sees and how it answers.
    struct Probe {
        view: UffdView,
        base: usize,
        faults: AtomicU32,
        last_write: AtomicBool,
    }

    /// Opens the faulting page: write-protected on a read, writable on a write.
    fn on_fault(ctx: usize, access: FaultAccess) -> bool {
        // SAFETY: ctx is the address of the Probe the test keeps alive while registered.
        let probe = unsafe { &*(ctx as *const Probe) };
        probe.faults.fetch_add(1, Ordering::SeqCst);
        probe.last_write.store(access.write, Ordering::SeqCst);
        let page = host_page_size();
        let offset = (access.addr - probe.base) / page * page;
        let r = match probe.view.install(offset, page, access.write) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                probe.view.write_protect(offset, page, false)
            }
            r => r,
        };
        r.is_ok()
    }

    /// Missing, minor and write-protect faults arrive as SIGBUS in the faulting thread,
    /// with the error code telling reads from writes; contents come from the page cache.
    #[test]
    fn userfaultfd_faults_reach_the_handler_as_reads_and_writes() {
        let page = host_page_size();
        let fd = memfd_create("uffd-test", 4 * page).unwrap();
        let alias = map_shared(&fd, 0, 4 * page, Prot::ReadWrite).unwrap();
        let view = map_shared(&fd, 0, 4 * page, Prot::ReadWrite).unwrap();
        let probe = Box::new(Probe {
            view: UffdView::register(&view, alias.addr()).unwrap(),
            base: view.addr(),
            faults: AtomicU32::new(0),
            last_write: AtomicBool::new(false),
        });
        let _reg = register_fault_range(
            view.addr(),
            view.len(),
            &*probe as *const Probe as usize,
            on_fault,
        )
        .unwrap();
        let at = |i: usize| (view.addr() + i * page) as *mut u64;
        let faults = || probe.faults.load(Ordering::SeqCst);
        let last_write = || probe.last_write.load(Ordering::SeqCst);
        // SAFETY: every pointer accessed below lies in the view or the alias, which outlive
        // the block; faults on the view are resolved by on_fault.
        unsafe {
            // Page 0 was never touched: a missing fault, resolved read-only.
            assert_eq!(std::ptr::read_volatile(at(0)), 0);
            assert_eq!((faults(), last_write()), (1, false));
            std::ptr::write_volatile(at(0), 7); // write-protect fault
            assert_eq!((faults(), last_write()), (2, true));
            std::ptr::write_volatile(at(0), 8); // writable now: no fault
            assert_eq!(faults(), 2);
            assert_eq!(*(alias.addr() as *const u64), 8);
            // Zapped, the page takes a minor fault and keeps its contents.
            probe.view.zap(0, page).unwrap();
            *(alias.addr() as *mut u64) = 9;
            assert_eq!(std::ptr::read_volatile(at(0)), 9);
            assert_eq!((faults(), last_write()), (3, false));
            // A write to an absent page is a write fault, from any thread.
            let p1 = at(1) as usize;
            std::thread::spawn(move || std::ptr::write_volatile(p1 as *mut u64, 5))
                .join()
                .unwrap();
            assert_eq!((faults(), last_write()), (4, true));
            probe.view.write_protect(page, page, true).unwrap();
            assert_eq!(std::ptr::read_volatile(at(1)), 5);
            assert_eq!(faults(), 4, "a write-protected page stays readable");
        }
    }
}
