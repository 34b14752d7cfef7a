//! `rocmguard`: the front door. Runs a program under the guard, replays allocation traces,
//! checks the machine, and shows the live stats of guarded processes.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use rocmguard_cli::{doctor, replay, run, stats, tune};

#[derive(Parser)]
#[command(
    name = "rocmguard",
    version,
    about = "Keeps GPU programs alive on AMD ROCm: a device memory pool with a cap, trim and retry, preloaded into unmodified programs.",
    after_help = "Configuration: every ROCMGUARD_* variable (see `rocmguard run --help` and the README) also works without the launcher:\n  LD_PRELOAD=/path/to/librocmguard.so python train.py"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command with librocmguard.so preloaded (children inherit it).
    Run(run::Args),
    /// Replay allocation traces through several allocator policies and compare them.
    Replay(replay::Args),
    /// Find the PYTORCH_HIP_ALLOC_CONF that needs the least memory for a program's traces.
    Tune(tune::Args),
    /// Check this machine's ROCm set-up and say what to fix.
    Doctor(doctor::Args),
    /// List guarded processes, or show one's per-device stats.
    Stats(stats::Args),
    /// The doctor's self-test, run by `rocmguard doctor` under the shim.
    #[command(hide = true)]
    DoctorProbe(doctor::probe::Args),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // `run --cpa 4GiB -- cmd`: clap's own tip would be to pass `--cpa` as the command.
            if std::env::args().nth(1).as_deref() == Some("run") {
                if let Some(text) = run::unknown_option(&Cli::command(), &e) {
                    eprintln!("{}", text);
                    return ExitCode::from(2);
                }
            }
            e.exit()
        }
    };
    let result = match cli.command {
        Command::Run(a) => run::exec(a),
        Command::Replay(a) => replay::exec(a),
        Command::Tune(a) => tune::exec(a),
        Command::Doctor(a) => doctor::exec(a),
        Command::Stats(a) => stats::exec(a),
        Command::DoctorProbe(a) => doctor::probe::exec(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("rocmguard: {:#}", e);
            ExitCode::from(2)
        }
    }
}
