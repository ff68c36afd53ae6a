//! The application registry: every app of the suite, by name.

use app_common::App;

/// All ten applications in the paper's order (Table 3).
pub fn all() -> Vec<&'static dyn App> {
    vec![
        &app_barnes::BARNES,
        &app_lu::CLU,
        &app_lu::LU,
        &app_em3d::EM3D,
        &app_gauss::GAUSS,
        &app_ilink::ILINK,
        &app_sor::SOR,
        &app_tsp::TSP,
        &app_water::WATER_NSQ,
        &app_water::WATER_SP,
    ]
}

/// The app called `name`, or an error listing the valid names.
pub fn by_name(name: &str) -> anyhow::Result<&'static dyn App> {
    let all = all();
    all.iter()
        .copied()
        .find(|a| a.name() == name)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "unknown application `{name}`; valid applications: {}",
                all.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ")
            )
        })
}

/// The parameter that `--input FILE` sets: the app's primary input file.
pub fn input_param(app: &dyn App) -> Option<&'static str> {
    ["input", "deck", "datafile"]
        .into_iter()
        .find(|n| app.params().iter().any(|p| p.name == *n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use app_common::{Params, Size};

    /// Every app times the same part of its sequential and its parallel run (SPLASH-2's
    /// timed region): both mark one, and each leaves work out of it (the region is shorter
    /// than the whole run).
    #[test]
    fn every_app_marks_its_timed_region_in_both_versions() {
        for app in all() {
            let params = Params::resolve(app.name(), app.params(), Size::Test, &[]).unwrap();
            let (r, took) = app_common::timing::measure(|| app.sequential(&params));
            r.unwrap_or_else(|e| panic!("{}: {e}", app.name()));
            assert!(
                took.region,
                "{}: the sequential run marks no timed region",
                app.name()
            );
            let config =
                app_common::test_config(protocol_variants::CSM_DMS, 2, 2, dsm::ExecMode::Threads);
            let (_, report) = app
                .parallel(&params, &config)
                .unwrap_or_else(|e| panic!("{}: {e}", app.name()));
            assert!(
                report.timed_region,
                "{}: the parallel run marks no timed region",
                app.name()
            );
            assert!(
                report.elapsed_ns < report.run_ns,
                "{}: region {} ns, run {} ns",
                app.name(),
                report.elapsed_ns,
                report.run_ns
            );
        }
    }

    /// Every processor's breakdown adds up to its elapsed time: in the timed region, User,
    /// Protocol, Wait and Message sum to the region's length exactly, and over the whole
    /// run to no more than the run. Under the modeled clock on 4 x 2 with messages for
    /// everything (CSM-None), so that each node's service handles messages while its
    /// processors compute and its handler time is stolen from them (`dsm::sched::steal`).
    #[test]
    fn every_processors_breakdown_sums_to_its_elapsed_time() {
        for app in all() {
            let params = Params::resolve(app.name(), app.params(), Size::Test, &[]).unwrap();
            let mut config =
                app_common::test_config(protocol_variants::CSM_NONE, 4, 2, dsm::ExecMode::Threads);
            config.clock = dsm::ClockMode::Modeled;
            config.cpu_scale = 20.0;
            let (_, report) = app
                .parallel(&params, &config)
                .unwrap_or_else(|e| panic!("{}: {e}", app.name()));
            for p in &report.procs {
                let t = p.timed.unwrap_or_else(|| {
                    panic!("{}: processor {} marked no timed region", app.name(), p.id)
                });
                assert_eq!(
                    t.breakdown.total_ns(),
                    t.end_ns - t.begin_ns,
                    "{}: processor {}'s region breakdown {:?} against its region of {} ns",
                    app.name(),
                    p.id,
                    t.breakdown,
                    t.end_ns - t.begin_ns
                );
                assert!(
                    p.run_breakdown.total_ns() <= report.run_ns,
                    "{}: processor {}'s run breakdown {:?} sums to {} ns, more than the run's {} ns",
                    app.name(),
                    p.id,
                    p.run_breakdown,
                    p.run_breakdown.total_ns(),
                    report.run_ns
                );
            }
        }
    }

    /// The apps whose parallel version does the sequential work and no more (issue 17:
    /// total User time over sequential time 1.00 +-0.02 under counted computation). The
    /// others do more, and their crate docs say how much and why.
    const SAME_WORK: &[&str] = &["sor", "lu", "clu", "gauss", "em3d", "water-nsq", "water-sp"];

    /// Every app counts its computation (`dsm::work`): its sequential version counts units
    /// of every kind it declares, and no kind it does not; where the parallel version does
    /// the sequential work ([`SAME_WORK`]), its processors together count the sequential
    /// units within 2% (weighted by the platform's costs: the processors' total User time
    /// over the sequential time), at the test input on 2 x 2.
    #[test]
    fn every_app_counts_its_work_and_the_parallel_version_counts_the_sequential_work() {
        for app in all().into_iter().filter(|a| !a.work().is_empty()) {
            let params = Params::resolve(app.name(), app.params(), Size::Test, &[]).unwrap();
            let (_, seq) = app_common::timing::measure(|| app.sequential(&params).unwrap());
            let kinds = app.work().len();
            for (k, kind) in app.work().iter().enumerate() {
                assert!(seq.work[k] > 0, "{}: the sequential run counts no {}", app.name(), kind.name);
            }
            assert!(
                seq.work[kinds..].iter().all(|&u| u == 0),
                "{}: the sequential run counts kinds beyond the {kinds} it declares: {:?}",
                app.name(),
                seq.work
            );
            if !SAME_WORK.contains(&app.name()) {
                continue;
            }
            let config =
                app_common::test_config(protocol_variants::CSM_DMS, 2, 2, dsm::ExecMode::Threads);
            let (_, report) = app.parallel(&params, &config).unwrap();
            let mut par = [0u64; dsm::work::MAX_KINDS];
            for p in &report.procs {
                for (t, u) in par.iter_mut().zip(p.work) {
                    *t += u;
                }
            }
            let ns = app_common::work::ns_per_unit(app.work(), 1.0).unwrap();
            let ratio = app_common::work::seconds(&par, &ns) / app_common::work::seconds(&seq.work, &ns);
            assert!(
                (ratio - 1.0).abs() <= 0.02,
                "{}: the processors count {:?}, the sequential run {:?}: {ratio:.4} of its work",
                app.name(),
                &par[..kinds],
                &seq.work[..kinds]
            );
        }
    }

    /// The modeled run of `app` at the test input on 4 x 2 under `variant`, with its
    /// counted work at the built-in platform's costs.
    fn counted_run(app: &dyn App, variant: dsm::Protocol) -> dsm::Report<()> {
        let params = Params::resolve(app.name(), app.params(), Size::Test, &[]).unwrap();
        let mut config = app_common::test_config(variant, 4, 2, dsm::ExecMode::Threads);
        config.clock = dsm::ClockMode::Modeled;
        let platform = dsm::platform::by_name(dsm::platform::DEFAULT).unwrap();
        crate::scale::charge(app, &platform, None, crate::scale::ComputeChoice::Counted)
            .unwrap()
            .apply(&mut config);
        config.platform = platform;
        app.parallel(&params, &config)
            .unwrap_or_else(|e| panic!("{}: {e}", app.name()))
            .1
    }

    /// What must repeat: times, breakdowns, counted work and counters.
    fn figures(r: &dsm::Report<()>) -> String {
        let procs: Vec<_> = r.procs.iter().map(|p| (p.breakdown, p.run_breakdown, p.work)).collect();
        format!("{} {} {:?} {:?}", r.elapsed_ns, r.run_ns, procs, r.counters)
    }

    /// Issue 17: under counted computation the same configuration gives the same times and
    /// counters on every run, to the nanosecond, also while other threads load this
    /// machine's CPUs: every app that counts its work, under CSM-DMS and under a variant
    /// of each other strategy (CSM-None: messages; CSM-MS-Mg: migration; CSM-ADB).
    #[test]
    fn a_counted_run_repeats_exactly_also_on_a_loaded_machine() {
        use std::sync::atomic::{AtomicBool, Ordering};
        for app in all().into_iter().filter(|a| !a.work().is_empty()) {
            for v in [
                protocol_variants::CSM_DMS,
                protocol_variants::CSM_NONE,
                protocol_variants::CSM_MS_MG,
                protocol_variants::CSM_ADB,
            ] {
                let first = figures(&counted_run(app, v));
                assert_eq!(figures(&counted_run(app, v)), first, "{} under {}: a repeat differs", app.name(), v.name);
                let stop = AtomicBool::new(false);
                let loaded = std::thread::scope(|s| {
                    for _ in 0..2 {
                        s.spawn(|| {
                            let mut x = 0u64;
                            while !stop.load(Ordering::Relaxed) {
                                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                            }
                        });
                    }
                    let r = figures(&counted_run(app, v));
                    stop.store(true, Ordering::Relaxed);
                    r
                });
                assert_eq!(loaded, first, "{} under {}: a run on a loaded machine differs", app.name(), v.name);
            }
        }
    }
}
