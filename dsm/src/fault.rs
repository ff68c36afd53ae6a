//! Fault backends: how the protocol's page states become access rights on the
//! application view, and how an access to a page the node may not touch reaches the
//! engine. Both deliver the fault to the faulting thread (no handler thread, so no
//! cross-core wake-up on the fault path), and both reach the same signal handler.
//!
//! * mprotect: `PROT_NONE` / `PROT_READ` / `PROT_READ | PROT_WRITE` per page; the
//!   SIGSEGV handler tells reads from writes by the page-fault error code. A node with a
//!   process of its own makes each used page of its view a kernel memory area from the
//!   start ([`ViewAreas`]), so that a protection change never splits or merges areas.
//! * userfaultfd (cargo feature `userfaultfd`): the view is mapped read-write once and
//!   registered for missing, minor and write-protect faults, raised as SIGBUS. `Invalid`
//!   drops the page's page table entries, `Read` installs them write-protected from the
//!   page cache, `Write` installs them writable or lifts the write protection. The view
//!   stays one mapping, so `vm.max_map_count` does not limit the heap.

use crate::config::FaultBackend;
use crate::ids::PageId;
use crate::page::Access;
use crate::sys::{self, Mapping, Prot};
use std::io;
#[cfg(feature = "userfaultfd")]
use std::sync::atomic::{AtomicU8, Ordering};

/// How the mprotect backend lays out the used part of a node's view in kernel memory areas
/// (`sys::one_area_per_page`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ViewAreas {
    /// One mapping, which each protection change splits around its page (and merges back):
    /// the view takes only as many of `vm.max_map_count`'s mappings as pages differ from
    /// their neighbours, but each change costs a split or a merge.
    One,
    /// An area per page from the start: a protection change changes its page's area in
    /// place, at one mapping per page. In processes mode (`bench proto`, CSM-None, 4
    /// interleaved runs each) a fetch took 6.04 -> 4.72 us and a write fault with twin
    /// 5.57 -> 4.91 at a fast moment of the development host, 6.27 -> 6.06 and 5.65 ->
    /// 5.19 at a slow one.
    PerPage,
}

impl ViewAreas {
    /// Mappings this process keeps for everything but a view split per page (libraries,
    /// stacks, the twin slab's chunks, the network's regions, MPI's own), so that a view
    /// is split only if `vm.max_map_count` leaves them this many.
    const HEADROOM: usize = 8192;

    /// Per page for a node that has a process of its own (processes mode, an MPI rank),
    /// under the mprotect backend, if its `npages` used pages fit `vm.max_map_count` with
    /// room to spare; else one. In-process clusters keep one: all their nodes' views share
    /// the process's mappings.
    pub(crate) fn for_node(own_process: bool, backend: FaultBackend, npages: usize) -> ViewAreas {
        let fits = sys::max_map_count().is_some_and(|limit| npages + Self::HEADROOM <= limit);
        if own_process && backend == FaultBackend::Mprotect && fits {
            ViewAreas::PerPage
        } else {
            ViewAreas::One
        }
    }
}

/// Sets access rights on the application view of one node's heap.
pub(crate) struct Protector {
    base: usize,
    page_bytes: usize,
    how: How,
}

enum How {
    Mprotect,
    #[cfg(feature = "userfaultfd")]
    Userfaultfd {
        view: sys::UffdView,
        /// The access each page was last given (an [`Access`] as `u8`), to pick the
        /// operation that moves it to the next. Changed under the engine's page lock.
        state: Vec<AtomicU8>,
    },
}

impl Protector {
    /// The protection the application view must be mapped with under `backend`: no access
    /// for mprotect (pages open one by one), read-write for userfaultfd (access is governed
    /// by the page tables instead).
    pub fn initial_prot(backend: FaultBackend) -> Prot {
        match backend {
            FaultBackend::Mprotect => Prot::None,
            FaultBackend::Userfaultfd => Prot::ReadWrite,
        }
    }

    /// Sets up `backend` on `view`, mapped with [`Protector::initial_prot`]; `alias` is the
    /// runtime's mapping of the same heap, of which the first `used_bytes` are allocated.
    /// Every page starts `Invalid`.
    ///
    /// Under mprotect the used part of both mappings is populated first
    /// (`sys::populate_shared`): otherwise a page's first fetch takes two more page faults
    /// beside the protocol's, one where the data lands in the alias (the file's page is
    /// allocated then) and one on the view after the handler opens the page (its page
    /// table entry is filled then).
    pub fn new(
        backend: FaultBackend,
        view: &Mapping,
        alias: usize,
        page_bytes: usize,
        used_bytes: usize,
        areas: ViewAreas,
    ) -> io::Result<Protector> {
        let how = match backend {
            FaultBackend::Mprotect => {
                let used = used_bytes.min(view.len());
                sys::populate_shared(alias, used, Prot::ReadWrite)?;
                sys::populate_shared(view.addr(), used, Prot::None)?;
                if areas == ViewAreas::PerPage {
                    // Speed only: a view the kernel cannot split (it advised it back to
                    // one area) works as `ViewAreas::One` does.
                    let _ = sys::one_area_per_page(view.addr(), used, view.len(), page_bytes);
                }
                How::Mprotect
            }
            #[cfg(feature = "userfaultfd")]
            FaultBackend::Userfaultfd => How::Userfaultfd {
                view: sys::UffdView::register(view, alias)?,
                state: (0..view.len() / page_bytes)
                    .map(|_| AtomicU8::new(Access::Invalid as u8))
                    .collect(),
            },
            #[cfg(not(feature = "userfaultfd"))]
            FaultBackend::Userfaultfd => {
                return Err(io::Error::other(crate::config::UFFD_NOT_BUILT))
            }
        };
        Ok(Protector {
            base: view.addr(),
            page_bytes,
            how,
        })
    }

    /// Gives the application `access` to page `p`. Failure here means the process ran out
    /// of mappings or the view is gone: nothing the protocol can recover from.
    pub fn set(&self, p: PageId, access: Access) {
        crate::sched::charge_cost("host.mprotect_ns", |h, _| h.mprotect_ns as f64);
        let result = match &self.how {
            How::Mprotect => {
                let prot = match access {
                    Access::Invalid => Prot::None,
                    Access::Read => Prot::Read,
                    Access::Write => Prot::ReadWrite,
                };
                sys::protect(
                    self.base + p.index() * self.page_bytes,
                    self.page_bytes,
                    prot,
                )
            }
            #[cfg(feature = "userfaultfd")]
            How::Userfaultfd { view, state } => {
                let old = state[p.index()].swap(access as u8, Ordering::Relaxed);
                self.set_uffd(view, p, old == Access::Invalid as u8, access)
            }
        };
        if let Err(e) = result {
            panic!("cannot change the access to {p}: {e}");
        }
    }

    #[cfg(feature = "userfaultfd")]
    fn set_uffd(
        &self,
        view: &sys::UffdView,
        p: PageId,
        was_invalid: bool,
        access: Access,
    ) -> io::Result<()> {
        let (offset, len) = (p.index() * self.page_bytes, self.page_bytes);
        match access {
            Access::Invalid => view.zap(offset, len),
            Access::Read | Access::Write => {
                let writable = access == Access::Write;
                if was_invalid {
                    match view.install(offset, len, writable) {
                        // Only when the recorded state lags behind the page tables (the
                        // engine's abort path opens pages without the page lock).
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                        r => return r,
                    }
                }
                view.write_protect(offset, len, !writable)
            }
        }
    }
}
