//! Fault backends: how the protocol's page states become access rights on the
//! application view, and how an access to a page the node may not touch reaches the
//! engine. Both deliver the fault to the faulting thread (no handler thread, so no
//! cross-core wake-up on the fault path).
//!
//! * mprotect: `PROT_NONE` / `PROT_READ` / `PROT_READ | PROT_WRITE` per page; the
//!   SIGSEGV handler tells reads from writes by the page-fault error code.

use crate::config::FaultBackend;
use crate::engine::Access;
use crate::sys::{self, Prot};

/// Sets access rights on the application view of one node's heap.
pub(crate) struct Protector {
    base: usize,
    page_bytes: usize,
    backend: FaultBackend,
}

impl Protector {
    pub fn new(backend: FaultBackend, base: usize, page_bytes: usize) -> Protector {
        Protector { base, page_bytes, backend }
    }

    /// Gives the application `access` to page `p`. Failure here means the process ran out
    /// of mappings or the view is gone: nothing the protocol can recover from.
    pub fn set(&self, p: u32, access: Access) {
        let prot = match access {
            Access::Invalid => Prot::None,
            Access::Read => Prot::Read,
            Access::Write => Prot::ReadWrite,
        };
        match self.backend {
            FaultBackend::Mprotect | FaultBackend::Userfaultfd => {
                if let Err(e) = sys::protect(self.base + p as usize * self.page_bytes, self.page_bytes, prot) {
                    panic!("cannot change the protection of page {p}: {e}");
                }
            }
        }
    }
}
