//! The paper's published results, as data: Table 4 of Stets et al., "The Effect of
//! Network Total Order, Broadcast, and Remote-Write Capability on Network-Based Shared
//! Memory Computing", HPCA 2000 ("Application speedups and statistics at 32
//! processors": 8 nodes x 4 processors on Memory Channel 2, the paper's inputs of Table 3).
//!
//! The counts are the paper's, in thousands, over the whole run; CSM-ADB has no column in
//! Table 4 (the paper reports it separately, on other cluster sizes).

/// One cell of Table 4.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Table4Cell {
    /// Speedup at 32 processors.
    pub speedup: f64,
    pub page_transfers_k: f64,
    pub invalidations_k: f64,
    pub diffs_k: f64,
    pub migrations_k: f64,
    /// Migration requests, granted or refused (the figure in parentheses).
    pub migration_attempts_k: f64,
}

/// Table 4's columns, in its order.
pub const TABLE4_VARIANTS: [&str; 6] = [
    "CSM-DMS",
    "CSM-MS",
    "CSM-S",
    "CSM-None",
    "CSM-MS-Mg",
    "CSM-None-Mg",
];

/// One application's row group of Table 4: speedups, page transfers, invalidations and
/// diffs per column, then migrations with attempts (zero for the first-touch columns).
struct Rows {
    app: &'static str,
    speedup: [f64; 6],
    page_transfers_k: [f64; 6],
    invalidations_k: [f64; 6],
    diffs_k: [f64; 6],
    /// (migrations, attempts) for CSM-MS-Mg and CSM-None-Mg.
    migrations_k: [(f64, f64); 2],
}

/// Table 4, transcribed (LU's CSM-MS diffs are printed as "278.06" in the paper).
const TABLE4: [Rows; 10] = [
    Rows {
        app: "barnes",
        speedup: [7.6, 5.5, 4.2, 4.2, 6.3, 5.9],
        page_transfers_k: [66.0, 63.4, 96.8, 96.1, 69.1, 78.5],
        invalidations_k: [214.2, 201.6, 209.9, 210.2, 210.5, 210.2],
        diffs_k: [60.8, 50.2, 66.4, 61.8, 45.1, 47.5],
        migrations_k: [(15.6, 15.6), (11.6, 67.4)],
    },
    Rows {
        app: "clu",
        speedup: [18.3, 18.4, 18.0, 18.0, 18.2, 17.7],
        page_transfers_k: [8.3, 11.9, 11.9, 11.9, 11.9, 11.9],
        invalidations_k: [0.0, 0.0, 0.0, 0.0, 1.3, 8.6],
        diffs_k: [0.0; 6],
        migrations_k: [(3.5, 3.5), (3.5, 3.5)],
    },
    Rows {
        app: "lu",
        speedup: [4.0, 3.5, 3.6, 3.6, 12.5, 12.4],
        page_transfers_k: [44.1, 44.4, 44.6, 44.4, 51.1, 53.1],
        invalidations_k: [32.6, 33.3, 31.8, 32.5, 124.0, 91.0],
        diffs_k: [285.6, 278.06, 278.9, 277.4, 1.1, 1.1],
        migrations_k: [(5.5, 5.5), (5.5, 5.5)],
    },
    Rows {
        app: "em3d",
        speedup: [13.5, 10.5, 10.5, 10.3, 10.2, 9.8],
        page_transfers_k: [32.8, 32.8, 33.1, 33.1, 43.9, 43.8],
        invalidations_k: [33.1, 33.1, 33.4, 33.4, 41.0, 40.9],
        diffs_k: [7.1, 7.1, 7.1, 7.1, 0.0, 0.0],
        migrations_k: [(1.9, 1.9), (1.9, 1.9)],
    },
    Rows {
        app: "gauss",
        speedup: [22.7, 21.9, 23.2, 23.0, 22.1, 21.9],
        page_transfers_k: [38.2, 42.2, 40.1, 40.3, 43.9, 44.1],
        invalidations_k: [59.6, 74.7, 64.4, 63.8, 73.4, 78.7],
        diffs_k: [3.6, 3.6, 3.6, 3.6, 0.5, 0.1],
        migrations_k: [(4.5, 4.5), (4.6, 4.6)],
    },
    Rows {
        app: "ilink",
        speedup: [12.5, 12.1, 11.1, 11.1, 11.6, 11.4],
        page_transfers_k: [50.0, 50.0, 53.1, 53.1, 51.9, 56.1],
        invalidations_k: [199.6, 199.6, 196.0, 196.0, 206.8, 204.9],
        diffs_k: [12.0, 12.2, 12.4, 12.4, 8.7, 8.6],
        migrations_k: [(1.9, 2.7), (1.9, 6.2)],
    },
    Rows {
        app: "sor",
        speedup: [31.2, 30.1, 30.1, 29.9, 31.2, 30.9],
        page_transfers_k: [0.3, 0.3, 0.3, 0.3, 0.7, 0.7],
        invalidations_k: [0.3, 0.3, 0.3, 0.3, 0.7, 0.7],
        diffs_k: [1.4, 1.4, 1.4, 1.4, 0.0, 0.0],
        migrations_k: [(0.0, 0.0), (0.0, 0.0)],
    },
    Rows {
        app: "tsp",
        speedup: [33.9, 34.0, 33.8, 34.2, 33.9, 34.0],
        page_transfers_k: [12.6, 12.2, 12.3, 12.2, 14.1, 13.9],
        invalidations_k: [16.2, 15.7, 15.9, 15.8, 18.3, 18.0],
        diffs_k: [8.0, 7.8, 7.8, 7.8, 0.1, 0.1],
        migrations_k: [(5.0, 5.0), (5.0, 5.0)],
    },
    Rows {
        app: "water-nsq",
        speedup: [20.6, 18.0, 17.8, 17.0, 19.6, 19.3],
        page_transfers_k: [31.5, 29.8, 29.4, 22.9, 28.3, 32.9],
        invalidations_k: [55.1, 58.2, 55.8, 54.3, 55.1, 59.2],
        diffs_k: [251.1, 234.4, 249.7, 243.7, 17.2, 26.3],
        migrations_k: [(9.2, 9.3), (11.0, 11.7)],
    },
    Rows {
        app: "water-sp",
        speedup: [7.7, 7.0, 7.0, 7.2, 12.3, 11.8],
        page_transfers_k: [4.0, 4.5, 4.8, 4.9, 5.2, 5.6],
        invalidations_k: [11.8, 11.8, 11.7, 11.8, 17.6, 17.4],
        diffs_k: [6.2, 6.2, 6.4, 6.4, 0.1, 0.1],
        migrations_k: [(0.3, 0.3), (0.3, 0.3)],
    },
];

/// Table 4's cell for `app` (our name: `barnes`, `water-nsq`, ...) under `variant`, or
/// `None` where the paper has no such cell (CSM-ADB, or an app it did not run).
pub fn table4(app: &str, variant: &str) -> Option<Table4Cell> {
    let rows = TABLE4.iter().find(|r| r.app == app)?;
    let col = TABLE4_VARIANTS.iter().position(|v| *v == variant)?;
    let (migrations_k, migration_attempts_k) = col
        .checked_sub(4)
        .map_or((0.0, 0.0), |mg| rows.migrations_k[mg]);
    Some(Table4Cell {
        speedup: rows.speedup[col],
        page_transfers_k: rows.page_transfers_k[col],
        invalidations_k: rows.invalidations_k[col],
        diffs_k: rows.diffs_k[col],
        migrations_k,
        migration_attempts_k,
    })
}

/// The paper's name of an application, as Table 4 prints it.
pub fn display_name(app: &str) -> &str {
    match app {
        "barnes" => "Barnes",
        "clu" => "CLU",
        "lu" => "LU",
        "em3d" => "EM3D",
        "gauss" => "Gauss",
        "ilink" => "Ilink",
        "sor" => "SOR",
        "tsp" => "TSP",
        "water-nsq" => "Water-NSQ",
        "water-sp" => "Water-SP",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_read_back_as_printed() {
        let barnes = table4("barnes", "CSM-None-Mg").unwrap();
        assert_eq!(barnes.speedup, 5.9);
        assert_eq!(barnes.diffs_k, 47.5);
        assert_eq!(
            (barnes.migrations_k, barnes.migration_attempts_k),
            (11.6, 67.4)
        );
        let lu = table4("lu", "CSM-MS").unwrap();
        assert_eq!(
            (lu.speedup, lu.diffs_k, lu.migrations_k),
            (3.5, 278.06, 0.0)
        );
        assert_eq!(table4("water-sp", "CSM-MS-Mg").unwrap().speedup, 12.3);
        assert_eq!(table4("sor", "CSM-ADB"), None);
        assert_eq!(table4("histogram", "CSM-DMS"), None);
    }

    #[test]
    fn every_app_of_the_suite_has_a_row() {
        for app in crate::apps::all() {
            assert!(table4(app.name(), "CSM-DMS").is_some(), "{}", app.name());
            assert_ne!(display_name(app.name()), app.name());
        }
    }
}
