//! `cashmere`: run the applications under the protocol variants, print the network
//! profiles, and measure the basic operations.

/// `print!` for the command's output: a write that fails (`> /dev/full`) ends the command
/// with `cashmere: cannot write standard output: ...` and exit status 1, not a panic. A
/// closed pipe still ends it quietly (SIGPIPE, see `main`).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::write_out(format_args!($($arg)*))
    };
}

/// `println!` for the command's output, as [`out!`].
macro_rules! outln {
    () => {
        $crate::write_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod apps;
mod bench;
mod calibrate;
mod paper;
mod platforms;
mod run;
mod scale;
mod table;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cashmere",
    version,
    about = "A Cashmere-style software DSM: applications, protocol variants, networks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one application: sequential, then parallel, then check (`cashmere run <app> --help`
    /// lists the app's parameters).
    Run(run::RunArgs),
    /// Run every application under each variant and print a summary table (the default
    /// main job).
    Suite(run::SuiteArgs),
    /// Reproduce the paper's Table 4 and Figure 1: every app under every variant, beside
    /// the paper's numbers, with a summary of its findings (resumes from --out).
    Table(table::TableArgs),
    /// Print the network profiles (features and costs, with sources).
    Profiles,
    /// Print the platforms the modeled clock charges (host costs, with sources), or one as
    /// a file to edit (`--dump`).
    Platforms(platforms::PlatformsArgs),
    /// Measure basic operations: `net` (the simulated network) or `proto` (the protocol).
    Bench(bench::BenchArgs),
    /// Count each app's work at the paper's input and time its units on this host (the
    /// facts behind the modeled clock's counted computation).
    Calibrate(calibrate::CalibrateArgs),
}

fn main() {
    // `cashmere profiles | head -1`: end quietly when the reader goes away.
    dsm::host::default_sigpipe();
    let cli = Cli::parse();
    if let Err(e) = dsm::host::check_environment() {
        dsm::host::report(e);
        std::process::exit(1);
    }
    let outcome = match cli.command {
        Command::Run(a) => run::check_progress_env().and_then(|()| run::run(a)),
        Command::Suite(a) => run::check_progress_env().and_then(|()| run::suite(a)),
        Command::Table(a) => run::check_progress_env().and_then(|()| table::table(a)),
        Command::Profiles => {
            print_profiles();
            Ok(())
        }
        Command::Platforms(a) => platforms::platforms(a),
        Command::Bench(a) => bench::bench(a),
        Command::Calibrate(a) => calibrate::calibrate(a),
    };
    if let Err(e) = outcome {
        // Under MPI rank 0 reports for the job; the other ranks end with the same status.
        if dsm::host::mpi_rank().is_none_or(|r| r == 0) {
            dsm::host::report(error_text(&e));
        }
        std::process::exit(1);
    }
    if let Err(e) = std::io::Write::flush(&mut std::io::stdout()) {
        stdout_failed(&e);
    }
}

/// Writes the command's output (see [`out!`]).
fn write_out(args: std::fmt::Arguments<'_>) {
    if let Err(e) = std::io::Write::write_fmt(&mut std::io::stdout().lock(), args) {
        stdout_failed(&e);
    }
}

/// Ends the command on a failed write of its output.
fn stdout_failed(e: &std::io::Error) -> ! {
    dsm::host::report(format_args!("cannot write standard output: {e}"));
    std::process::exit(1);
}

/// The error and its causes joined with ": ", leaving out a cause whose text the message
/// already holds (many errors print their source themselves, so `{:#}` would repeat an OS
/// error: "Cannot allocate memory (os error 12): Cannot allocate memory (os error 12)").
fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text += ": ";
            }
            text += &part;
        }
    }
    text
}

fn print_profiles() {
    outln!(
        "{:<10} {:<34} {:>9} {:>10} {:>7} {:>8} {:>8} {:>8} {:>10}  features",
        "name",
        "network",
        "lat us",
        "MB/s",
        "packet",
        "send us",
        "recv us",
        "bcast us",
        "space"
    );
    for p in dsm::profile::all() {
        let space = if p.address_space_bytes == u64::MAX {
            "unlimited".to_string()
        } else {
            format!("{} MiB", p.address_space_bytes >> 20)
        };
        outln!(
            "{:<10} {:<34} {:>9.2} {:>10.1} {:>7} {:>8.2} {:>8.2} {:>8.2} {:>10}  {}",
            p.name,
            p.title,
            p.latency_ns as f64 / 1e3,
            p.bandwidth_bytes_per_s as f64 / 1e6,
            p.packet_bytes,
            p.send_overhead_ns as f64 / 1e3,
            p.recv_overhead_ns as f64 / 1e3,
            p.broadcast_extra_ns as f64 / 1e3,
            space,
            p.features
        );
    }
    outln!();
    for p in dsm::profile::all() {
        outln!("{:<10} source: {}", p.name, p.source);
    }
}
