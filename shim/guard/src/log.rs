//! Logging to the program's stderr and, with `ROCMGUARD_LOG_FILE`, to a file (for programs
//! without a console): ` WARN rocmguard: ...`. No logging framework: a Rust host program's own
//! subscriber is never touched, and nothing here allocates per thread.
//!
//! Written straight to the standard error descriptor (`platform::write_stderr`) rather than
//! through `std::io::stderr`: the exit table is printed while the process ends, when a lock of
//! Rust's stderr may still be held by a thread that no longer exists.

use std::fmt::Arguments;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use rocmguard_core::Config;

const OFF: u8 = 0;
const ERROR: u8 = 1;
const WARN: u8 = 2;
const INFO: u8 = 3;

/// Until `init`, warnings and errors are printed (the level's default).
static LEVEL: AtomicU8 = AtomicU8::new(WARN);
static FILE: Mutex<Option<File>> = Mutex::new(None);

/// Sets the level and the file from the configuration and prints bad-value warnings, once.
pub fn init(config: &Config, warnings: &[String]) {
    let level = match config.log.as_str() {
        "off" => OFF,
        "error" => ERROR,
        "info" | "debug" | "trace" => INFO,
        _ => WARN,
    };
    LEVEL.store(level, Ordering::Relaxed);
    if let Some(path) = &config.log_file {
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            Ok(f) => *FILE.lock().unwrap_or_else(|e| e.into_inner()) = Some(f),
            Err(e) => warn(format_args!("cannot open the log file {}: {}", path, e)),
        }
    }
    for w in warnings {
        warn(format_args!("{}", w.trim_start_matches("rocmguard: ")));
    }
    // A cap that could not be read is said even with the log off: the program gets no memory.
    if let Some(e) = &config.invalid_cap {
        write_all(&format!("ERROR rocmguard: {}\n", e));
    }
}

fn emit(level: u8, tag: &str, args: Arguments) {
    if level <= LEVEL.load(Ordering::Relaxed) {
        write_all(&format!("{:>5} rocmguard: {}\n", tag, args));
    }
}

pub fn error(args: Arguments) {
    emit(ERROR, "ERROR", args);
}

pub fn warn(args: Arguments) {
    emit(WARN, "WARN", args);
}

pub fn info(args: Arguments) {
    emit(INFO, "INFO", args);
}

/// The one line printed at first use, whatever the level (unless the log is off).
pub fn first_use(face: &str, config: &Config) {
    if config.log != "off" {
        write_all(&format!(
            "rocmguard {}: guarding {} device memory | {}\n",
            env!("CARGO_PKG_VERSION"),
            face,
            config.summary()
        ));
    }
}

/// Writes `text` to stderr and the log file, whole.
pub fn write_all(text: &str) {
    write(text, true);
}

/// As `write_all` while the process ends: a file lock held by a thread that is gone is skipped.
pub fn write_at_exit(text: &str) {
    write(text, false);
}

fn write(text: &str, wait: bool) {
    crate::platform::write_stderr(text.as_bytes());
    let file = if wait {
        Some(FILE.lock().unwrap_or_else(|e| e.into_inner()))
    } else {
        FILE.try_lock().ok()
    };
    if let Some(mut file) = file {
        if let Some(f) = file.as_mut() {
            let _ = f.write_all(text.as_bytes());
        }
    }
}
