//! The seven protocol variants of the Cashmere paper (Stets et al., HPCA 2000, section
//! 2.3 and Table 1), each composed from one strategy per area of communication. The table
//! below mirrors the paper's Table 1; the strategies themselves are implemented in the
//! `dsm` engine (`dsm::DataStrategy`, `dsm::MetadataStrategy`, `dsm::SyncStrategy`,
//! `dsm::HomePolicy`), whose docs cite the sections they follow.
//!
//! | variant      | data            | metadata   | synchronization | home        |
//! |--------------|-----------------|------------|-----------------|-------------|
//! | CSM-DMS      | remote write    | replicated | network         | first touch |
//! | CSM-MS       | messages        | replicated | network         | first touch |
//! | CSM-S        | messages        | home-held  | network         | first touch |
//! | CSM-None     | messages        | home-held  | messages        | first touch |
//! | CSM-MS-Mg    | messages        | replicated | network         | migrating   |
//! | CSM-None-Mg  | messages        | home-held  | messages        | migrating   |
//! | CSM-ADB      | remote write + adaptive broadcast | replicated | network | first touch |

use dsm::{DataStrategy as D, HomePolicy as H, MetadataStrategy as M, Protocol, SyncStrategy as S};

const fn variant(
    name: &'static str,
    data: D,
    metadata: M,
    sync: S,
    home: H,
    adb: bool,
) -> Protocol {
    Protocol {
        name,
        data,
        metadata,
        sync,
        home,
        adaptive_broadcast: adb,
    }
}

/// All seven variants, in the paper's order.
pub const ALL: [Protocol; 7] = [
    variant(
        "CSM-DMS",
        D::RemoteWrite,
        M::Replicated,
        S::Network,
        H::FirstTouch,
        false,
    ),
    variant(
        "CSM-MS",
        D::Messages,
        M::Replicated,
        S::Network,
        H::FirstTouch,
        false,
    ),
    variant(
        "CSM-S",
        D::Messages,
        M::HomeHeld,
        S::Network,
        H::FirstTouch,
        false,
    ),
    variant(
        "CSM-None",
        D::Messages,
        M::HomeHeld,
        S::Messages,
        H::FirstTouch,
        false,
    ),
    variant(
        "CSM-MS-Mg",
        D::Messages,
        M::Replicated,
        S::Network,
        H::Migrating,
        false,
    ),
    variant(
        "CSM-None-Mg",
        D::Messages,
        M::HomeHeld,
        S::Messages,
        H::Migrating,
        false,
    ),
    variant(
        "CSM-ADB",
        D::RemoteWrite,
        M::Replicated,
        S::Network,
        H::FirstTouch,
        true,
    ),
];

pub const CSM_DMS: Protocol = ALL[0];
pub const CSM_MS: Protocol = ALL[1];
pub const CSM_S: Protocol = ALL[2];
pub const CSM_NONE: Protocol = ALL[3];
pub const CSM_MS_MG: Protocol = ALL[4];
pub const CSM_NONE_MG: Protocol = ALL[5];
pub const CSM_ADB: Protocol = ALL[6];

/// An unknown variant name.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown protocol variant `{name}`; valid variants: {valid}")]
pub struct UnknownVariant {
    pub name: String,
    pub valid: String,
}

/// The variant called `name` (case-insensitive; the `CSM-` prefix may be left out).
pub fn by_name(name: &str) -> Result<Protocol, UnknownVariant> {
    let want = name.to_ascii_uppercase();
    let want = if want.starts_with("CSM-") {
        want
    } else {
        format!("CSM-{want}")
    };
    ALL.iter()
        .copied()
        .find(|p| p.name.to_ascii_uppercase() == want)
        .ok_or_else(|| UnknownVariant {
            name: name.to_string(),
            valid: ALL.iter().map(|p| p.name).collect::<Vec<_>>().join(", "),
        })
}

/// The variants the engine runs today.
pub fn implemented() -> Vec<Protocol> {
    ALL.iter()
        .copied()
        .filter(|p| p.unsupported().is_none())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_in_any_case_with_or_without_prefix() {
        assert_eq!(by_name("csm-dms").unwrap(), CSM_DMS);
        assert_eq!(by_name("None-Mg").unwrap(), CSM_NONE_MG);
        let e = by_name("CSM-XYZ").unwrap_err().to_string();
        assert!(
            e.contains("unknown protocol variant `CSM-XYZ`") && e.contains("CSM-ADB"),
            "{e}"
        );
    }

    #[test]
    fn the_table_follows_the_paper() {
        // Table 1: D, M and S in the suffix mean "uses Memory Channel features" for data,
        // metadata and synchronization.
        for p in ALL {
            let suffix = p.name.trim_start_matches("CSM-").split('-').next().unwrap();
            let uses = |c| suffix != "None" && suffix != "ADB" && suffix.contains(c);
            if p.name != "CSM-ADB" {
                assert_eq!(p.data == D::RemoteWrite, uses('D'), "{}", p.name);
                assert_eq!(p.metadata == M::Replicated, uses('M'), "{}", p.name);
                assert_eq!(p.sync == S::Network, uses('S'), "{}", p.name);
            }
            assert_eq!(
                p.home == H::Migrating,
                p.name.ends_with("-Mg"),
                "{}",
                p.name
            );
        }
    }

    #[test]
    fn dms_needs_broadcast_and_total_order_none_needs_nothing() {
        let need = CSM_DMS.needs();
        assert!(need.remote_write && need.broadcast && need.total_order);
        assert_eq!(CSM_NONE.needs(), dsm::profile::Features::NONE);
    }
}
